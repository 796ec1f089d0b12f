import type { ReportModel, Table } from './report-model.ts';

/** The report as markdown: the same headline numbers and tables as the HTML page, the plots named. */

function cell(text: string): string {
  return text.replace(/\\/g, '\\\\').replace(/\|/g, '\\|').replace(/\n/g, ' ');
}

export function markdownTable(t: Pick<Table, 'header' | 'rows' | 'align' | 'links'>): string {
  const line = (cells: readonly string[], links?: (string | null)[]) =>
    `| ${cells.map((c, i) => (links?.[i] && c ? `[${cell(c)}](${links[i]})` : cell(c))).join(' | ')} |`;
  const rule = `|${t.header.map((_, i) => (t.align[i] === 'right' ? '---:' : ':---')).join('|')}|`;
  return [line(t.header), rule, ...t.rows.map((r, i) => line(r, t.links?.[i]))].join('\n');
}

export function renderMarkdown(model: ReportModel): string {
  const out: string[] = [`# ${model.title}`, ''];
  if (model.campaign) out.push(`Campaign: \`${model.campaign}\``, '');
  out.push(
    '## Summary',
    '',
    markdownTable({
      header: ['metric', 'value', 'detail'],
      align: ['left', 'right', 'left'],
      rows: model.headline.map((h) => [h.label, h.value, h.detail]),
    }),
    '',
  );
  for (const s of model.sections) {
    out.push(`## ${s.title}`, '', s.caption, '');
    if (s.figures.length) {
      out.push('Plots (in index.html):', '', ...s.figures.map((f) => `- ${f.caption}`), '');
    }
    for (const t of s.tables) out.push(`**${cell(t.caption)}**`, '', markdownTable(t), '');
    for (const n of s.notes) out.push(`> ${n}`, '');
  }
  out.push('## Inputs', '', ...model.sources.map((s) => `- ${s.label}: \`${s.path}\``), '');
  return out.join('\n');
}
