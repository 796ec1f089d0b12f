import { compareStrings } from '../difficulty.ts';
import { COST_SCOPE_ORDER, COST_SCOPES, pairedComparison, type Comparison, type Summary } from '../metrics.ts';
import { NOT_RECORDED } from './cost-section.ts';
import { EPISODE_OUTCOMES } from './episode-selection.ts';
import { count, dollars, percent, percentInterval, points, pointsInterval } from './format.ts';
import {
  evaluations,
  finalEvaluation,
  type EvalEpisodes,
  type EvalInput,
  type Figure,
  type Headline,
  type ReportInput,
  type SectionPart,
  type Table,
} from './report-model.ts';
import { barChart, formats, PALETTE, scatterChart, type ScatterSeries } from './svg-charts.ts';
import { leftOutNote, withoutTaskErrorTasks } from '../task-error-pairing.ts';

/**
 * Evaluation results (docs/reference-rules.md §5): pass@1, unbiased pass@k and pass^k, the observed k/k count
 * with Wilson intervals, per domain; before against after when both are given; and pass@1 against
 * all-roles cost per attempt. pass^k is always the unbiased C(c,k)/C(n,k), never (c/n)^k, and never the k/k count.
 */

export const PAIRED_RESAMPLES = 10_000;
export const PAIRED_SEED = 42;
const ALL = 'all';

const COLORS: Record<string, string> = { before: PALETTE[0], after: PALETTE[1], evaluation: PALETTE[2] };

function estimateAt(list: Summary['pass_at_k'], k: number): number {
  return list.find((x) => x.k === k)!.estimate;
}

interface Row {
  name: string;
  summary: Summary;
  costPerAttempt: number | null;
}

function rowsOf(e: EvalInput): Row[] {
  const a = e.aggregate;
  const domains = Object.keys(a.domains).sort(compareStrings);
  return [
    ...domains.map((d) => ({
      name: d,
      summary: a.domains[d]!,
      costPerAttempt: a.cost ? a.cost.domains[d]!.all_roles.campaign / a.domains[d]!.attempts : null,
    })),
    { name: ALL, summary: a.overall, costPerAttempt: a.cost ? a.cost.all_roles.campaign / a.overall.attempts : null },
  ];
}

function allPass(s: Summary): string {
  return `${count(s.observed_all_pass.count)} (${percent(s.observed_all_pass.rate)})`;
}

function evalTable(e: EvalInput): Table {
  const k = e.aggregate.repeats;
  const withCost = e.aggregate.cost !== null;
  const header = [
    'domain',
    'tasks',
    'attempts',
    'pass@1',
    'Wilson 95%',
    `pass@${k}`,
    `pass^${k}`,
    `observed ${k}/${k}`,
    'Wilson 95%',
    'solved ≥ 1',
  ];
  if (withCost) header.push('cost / attempt, all roles');
  return {
    caption: `${e.label}: ${count(e.aggregate.overall.tasks)} tasks × ${k} attempts (${e.source})`,
    header,
    align: header.map((_, i) => (i === 0 ? 'left' : 'right')),
    rows: rowsOf(e).map((r) => {
      const s = r.summary;
      const cells = [
        r.name,
        count(s.tasks),
        count(s.attempts),
        percent(s.pass_at_1.estimate),
        percentInterval(s.pass_at_1.wilson_attempts),
        percent(estimateAt(s.pass_at_k, k)),
        percent(estimateAt(s.pass_hat_k, k)),
        allPass(s),
        percentInterval(s.observed_all_pass.wilson),
        `${count(s.solved_at_least_once.count)} (${percent(s.solved_at_least_once.rate)})`,
      ];
      if (withCost) cells.push(dollars(r.costPerAttempt));
      return cells;
    }),
  };
}

function kLabel(metric: string, kb: number, ka: number): string {
  return kb === ka ? metric.replace(/\bk\b/g, String(kb)) : `${metric} (k = ${kb} / ${ka})`;
}

