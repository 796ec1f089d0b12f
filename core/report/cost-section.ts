import { count, dollars } from './format.ts';
import {
  evaluations,
  finalEvaluation,
  type EvalInput,
  type Figure,
  type Headline,
  type ReportInput,
  type SectionPart,
  type Table,
} from './report-model.ts';
import { barChart, formats } from './svg-charts.ts';

/**
 * What the campaign cost: probing, training and evaluation, and the cost per reliable task both as the
 * reference counts it (serving tokens of the evaluation only) and all-in (everything, which the
 * reference leaves out).
 */

interface Component {
  name: string;
  usd: number | null;
  from: string;
}

export interface CostTotals {
  components: Component[];
  /** Sum of the known components. */
  total: number;
  missing: string[];
  reliableTasks: number | null;
  allInPerReliableTask: number | null;
}

export function costTotals(input: ReportInput): CostTotals {
  const evals = evaluations(input);
  const costs = input.costs;
  let evaluation: Component;
  if (costs?.evaluation != null) {
    evaluation = { name: 'evaluation', usd: costs.evaluation, from: costs.source };
  } else if (evals.length > 0 && evals.every((e) => e.aggregate.cost)) {
    evaluation = {
      name: 'evaluation',
      usd: evals.reduce((s, e) => s + e.aggregate.cost!.campaign, 0),
      from: `campaign cost of ${evals.map((e) => e.label).join(' + ')}`,
    };
  } else {
    evaluation = {
      name: 'evaluation',
      usd: null,
      from: evals.length
        ? `not in ${evals
            .filter((e) => !e.aggregate.cost)
            .map((e) => e.label)
            .join(', ')}`
        : 'not given',
    };
  }
  const components: Component[] = [
    { name: 'probing', usd: costs?.probing ?? null, from: costs?.probing != null ? costs.source : 'not given' },
    { name: 'training', usd: costs?.training ?? null, from: costs?.training != null ? costs.source : 'not given' },
    evaluation,
  ];
  const total = components.reduce((s, c) => s + (c.usd ?? 0), 0);
  const final = finalEvaluation(input);
  const reliableTasks = final ? final.aggregate.overall.observed_all_pass.count : null;
  return {
    components,
    total,
    missing: components.filter((c) => c.usd === null).map((c) => c.name),
    reliableTasks,
    allInPerReliableTask: reliableTasks ? total / reliableTasks : null,
  };
}

/** What the cost parts of the section read: the totals, the final evaluation, its k, the missing components. */
interface CostContext {
  totals: CostTotals;
  final: EvalInput | null;
  k: number;
  missingText: string;
}

function campaignCostTable(c: CostContext): Table {
  const { totals, final, k } = c;
  const rows = totals.components.map((x) => [x.name, dollars(x.usd), x.from]);
  rows.push([
    'total',
    dollars(totals.total),
    totals.missing.length
      ? `known components only; missing: ${totals.missing.join(', ')}`
      : 'probing + training + evaluation',
  ]);
  if (final) {
    rows.push([
      `all-in cost per reliable task`,
      dollars(totals.allInPerReliableTask),
      `total / ${count(totals.reliableTasks ?? 0)} tasks at ${k}/${k} (${final.label})`,
    ]);
  }
  return {
    caption: 'Campaign cost',
    header: ['component', 'USD', 'from'],
    align: ['left', 'right', 'left'],
    rows,
  };
}

/** The cost of each stage as bars; null when fewer than two stages are known. */
function componentsFigure(totals: CostTotals): Figure | null {
  const known = totals.components.filter((c) => c.usd !== null);
  if (known.length < 2) return null;
  return {
    id: 'cost-components',
    caption: 'Cost of each stage of the campaign in USD (probing, training, evaluation).',
    svg: barChart({
      title: 'Campaign cost by stage',
      categories: totals.components.map((c) => c.name),
      series: [{ name: 'USD', values: totals.components.map((c) => c.usd), color: '#d97706' }],
      yLabel: 'USD',
      yFormat: formats.dollars,
      valueFormat: (v) => dollars(v),
    }),
  };
}

/** The headline of given campaign costs: all-in per reliable task with an evaluation, else the total. */
function campaignCostHeadline(c: CostContext): Headline {
  const { totals, final, k, missingText } = c;
  if (final) {
    return {
      label: 'All-in cost per reliable task',
      value: dollars(totals.allInPerReliableTask),
      detail:
        `${dollars(totals.total)} (probing, training, evaluation)${missingText} / ` +
        `${count(totals.reliableTasks ?? 0)} tasks at ${k}/${k}; serving only: ` +
        `${dollars(final.aggregate.cost?.per_reliable_task ?? null)}`,
    };
  }
  return {
    label: 'Campaign cost',
    value: dollars(totals.total),
    detail: `probing, training, evaluation${missingText}`,
  };
}

function servingCostTable(priced: EvalInput[]): Table {
  return {
    caption: 'Serving cost of each evaluation (inference tokens of policy, simulated user and judge)',
    header: [
      'evaluation',
      'campaign cost',
      'attempts',
      'passing attempts',
      'per successful attempt',
      'tasks at k/k',
      'per reliable task',
    ],
    align: ['left', 'right', 'right', 'right', 'right', 'right', 'right'],
    rows: priced.map((e) => {
      const c = e.aggregate.cost!;
      const r = e.aggregate.repeats;
      return [
        e.label,
        dollars(c.campaign),
        count(e.aggregate.overall.attempts),
        count(c.passing_attempts),
        dollars(c.per_successful_attempt),
        `${count(c.reliable_tasks)} (k = ${r})`,
        dollars(c.per_reliable_task),
      ];
    }),
  };
}

/** The headline without given campaign costs: serving cost per reliable task of the final evaluation. */
function servingCostHeadline(final: EvalInput, c: NonNullable<EvalInput['aggregate']['cost']>, k: number): Headline {
  return {
    label: `Cost per reliable task (${final.label}, serving)`,
    value: dollars(c.per_reliable_task),
    detail:
      `${dollars(c.campaign)} / ${count(c.reliable_tasks)} tasks at ${k}/${k}; per successful attempt ` +
      `${dollars(c.per_successful_attempt)}; training and probing not given`,
  };
}

export function costSection(input: ReportInput): SectionPart {
  const evals = evaluations(input);
  const final = finalEvaluation(input);
  const totals = costTotals(input);
  const k = final?.aggregate.repeats ?? 0;
  const missingText = totals.missing.length ? ` (excludes ${totals.missing.join(', ')}: not given)` : '';
  const context: CostContext = { totals, final, k, missingText };
  const tables: Table[] = [];
  const figures: Figure[] = [];
  const headline: Headline[] = [];

  if (input.costs) {
    tables.push(campaignCostTable(context));
    const components = componentsFigure(totals);
    if (components) figures.push(components);
    headline.push(campaignCostHeadline(context));
  }

  const priced = evals.filter((e) => e.aggregate.cost);
  if (priced.length) {
    tables.push(servingCostTable(priced));
    if (!input.costs && final?.aggregate.cost) headline.push(servingCostHeadline(final, final.aggregate.cost, k));
  }
  const notes = [
    'Cost per reliable task = cost / tasks passed in all k attempts; the serving figure counts evaluation tokens ' +
      'only (as the reference does), the all-in figure adds probing and training.',
  ];

  return {
    headline,
    section: {
      id: 'cost',
      title: 'Cost',
      caption: input.costs
        ? `What the campaign cost${missingText}, and the cost per reliable task.`
        : 'Serving cost of the evaluations and the cost per reliable task.',
      figures,
      tables,
      notes,
    },
  };
}
