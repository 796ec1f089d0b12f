import type { Figure, ReportModel, Section, Table } from './report-model.ts';
import { htmlPageHead } from './html-page.ts';
import { escapeXml as escape } from './svg-charts.ts';

/**
 * The report as one static, self-contained HTML page: inline CSS and inline SVG, no script, and a
 * content security policy that forbids every fetch, so opening it never touches the network.
 */

const CSS = `
:root { color-scheme: light; --text: #1f2937; --muted: #4b5563; --line: #e5e7eb; --accent: #2563eb; --bg: #f8fafc; }
* { box-sizing: border-box; }
body {
  margin: 0; background: var(--bg); color: var(--text);
  font: 15px/1.5 system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif;
}
header { background: #0f172a; color: #f8fafc; padding: 28px 40px 22px; }
header h1 { margin: 0 0 4px; font-size: 26px; font-weight: 650; letter-spacing: -0.01em; }
header .meta { margin: 0; color: #cbd5e1; font-size: 14px; }
header code { color: #e2e8f0; }
nav { margin: 12px 0 0; font-size: 14px; }
nav a { color: #93c5fd; margin-right: 18px; text-decoration: none; }
main { max-width: 1360px; margin: 0 auto; padding: 8px 40px 40px; }
section { margin-top: 28px; }
h2 { font-size: 20px; margin: 0 0 4px; }
p.caption { margin: 0 0 14px; color: var(--muted); }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(250px, 1fr)); gap: 12px; }
.card { background: #fff; border: 1px solid var(--line); border-radius: 10px; padding: 14px 16px; }
.card .label { font-size: 13px; color: var(--muted); }
.card .value { font-size: 26px; font-weight: 650; margin: 2px 0; font-variant-numeric: tabular-nums; }
.card .detail { font-size: 12.5px; color: var(--muted); }
.figures { display: grid; grid-template-columns: repeat(auto-fill, minmax(min(100%, 560px), 1fr)); gap: 16px; }
figure { margin: 0; background: #fff; border: 1px solid var(--line); border-radius: 10px; padding: 10px 10px 8px; }
figure svg { display: block; width: 100%; height: auto; }
figcaption { font-size: 13px; color: var(--muted); padding: 4px 6px 0; }
.table-wrap {
  width: fit-content; max-width: 100%; overflow-x: auto; margin-top: 16px;
  background: #fff; border: 1px solid var(--line); border-radius: 10px;
}
table { border-collapse: collapse; font-size: 13.5px; font-variant-numeric: tabular-nums; }
caption { caption-side: top; text-align: left; font-weight: 600; padding: 10px 12px 6px; }
th, td { padding: 6px 12px; border-top: 1px solid var(--line); white-space: nowrap; }
th { background: #f1f5f9; font-weight: 600; text-align: left; }
td.num, th.num { text-align: right; }
tr.total td { font-weight: 600; background: #f8fafc; }
p.note { font-size: 13px; color: var(--muted); margin: 10px 0 0; }
footer { max-width: 1360px; margin: 0 auto; padding: 0 40px 40px; font-size: 13px; color: var(--muted); }
footer code { font-size: 12.5px; }
`;

function linked(text: string, href: string | null | undefined): string {
  return href ? `<a href="${escape(href)}">${escape(text)}</a>` : escape(text);
}

function table(t: Table): string {
  const cls = (i: number) => (t.align[i] === 'right' ? ' class="num"' : '');
  const head = `<tr>${t.header.map((h, i) => `<th scope="col"${cls(i)}>${escape(h)}</th>`).join('')}</tr>`;
  const body = t.rows
    .map(
      (r, ri) =>
        `<tr${r[0] === 'all' || r[0] === 'total' ? ' class="total"' : ''}>` +
        `${r.map((c, i) => `<td${cls(i)}>${linked(c, t.links?.[ri]?.[i])}</td>`).join('')}</tr>`,
    )
    .join('\n');
  return (
    `<div class="table-wrap"><table>\n<caption>${escape(t.caption)}</caption>\n` +
    `<thead>${head}</thead>\n<tbody>\n${body}\n</tbody>\n</table></div>`
  );
}

function figure(f: Figure): string {
  return `<figure id="${escape(f.id)}">\n${f.svg}\n<figcaption>${escape(f.caption)}</figcaption>\n</figure>`;
}

function section(s: Section): string {
  return [
    `<section id="${escape(s.id)}">`,
    `<h2>${escape(s.title)}</h2>`,
    `<p class="caption">${escape(s.caption)}</p>`,
    s.figures.length ? `<div class="figures">\n${s.figures.map(figure).join('\n')}\n</div>` : '',
    ...s.tables.map(table),
    ...s.notes.map((n) => `<p class="note">${escape(n)}</p>`),
    '</section>',
  ]
    .filter(Boolean)
    .join('\n');
}

export function renderHtml(model: ReportModel): string {
  const cards = model.headline
    .map(
      (h) =>
        `<div class="card"><div class="label">${escape(h.label)}</div><div ` +
        `class="value">${escape(h.value)}</div><div class="detail">${escape(h.detail)}</div></div>`,
    )
    .join('\n');
  const nav = [{ id: 'summary', title: 'Summary' }, ...model.sections]
    .map((s) => `<a href="#${escape(s.id)}">${escape(s.title)}</a>`)
    .join('');
  const campaign = model.campaign ? `campaign <code>${escape(model.campaign)}</code> · ` : '';
  const sections = `${model.sections.length} section${model.sections.length === 1 ? '' : 's'}`;
  const inputs = `${model.sources.length} input file${model.sources.length === 1 ? '' : 's'}`;
  return `${htmlPageHead(model.title, CSS)}
<header>
<h1>${escape(model.title)}</h1>
<p class="meta">${campaign}${sections} from ${inputs}</p>
<nav>${nav}</nav>
</header>
<main>
<section id="summary">
<h2>Summary</h2>
<p class="caption">The headline numbers; each section below shows where they come from.</p>
<div class="cards">
${cards}
</div>
</section>
${model.sections.map(section).join('\n')}
</main>
<footer>
<p>Inputs: ${model.sources.map((s) => `${escape(s.label)} <code>${escape(s.path)}</code>`).join(' · ')}</p>
<p>Written by <code>tbt report</code>. Static page: no scripts, no network.</p>
</footer>
</body>
</html>
`;
}