function comparisonTable(before: EvalInput, after: EvalInput, paired: Comparison | null): Table {
  const b = before.aggregate;
  const a = after.aggregate;
  const kb = b.repeats;
  const ka = a.repeats;
  const change = (x: number, y: number) => points(y - x);
  // undefined: a figure the aggregate did not record (policy only, in one written before it was).
  type CostOf = (c: NonNullable<typeof b.cost>, s: Summary) => number | null | undefined;
  const costRow = (name: string, f: CostOf): string[] => {
    const x = b.cost ? f(b.cost, b.overall) : null;
    const y = a.cost ? f(a.cost, a.overall) : null;
    const delta =
      typeof x === 'number' && typeof y === 'number' ? `${y - x >= 0 ? '+' : '-'}${dollars(Math.abs(y - x))}` : 'n/a';
    const show = (v: number | null | undefined) => (v === undefined ? NOT_RECORDED : dollars(v));
    return [name, show(x), show(y), delta, ''];
  };
  const rows: string[][] = [
    [
      'pass@1',
      percent(b.overall.pass_at_1.estimate),
      percent(a.overall.pass_at_1.estimate),
      change(b.overall.pass_at_1.estimate, a.overall.pass_at_1.estimate),
      paired ? pointsInterval(paired.pass_at_1.interval) : '',
    ],
    [
      kLabel('observed k/k', kb, ka),
      allPass(b.overall),
      allPass(a.overall),
      `${a.overall.observed_all_pass.count - b.overall.observed_all_pass.count >= 0 ? '+' : ''}` +
        `${a.overall.observed_all_pass.count - b.overall.observed_all_pass.count} ` +
        `tasks`,
      paired ? pointsInterval(paired.all_pass_rate.interval) : '',
    ],
    [
      kLabel('pass@k', kb, ka),
      percent(estimateAt(b.overall.pass_at_k, kb)),
      percent(estimateAt(a.overall.pass_at_k, ka)),
      change(estimateAt(b.overall.pass_at_k, kb), estimateAt(a.overall.pass_at_k, ka)),
      '',
    ],
    [
      kLabel('pass^k', kb, ka),
      percent(estimateAt(b.overall.pass_hat_k, kb)),
      percent(estimateAt(a.overall.pass_hat_k, ka)),
      change(estimateAt(b.overall.pass_hat_k, kb), estimateAt(a.overall.pass_hat_k, ka)),
      '',
    ],
    [
      'solved ≥ 1',
      percent(b.overall.solved_at_least_once.rate),
      percent(a.overall.solved_at_least_once.rate),
      change(b.overall.solved_at_least_once.rate, a.overall.solved_at_least_once.rate),
      '',
    ],
  ];
  if (b.cost || a.cost) {
    rows.push(
      costRow('cost per attempt, all roles', (c, s) => c.all_roles.campaign / s.attempts),
      ...(['per_successful_attempt', 'per_reliable_task'] as const).flatMap((figure) =>
        COST_SCOPE_ORDER.map((scope) =>
          costRow(`cost ${figure.replace(/_/g, ' ')}, ${COST_SCOPES[scope].label}`, (c) => c[scope]?.[figure]),
        ),
      ),
    );
  }
  return {
    caption: `${before.label} against ${after.label}`,
    header: ['metric', before.label, after.label, 'change', '95% paired bootstrap of the change'],
    align: ['left', 'right', 'right', 'right', 'right'],
    rows,
  };
}

