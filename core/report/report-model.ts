import type { BandName } from '../difficulty.ts';
import type { CostFigures, Summary } from '../metrics.ts';
import type { ChosenTaskEpisodes } from './episode-selection.ts';

/**
 * The campaign report as data: what goes in (ReportInput, already parsed, each part optional) and
 * what comes out (ReportModel: headline numbers, then sections of plots and tables, every number
 * already formatted), so the HTML page and the markdown summary render the same text.
 */

// ---------------------------------------------------------------------------------------------------
// Input

/** One assessed uid of the probe (a line of `tbt prepare`'s aggregates.jsonl, the fields the report reads). */
export interface ProbeRow {
  uid: string;
  clean_runs: number;
  successes: number;
  pass_rate: number;
  difficulty: BandName;
  eligible: boolean;
  rejection_reasons: string[];
}

export interface ProbeInput {
  /** Where the rows came from (shown in the report). */
  source: string;
  rows: ProbeRow[];
  /** Bands kept for training; highlighted in the histogram. */
  retainedBands: BandName[];
}

/** One training step as the campaign records it. */
export interface TrainingStep {
  step: number;
  mean_reward: number;
  /** Fraction of groups whose rewards were not all equal (the groups that carry a GRPO signal). */
  informative_group_fraction: number;
  loss: number;
  grad_norm: number;
  groups: number;
  infra_errors_refilled: number;
  zero_variance_replaced: number;
  wall_s: number;
  /** Versions the trained episodes lagged behind the weights the update started from (overlapped steps). */
  lag_mean?: number | null;
  lag_max?: number | null;
  /** Trained tokens per sampler weight version (partial rollouts mix them); absent or null: not recorded. */
  version_mix?: Record<string, number> | null;
  /** Which weights the step trained: all of them, or LoRA adapters only (absent in older runs: full). */
  training_mode?: 'full' | 'lora';
}

export interface StepsInput {
  source: string;
  /** Sorted by step, each step once. */
  steps: TrainingStep[];
}

/** The cost figures of one evaluation or domain, per scope (core/metrics.ts COST_SCOPES). */
export interface EvalCostReport {
  passing_attempts: number;
  reliable_tasks: number;
  all_roles: CostFigures;
  /** null: not recorded (an aggregate of schema_version 1, written before the policy-only figures were). */
  policy_only: CostFigures | null;
}

/** The parts of a `tbt eval aggregate --out` file the report reads. */
export interface EvalAggregate {
  repeats: number;
  overall: Summary;
  domains: Record<string, Summary>;
  cost: (EvalCostReport & { domains: Record<string, EvalCostReport> }) | null;
  tasks: { uid: string; domain: string; n: number; c: number; cost: number | null }[];
  /** Tasks left out of the scores: their test code raised the same exception twice (absent: none, or older). */
  task_errors?: { uid: string; keys: number; cause: string }[];
}

export interface EvalInput {
  /** Name of the evaluation in legends and tables ("before", "after", "evaluation"). */
  label: string;
  source: string;
  aggregate: EvalAggregate;
  /** Episodes with a page next to the report (`tbt report --episode-pages`); absent = no episode table. */
  episodes?: EvalEpisodes;
}

/** Per task, the episodes of an evaluation that have a page (core/report/episode-selection.ts chose them). */
export interface EvalEpisodes {
  tasks: (ChosenTaskEpisodes & { hrefs: Record<string, string> })[];
  /** Why some or all pages are missing (no result lines, rows without a record). */
  notes: string[];
}

/** Costs the evaluation files do not hold, in USD; null = not known. */
export interface CostsInput {
  source: string;
  probing: number | null;
  training: number | null;
  /** When null, the evaluation cost is the sum of the eval files' campaign costs (when they all have one). */
  evaluation: number | null;
}

export interface ReportInput {
  title: string;
  campaign: string | null;
  probe: ProbeInput | null;
  steps: StepsInput | null;
  /** Evaluation of the starting checkpoint; with `after` it makes a before/after comparison. */
  before: EvalInput | null;
  after: EvalInput | null;
  /** A single evaluation, without comparison. */
  eval: EvalInput | null;
  costs: CostsInput | null;
}

// ---------------------------------------------------------------------------------------------------
// Output

export interface Headline {
  label: string;
  value: string;
  /** One line of context: the comparison, the interval, the denominator. */
  detail: string;
}

export interface Table {
  caption: string;
  header: string[];
  rows: string[][];
  /** Per column; numeric columns align right. */
  align: ('left' | 'right')[];
  /** A link per cell (same shape as rows; null = none): e.g. to an episode's page. */
  links?: (string | null)[][];
}

export interface Figure {
  id: string;
  /** One line: what the plot shows. */
  caption: string;
  /** A standalone <svg> element. */
  svg: string;
}

export interface Section {
  id: string;
  title: string;
  /** One line: what the section shows. */
  caption: string;
  figures: Figure[];
  tables: Table[];
  notes: string[];
}

export interface ReportModel {
  title: string;
  campaign: string | null;
  headline: Headline[];
  sections: Section[];
  sources: { label: string; path: string }[];
}

/** What a section builder contributes: its headline numbers and its section. */
export interface SectionPart {
  headline: Headline[];
  section: Section;
}

export function evaluations(input: ReportInput): EvalInput[] {
  return [input.before, input.after, input.eval].filter((e): e is EvalInput => e !== null);
}

/** The evaluation whose numbers lead the report: the checkpoint after training, else the single one. */
export function finalEvaluation(input: ReportInput): EvalInput | null {
  return input.after ?? input.eval ?? input.before;
}
