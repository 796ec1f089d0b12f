import { COST_SCOPE_ORDER, COST_SCOPES, type CostFigures, type CostScope } from '../metrics.ts';
import { count, dollars } from './format.ts';
import {
  evaluations,
  finalEvaluation,
  type EvalCostReport,
  type EvalInput,
  type Figure,
  type Headline,
  type ReportInput,
  type SectionPart,
  type Table,
} from './report-model.ts';
import { barChart, formats } from './svg-charts.ts';

/**
 * What the campaign cost: probing, training and evaluation, and the cost per reliable task three ways: policy
 * only (the evaluated model's inference tokens of the evaluation, as the reference counts its $8.00), all roles
 * (adds the simulated user and the judge) and all-in (adds probing and training, which the reference leaves out).
 */

/** What a figure shows when its aggregate predates it (schema_version 1 recorded no policy-only figures). */
export const NOT_RECORDED = 'not recorded';

/** One figure of one scope in dollars, or NOT_RECORDED. */
function scopeDollars(c: EvalCostReport, scope: CostScope, figure: keyof CostFigures): string {
  const figures = c[scope];
  return figures ? dollars(figures[figure]) : NOT_RECORDED;
}

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
      // The evaluation stage paid every role's tokens.
      usd: evals.reduce((s, e) => s + e.aggregate.cost!.all_roles.campaign, 0),
      from: `all-roles campaign cost of ${evals.map((e) => e.label).join(' + ')}`,
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
        `${count(totals.reliableTasks ?? 0)} tasks at ${k}/${k}; evaluation only: ` +
        scopesText(final, 'per_reliable_task'),
    };
  }
  return {
    label: 'Campaign cost',
    value: dollars(totals.total),
    detail: `probing, training, evaluation${missingText}`,
  };
}

/** "policy only $X, all roles $Y" for one figure of an evaluation; n/a without a cost. */
function scopesText(e: EvalInput, figure: keyof CostFigures): string {
  const c = e.aggregate.cost;
  if (!c) return 'n/a (no prices)';
  return COST_SCOPE_ORDER.map((scope) => `${COST_SCOPES[scope].label} ${scopeDollars(c, scope, figure)}`).join(', ');
}

/** Each evaluation's cost figures, one row per scope, the reference's (policy only) first. */
function evaluationCostTable(priced: EvalInput[]): Table {
  return {
    caption:
      "Evaluation cost: policy only counts the evaluated model's inference tokens (the reference's figure), " +
      'all roles adds the simulated user and the judge',
    header: [
      'evaluation',
      'tokens counted',
      'campaign cost',
      'attempts',
      'passing attempts',
      'per successful attempt',
      'tasks at k/k',
      'per reliable task',
    ],
    align: ['left', 'left', 'right', 'right', 'right', 'right', 'right', 'right'],
    rows: priced.flatMap((e) => {
      const c = e.aggregate.cost!;
      return COST_SCOPE_ORDER.map((scope) => [
        e.label,
        COST_SCOPES[scope].label,
        scopeDollars(c, scope, 'campaign'),
        count(e.aggregate.overall.attempts),
        count(c.passing_attempts),
        scopeDollars(c, scope, 'per_successful_attempt'),
        `${count(c.reliable_tasks)} (k = ${e.aggregate.repeats})`,
        scopeDollars(c, scope, 'per_reliable_task'),
      ]);
    }),
  };
}

/**
 * The headline without given campaign costs: the final evaluation's cost per reliable task, policy only (the
 * reference's figure) when recorded, else all roles.
 */
function evaluationCostHeadline(final: EvalInput, c: EvalCostReport, k: number): Headline {
  const figures = c.policy_only ?? c.all_roles;
  const scope: CostScope = c.policy_only ? 'policy_only' : 'all_roles';
  const other: CostScope = c.policy_only ? 'all_roles' : 'policy_only';
  return {
    label: `Cost per reliable task (${final.label}, ${COST_SCOPES[scope].label})`,
    value: dollars(figures.per_reliable_task),
    detail:
      `${dollars(figures.campaign)} (${COST_SCOPES[scope].counts}) / ${count(c.reliable_tasks)} tasks at ${k}/${k}; ` +
      `${COST_SCOPES[other].label} ${scopeDollars(c, other, 'per_reliable_task')}; per successful attempt: ` +
      `${scopesText(final, 'per_successful_attempt')}; training and probing not given`,
  };
}

/** Which evaluations lack the policy-only figures, and how to get them. */
function notRecordedNote(priced: EvalInput[]): string | null {
  const old = priced.filter((e) => !e.aggregate.cost!.policy_only).map((e) => e.label);
  if (!old.length) return null;
  return (
    `Policy-only cost ${NOT_RECORDED} in ${old.join(', ')}: the aggregate was written before it was (schema ` +
    `version 1); run 'tbt eval aggregate' again on the same results to get it.`
  );
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
    tables.push(evaluationCostTable(priced));
    if (!input.costs && final?.aggregate.cost) headline.push(evaluationCostHeadline(final, final.aggregate.cost, k));
  }
  const notes = [
    'Cost per reliable task = cost / tasks passed in all k attempts, each figure named for the tokens it divides: ' +
      "policy only counts the evaluated model's inference tokens of the evaluation, as the reference's $8.00 " +
      'does; all roles adds the simulated user and the judge; all-in adds probing and training to all roles.',
  ];
  const old = notRecordedNote(priced);
  if (old) notes.push(old);

  return {
    headline,
    section: {
      id: 'cost',
      title: 'Cost',
      caption: input.costs
        ? `What the campaign cost${missingText}, and the cost per reliable task.`
        : 'Cost of the evaluations and the cost per reliable task, policy only and all roles.',
      figures,
      tables,
      notes,
    },
  };
}