function pairedDomainTable(before: EvalInput, after: EvalInput, paired: Comparison): Table {
  const rows = Object.entries(paired.domains).map(([d, x]) => {
    const kb = before.aggregate.domains[d]!;
    const ka = after.aggregate.domains[d]!;
    return [
      d,
      count(x.tasks),
      percent(x.pass_at_1.a),
      percent(x.pass_at_1.b),
      points(x.pass_at_1.difference),
      pointsInterval(x.pass_at_1.interval),
      allPass(kb),
      allPass(ka),
    ];
  });
  rows.push([
    ALL,
    count(paired.tasks),
    percent(paired.pass_at_1.a),
    percent(paired.pass_at_1.b),
    points(paired.pass_at_1.difference),
    pointsInterval(paired.pass_at_1.interval),
    allPass(before.aggregate.overall),
    allPass(after.aggregate.overall),
  ]);
  return {
    caption:
      `Paired per-task comparison by domain (${count(paired.tasks)} tasks; ${after.label} better on ` +
      `${paired.b_better}, worse on ${paired.b_worse}, equal on ${paired.equal})`,
    header: [
      'domain',
      'tasks',
      `pass@1 ${before.label}`,
      `pass@1 ${after.label}`,
      'change',
      '95% paired bootstrap',
      `observed k/k ${before.label}`,
      `observed k/k ${after.label}`,
    ],
    align: ['left', 'right', 'right', 'right', 'right', 'right', 'right', 'right'],
    rows,
  };
}

function headline(input: ReportInput, paired: Comparison | null): Headline[] {
  const final = finalEvaluation(input)!;
  const f = final.aggregate;
  const k = f.repeats;
  const before = input.before && input.after ? input.before.aggregate : null;
  const was = (text: string) => (before ? `${input.before!.label}: ${text}` : '');
  const join = (...parts: string[]) => parts.filter(Boolean).join('; ');
  const pass1 = f.overall.pass_at_1.estimate;
  return [
    {
      label: `pass@1 (${final.label})`,
      value: percent(pass1),
      detail: before
        ? join(
            was(percent(before.overall.pass_at_1.estimate)),
            `change ${points(pass1 - before.overall.pass_at_1.estimate)}` +
              `${paired ? `, 95% paired bootstrap ${pointsInterval(paired.pass_at_1.interval)}` : ''}`,
          )
        : `Wilson 95% ${percentInterval(f.overall.pass_at_1.wilson_attempts)}; ${count(f.overall.successes)} of ` +
          `${count(f.overall.attempts)} attempts`,
    },
    {
      label: `Observed ${k}/${k} (${final.label})`,
      value: `${count(f.overall.observed_all_pass.count)} of ${count(f.overall.tasks)}`,
      detail: join(
        `${percent(f.overall.observed_all_pass.rate)}, Wilson 95% ` +
          `${percentInterval(f.overall.observed_all_pass.wilson)}`,
        before ? was(`${count(before.overall.observed_all_pass.count)} of ${count(before.overall.tasks)}`) : '',
      ),
    },
    {
      label: `pass@${k} (${final.label})`,
      value: percent(estimateAt(f.overall.pass_at_k, k)),
      detail: join(
        'unbiased 1 − C(n−c,k)/C(n,k)',
        before ? was(percent(estimateAt(before.overall.pass_at_k, before.repeats))) : '',
      ),
    },
    {
      label: `pass^${k} (${final.label})`,
      value: percent(estimateAt(f.overall.pass_hat_k, k)),
      detail: join(
        'unbiased C(c,k)/C(n,k), not (c/n)^k',
        before ? was(percent(estimateAt(before.overall.pass_hat_k, before.repeats))) : '',
      ),
    },
  ];
}

/** How the plots of the section draw each evaluation: its colour, the categories and its summary of each. */
interface EvalPlot {
  evals: EvalInput[];
  categories: string[];
  colorOf: (e: EvalInput, i: number) => string;
  summaryOf: (e: EvalInput, c: string) => Summary | null;
}

function evalPlot(evals: EvalInput[]): EvalPlot {
  const domains = [...new Set(evals.flatMap((e) => Object.keys(e.aggregate.domains)))].sort(compareStrings);
  return {
    evals,
    categories: [...domains, ALL],
    colorOf: (e, i) => COLORS[e.label] ?? PALETTE[(i + 2) % PALETTE.length]!,
    summaryOf: (e, c) => (c === ALL ? e.aggregate.overall : (e.aggregate.domains[c] ?? null)),
  };
}

