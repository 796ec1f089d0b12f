import { z } from 'zod';
import { BAND_NAMES, DEFAULT_RETAINED_BANDS, type BandName } from '../difficulty.ts';
import { BadInputError } from '../errors.ts';
import type {
  CostsInput,
  EvalAggregate,
  EvalInput,
  ProbeInput,
  ProbeRow,
  StepsInput,
  TrainingStep,
} from './report-model.ts';

/**
 * Parsing of the report's input files from their text (the caller reads the files). Every error is a
 * BadInputError naming the file, the line for JSONL, and the field at fault.
 */

function show(value: unknown): string {
  const text = JSON.stringify(value) ?? String(value);
  return text.length > 60 ? `${text.slice(0, 57)}...` : text;
}

function valueAt(root: unknown, path: readonly PropertyKey[]): unknown {
  let value = root;
  for (const key of path) {
    if (value === null || typeof value !== 'object') return undefined;
    value = (value as Record<PropertyKey, unknown>)[key];
  }
  return value;
}

/** "field a.b.0: message (got ...)" for the first problem zod found. */
function describeIssue(error: z.ZodError, root: unknown): string {
  const issue = error.issues[0]!;
  if (issue.code === 'unrecognized_keys') {
    const field = [...issue.path, issue.keys[0]].map(String).join('.');
    return `field ${field}: unknown field`;
  }
  const field = issue.path.map(String).join('.') || '(root)';
  const value = valueAt(root, issue.path);
  if (value === undefined && issue.code === 'invalid_type')
    return `field ${field}: missing (expected ${issue.expected})`;
  return `field ${field}: ${issue.message} (got ${show(value)})`;
}

function jsonLines(file: string, text: string): { line: number; value: unknown }[] {
  const out: { line: number; value: unknown }[] = [];
  text.split('\n').forEach((raw, i) => {
    const trimmed = raw.trim();
    if (!trimmed) return;
    try {
      out.push({ line: i + 1, value: JSON.parse(trimmed) });
    } catch (err) {
      throw new BadInputError(`${file}:${i + 1}: invalid JSON: ${(err as Error).message}`);
    }
  });
  return out;
}

function jsonDocument(file: string, text: string): unknown {
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new BadInputError(`${file}: invalid JSON: ${(err as Error).message}`);
  }
}

const count = z.number().int().nonnegative();
const rate = z.number().min(0).max(1);
const interval = z.tuple([rate, rate]);

// ---------------------------------------------------------------------------------------------------
// Probe difficulty: the aggregates.jsonl of `tbt prepare`

const probeRowSchema = z.object({
  uid: z.string().min(1),
  clean_runs: z.number().int().min(1),
  successes: count,
  pass_rate: rate,
  difficulty: z.enum(BAND_NAMES as [BandName, ...BandName[]]),
  eligible: z.boolean(),
  rejection_reasons: z.array(z.string()),
});

/**
 * Rows of `tbt prepare`'s aggregates.jsonl. Retained bands are read back from the rows: a band is
 * retained when one of its rows was not rejected for 'difficulty_not_retained'; a band without rows
 * keeps its default status.
 */