/** The paired bootstrap of before against after; null (with a note) when the two cannot be paired. */
function pairedOrNote(input: ReportInput, notes: string[]): Comparison | null {
  if (!(input.before && input.after)) return null;
  const paired = withoutTaskErrorTasks(input.before.aggregate, input.after.aggregate);
  if (paired.leftOut.length) notes.push(`${leftOutNote(paired.leftOut)}.`);
  try {
    return pairedComparison(paired.a, paired.b, { resamples: PAIRED_RESAMPLES, seed: PAIRED_SEED });
  } catch (err) {
    if (!(err instanceof RangeError)) throw err;
    notes.push(`No paired comparison: ${err.message}.`);
    return null;
  }
}

function pass1Figure({ evals, categories, colorOf, summaryOf }: EvalPlot): Figure {
  const pass1 = barChart({
    title: 'pass@1 by domain',
    categories,
    series: evals.map((e, i) => ({
      name: e.label,
      color: colorOf(e, i),
      values: categories.map((c) => summaryOf(e, c)?.pass_at_1.estimate ?? null),
      intervals: categories.map((c) => summaryOf(e, c)?.pass_at_1.wilson_attempts ?? null),
    })),
    yLabel: 'pass@1',
    yFormat: formats.percent,
    valueFormat: (v) => `${(100 * v).toFixed(1)}%`,
    yDomain: [0, 1],
  });
  return {
    id: 'eval-pass1',
    caption:
      `pass@1 (mean success over attempts) per domain and overall for ` +
      `${evals.map((e) => e.label).join(' and ')}; whiskers: Wilson 95% over attempts.`,
    svg: pass1,
  };
}

function allPassFigure({ evals, categories, colorOf, summaryOf }: EvalPlot): Figure {
  const kText = [...new Set(evals.map((e) => e.aggregate.repeats))].join(' / ');
  const allPassChart = barChart({
    title: `Observed k/k by domain (k = ${kText})`,
    categories,
    series: evals.map((e, i) => ({
      name: e.label,
      color: colorOf(e, i),
      values: categories.map((c) => summaryOf(e, c)?.observed_all_pass.rate ?? null),
      intervals: categories.map((c) => summaryOf(e, c)?.observed_all_pass.wilson ?? null),
    })),
    yLabel: 'share of tasks at k/k',
    yFormat: formats.percent,
    valueFormat: (v) => `${(100 * v).toFixed(1)}%`,
    yDomain: [0, 1],
  });
  return {
    id: 'eval-all-pass',
    caption:
      'Share of tasks that passed every one of their k attempts (observed k/k) per domain; whiskers: Wilson 95% ' +
      'over tasks.',
    svg: allPassChart,
  };
}

/**
 * pass@1 against all-roles cost per attempt (every aggregate with a cost records it, older ones too), for the
 * evaluations that have a cost; null when none has.
 */
function costFigure({ evals, colorOf }: EvalPlot): Figure | null {
  const withCost = evals.map((e, i) => ({ e, i })).filter(({ e }) => e.aggregate.cost !== null);
  if (withCost.length === 0) return null;
  const series: ScatterSeries[] = withCost.map(({ e, i }) => ({
    name: e.label,
    color: colorOf(e, i),
    points: rowsOf(e).map((r) => ({
      x: r.costPerAttempt!,
      y: r.summary.pass_at_1.estimate,
      key: r.name,
      label: r.name === ALL ? `${e.label} (all)` : r.name,
      emphasis: r.name === ALL,
    })),
  }));
  return {
    id: 'eval-cost',
    caption:
      `pass@1 against cost per attempt, all roles (policy + simulated user + judge campaign cost / attempts): ` +
      `one small point per domain, a large one per evaluation overall` +
      `${withCost.length > 1 ? '; dotted lines join the same domain' : ''}.`,
    svg: scatterChart({
      title: 'pass@1 against cost per attempt',
      series,
      xLabel: 'cost per attempt, all roles (USD)',
      yLabel: 'pass@1',
      xFormat: formats.dollars,
      yFormat: formats.percent,
      yDomain: [0, 1],
    }),
  };
}

function missingCostNote(evals: EvalInput[]): string | null {
  const missingCost = evals.filter((e) => e.aggregate.cost === null).map((e) => e.label);
  if (!missingCost.length) return null;
  return (
    `No cost in ${missingCost.join(', ')} (run 'tbt eval aggregate' with --prices to get it), so ` +
    `${missingCost.length === evals.length ? 'there is no cost plot' : 'it is left out of the cost plot'}.`
  );
}

function evalTables(input: ReportInput, evals: EvalInput[], paired: Comparison | null): Table[] {
  const tables: Table[] = [];
  if (input.before && input.after) {
    tables.push(comparisonTable(input.before, input.after, paired));
    if (paired) tables.push(pairedDomainTable(input.before, input.after, paired));
  }
  tables.push(...evals.map(evalTable));
  tables.push(...evals.flatMap((e) => (e.episodes ? [episodesTable(e.label, e.episodes)] : [])));
  return tables;
}

function evalCaption(input: ReportInput, evals: EvalInput[]): string {
  const final = finalEvaluation(input)!;
  return input.before && input.after
    ? `${input.before.label} against ${input.after.label} on ${count(final.aggregate.overall.tasks)} tasks: ` +
        `pass@1, unbiased pass@k and pass^k, observed k/k, per domain, with intervals.`
    : `${evals.map((e) => e.label).join(', ')} on ${count(final.aggregate.overall.tasks)} tasks × ` +
        `${final.aggregate.repeats} attempts: pass@1, unbiased pass@k and pass^k, observed k/k, per domain, with ` +
        `intervals.`;
}

/** Per task, links to the pages of one episode of each outcome it had (passed, failed, infra or task error). */
function episodesTable(label: string, episodes: EvalEpisodes): Table {
  const header = [
    'task',
    'domain',
    'passed / graded',
    'passed episode',
    'failed episode',
    'infra error episode',
    'task error episode',
  ];
  const cells = episodes.tasks.map((t) => {
    const chosen = EPISODE_OUTCOMES.map((o) => t.chosen.find((c) => c.outcome === o));
    return {
      row: [t.uid, t.domain, `${t.passed} / ${t.attempts}`, ...chosen.map((c) => (c ? `#${c.repetition}` : ''))],
      links: [null, null, null, ...chosen.map((c) => (c ? (t.hrefs[c.id] ?? null) : null))],
    };
  });
  return {
    caption: `${label}: episodes per task, each linking to its page`,
    header,
    align: header.map((_, i) => (i === 2 ? 'right' : 'left')),
    rows: cells.map((c) => c.row),
    links: cells.map((c) => c.links),
  };
}

export function evalSection(input: ReportInput): SectionPart {
  const evals = evaluations(input);
  const notes: string[] = [
    `pass^k is the unbiased C(c,k)/C(n,k) (all k attempts drawn from the n succeed), not the biased (c/n)^k that the ` +
      `reference's aggregator reports under that name; observed k/k counts the tasks that passed every one of their ` +
      `k attempts.`,
    'Wilson intervals for pass@1 treat attempts as independent, so they are narrower than the truth when tasks ' +
      'differ; the paired bootstrap resamples tasks.',
  ];
  const paired = pairedOrNote(input, notes);

  const plot = evalPlot(evals);
  const figures: Figure[] = [pass1Figure(plot), allPassFigure(plot)];
  const cost = costFigure(plot);
  if (cost) figures.push(cost);
  const missing = missingCostNote(evals);
  if (missing) notes.push(missing);
  if (evals.some((e) => e.episodes))
    notes.push(
      'Episode pages: only the first passed, the first failed and the first infrastructure-errored attempt of each ' +
        "task has a page (at most three per task); every other episode is in the control database: 'tbt episodes " +
        "show ID'.",
    );
  for (const e of evals) notes.push(...(e.episodes?.notes ?? []).map((n) => `Episode pages (${e.label}): ${n}`));

  return {
    headline: headline(input, paired),
    section: {
      id: 'evaluation',
      title: 'Evaluation',
      caption: evalCaption(input, evals),
      figures,
      tables: evalTables(input, evals, paired),
      notes,
    },
  };
}