export function parseProbeAggregates(file: string, text: string): ProbeInput {
  const rows: ProbeRow[] = [];
  const seen = new Map<string, number>();
  const bandLine = new Map<BandName, { retained: boolean; line: number }>();
  for (const { line, value } of jsonLines(file, text)) {
    const parsed = probeRowSchema.safeParse(value);
    if (!parsed.success) throw new BadInputError(`${file}:${line}: ${describeIssue(parsed.error, value)}`);
    const row = parsed.data;
    if (row.successes > row.clean_runs)
      throw new BadInputError(
        `${file}:${line}: field successes: ${row.successes} exceeds clean_runs ${row.clean_runs}`,
      );
    const first = seen.get(row.uid);
    if (first !== undefined)
      throw new BadInputError(`${file}:${line}: field uid: ${show(row.uid)} already appeared on line ${first}`);
    seen.set(row.uid, line);
    const retained = !row.rejection_reasons.includes('difficulty_not_retained');
    const known = bandLine.get(row.difficulty);
    if (known && known.retained !== retained) {
      throw new BadInputError(
        `${file}:${line}: field rejection_reasons: band ${row.difficulty} is ` +
          `${retained ? 'retained' : 'not retained'} here but ${known.retained ? 'retained' : 'not retained'} on ` +
          `line ${known.line}`,
      );
    }
    if (!known) bandLine.set(row.difficulty, { retained, line });
    rows.push(row);
  }
  if (rows.length === 0)
    throw new BadInputError(`${file}: no probe rows (expected the aggregates.jsonl written by 'tbt prepare')`);
  const retainedBands = BAND_NAMES.filter((b) => bandLine.get(b)?.retained ?? DEFAULT_RETAINED_BANDS.includes(b));
  return { source: file, rows, retainedBands };
}

// ---------------------------------------------------------------------------------------------------
// Training steps

const stepSchema = z.object({
  step: count,
  mean_reward: z.number(),
  informative_group_fraction: rate,
  loss: z.number(),
  grad_norm: z.number().nonnegative(),
  groups: count,
  infra_errors_refilled: count,
  zero_variance_replaced: count,
  wall_s: z.number().nonnegative(),
  // Steps recorded before overlapped training have no lag; null when the step trained on nothing.
  lag_mean: z.number().nonnegative().nullable().optional(),
  lag_max: z.number().nonnegative().nullable().optional(),
  // Steps whose episodes carried no token versions have none.
  version_mix: z.record(z.string(), count).nullable().optional(),
  // Steps recorded before LoRA trained every weight.
  training_mode: z.enum(['full', 'lora']).optional(),
});

/** One JSON object per training step; sorted by step, and a step may appear only once. */
export function parseTrainingSteps(file: string, text: string): StepsInput {
  const steps: (TrainingStep & { line: number })[] = [];
  const seen = new Map<number, number>();
  for (const { line, value } of jsonLines(file, text)) {
    if (value === null || typeof value !== 'object' || Array.isArray(value))
      throw new BadInputError(`${file}:${line}: expected a JSON object, got ${show(value)}`);
    const parsed = stepSchema.safeParse(value);
    if (!parsed.success) throw new BadInputError(`${file}:${line}: ${describeIssue(parsed.error, value)}`);
    const first = seen.get(parsed.data.step);
    if (first !== undefined)
      throw new BadInputError(
        `${file}:${line}: field step: step ${parsed.data.step} already appeared on line ${first}`,
      );
    seen.set(parsed.data.step, line);
    steps.push({ ...parsed.data, line });
  }
  if (steps.length === 0) throw new BadInputError(`${file}: no training steps (expected one JSON object per step)`);
  steps.sort((a, b) => a.step - b.step);
  return { source: file, steps: steps.map(({ line: _line, ...step }) => step) };
}

// ---------------------------------------------------------------------------------------------------
// Evaluation: the JSON written by `tbt eval aggregate --out`

const rateSummary = z.object({ count, rate, wilson: interval, clopper_pearson: interval });
const kEstimates = z.array(z.object({ k: z.number().int().min(1), estimate: rate })).min(1);
const summarySchema = z.object({
  tasks: z.number().int().min(1),
  attempts: z.number().int().min(1),
  successes: count,
  pass_at_1: z.object({ estimate: rate, wilson_attempts: interval, bootstrap_tasks: interval }),
  pass_at_k: kEstimates,
  pass_hat_k: kEstimates,
  observed_all_pass: rateSummary.extend({ k: z.number().int().min(1) }),
  solved_at_least_once: rateSummary,
});
const money = z.number().nonnegative();
const costFiguresSchema = z.object({
  campaign: money,
  per_successful_attempt: money.nullable(),
  per_reliable_task: money.nullable(),
});
/**
 * An aggregate of schema_version 1 held only the all-roles figures, at the top of its cost object: read them as
 * all_roles, and its policy-only figures as not recorded.
 */
function upgradeCostReport(value: unknown): unknown {
  if (value === null || typeof value !== 'object' || 'all_roles' in value || !('campaign' in value)) return value;
  const { campaign, per_successful_attempt, per_reliable_task, ...rest } = value as Record<string, unknown>;
  return { ...rest, all_roles: { campaign, per_successful_attempt, per_reliable_task }, policy_only: null };
}
const costReportFields = {
  passing_attempts: count,
  reliable_tasks: count,
  all_roles: costFiguresSchema,
  policy_only: costFiguresSchema.nullable(),
};
const costReportSchema = z.preprocess(upgradeCostReport, z.object(costReportFields));
const aggregateSchema = z.object({
  kind: z.literal('tbt-eval-aggregate'),
  repeats: z.number().int().min(1),
  overall: summarySchema,
  domains: z.record(z.string(), summarySchema),
  cost: z
    .preprocess(upgradeCostReport, z.object({ ...costReportFields, domains: z.record(z.string(), costReportSchema) }))
    .nullable(),
  tasks: z
    .array(
      z.object({
        uid: z.string().min(1),
        domain: z.string(),
        n: z.number().int().min(1),
        c: count,
        cost: money.nullable(),
      }),
    )
    .min(1),
  // Absent in aggregates written before task errors existed.
  task_errors: z.array(z.object({ uid: z.string(), keys: z.number().int(), cause: z.string() })).optional(),
});

export function parseEvalAggregate(file: string, text: string, label: string): EvalInput {
  const json = jsonDocument(file, text);
  const parsed = aggregateSchema.safeParse(json);
  if (!parsed.success)
    throw new BadInputError(
      `${file}: ${describeIssue(parsed.error, json)} (expected the output of 'tbt eval aggregate --out')`,
    );
  const aggregate: EvalAggregate = parsed.data;
  const k = aggregate.repeats;
  for (const [where, s] of [
    ['overall', aggregate.overall],
    ...Object.entries(aggregate.domains).map(([d, s]) => [`domains.${d}`, s] as const),
  ] as const) {
    if (!s.pass_at_k.some((x) => x.k === k))
      throw new BadInputError(`${file}: field ${where}.pass_at_k: no entry for k = repeats = ${k}`);
    if (!s.pass_hat_k.some((x) => x.k === k))
      throw new BadInputError(`${file}: field ${where}.pass_hat_k: no entry for k = repeats = ${k}`);
    if (s.successes > s.attempts)
      throw new BadInputError(`${file}: field ${where}.successes: ${s.successes} exceeds attempts ${s.attempts}`);
  }
  if (Object.keys(aggregate.domains).length === 0) throw new BadInputError(`${file}: field domains: empty`);
  if (aggregate.cost) {
    for (const d of Object.keys(aggregate.domains)) {
      if (!aggregate.cost.domains[d])
        throw new BadInputError(`${file}: field cost.domains.${d}: missing (domain ${d} has scores but no cost)`);
    }
  }
  return { label, source: file, aggregate };
}

// ---------------------------------------------------------------------------------------------------
// Costs outside the evaluation

const costsSchema = z
  .object({
    probing: money.nullable().optional(),
    training: money.nullable().optional(),
    evaluation: money.nullable().optional(),
  })
  .strict();

/** `{probing, training, evaluation}` in USD; each optional, at least one present. */
export function parseCosts(file: string, text: string): CostsInput {
  const json = jsonDocument(file, text);
  const parsed = costsSchema.safeParse(json);
  if (!parsed.success)
    throw new BadInputError(
      `${file}: ${describeIssue(parsed.error, json)} (expected {"probing": USD, "training": USD, "evaluation": USD}, ` +
        `each optional)`,
    );
  const { probing = null, training = null, evaluation = null } = parsed.data;
  if (probing === null && training === null && evaluation === null) {
    throw new BadInputError(`${file}: field probing: none of probing, training, evaluation is given`);
  }
  return { source: file, probing, training, evaluation };
}
