import { z } from 'zod';
import { BadInputError } from '../../core/errors.ts';
import { clusterBootstrapInterval, familyClusteredInterval } from '../../core/family-bootstrap.ts';
import { pairedComparison, type TaskOutcome } from '../../core/metrics.ts';
import { PAIRED_RESAMPLES, PAIRED_SEED } from '../../core/report/eval-section.ts';
import { LEARNING_SPLITS, learningLine } from '../../core/report/learning-line.ts';
import { taskFamily } from '../../core/seeded-choice.ts';

/**
 * `learning-results.json`: what one bench:learning run measured, written beside its `learning.txt`, so that its
 * line, and any interval added later, can be recomputed without training (`--recompute FILE`).
 * `granularity: task` holds every held-out task's attempts and successes before and after training.
 * `granularity: family` holds only per-family success totals (runs recorded before per-task results were kept):
 * the family-clustered interval needs no more, because a drawn family contributes its task count and the sum of
 * its tasks' differences, (after - before) / attempts; the task-level interval cannot be computed from it.
 */

const count = z.number().int().nonnegative();
const outcome = z.object({ uid: z.string().min(1), domain: z.string(), n: z.number().int().min(1), c: count }).strict();
const common = {
  campaign: z.string().min(1).describe('Workflow id of the run, or a name for a record written by hand'),
  split: z.enum(LEARNING_SPLITS).describe('Which held-out split the run evaluated'),
  seed: z.number().int().optional().describe("The campaign's seed (task order, learner, template split)"),
  attempts: z.number().int().min(1).describe('Attempts per held-out task in each evaluation'),
  minutes: z.number().nonnegative().describe('Wall time of the whole run'),
  source: z.string().optional().describe('Where the numbers were taken from, for a record written by hand'),
};
const taskRecord = z
  .object({
    granularity: z.literal('task'),
    ...common,
    before: z.array(outcome).min(1),
    after: z.array(outcome).min(1),
  })
  .strict();
const familyRecord = z
  .object({
    granularity: z.literal('family'),
    ...common,
    families: z
      .array(
        z
          .object({
            family: z.string().min(1),
            tasks: z.number().int().min(1),
            before: count.describe('Successes over tasks x attempts before training'),
            after: count.describe('Successes over tasks x attempts after training'),
          })
          .strict(),
      )
      .min(1),
  })
  .strict();
export const learningResultsSchema = z.discriminatedUnion('granularity', [taskRecord, familyRecord]);
export type LearningResults = z.infer<typeof learningResultsSchema>;

const BOOTSTRAP = { resamples: PAIRED_RESAMPLES, seed: PAIRED_SEED };

/** A run's per-task record (the evaluation aggregates carry more fields per task; only these are kept). */
export function taskResults(
  run: Omit<z.infer<typeof taskRecord>, 'granularity' | 'before' | 'after'>,
  before: readonly TaskOutcome[],
  after: readonly TaskOutcome[],
): LearningResults {
  const keep = ({ uid, domain, n, c }: TaskOutcome) => ({ uid, domain, n, c });
  return { granularity: 'task', ...run, before: before.map(keep), after: after.map(keep) };
}

export function parseLearningResults(file: string, text: string): LearningResults {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    throw new BadInputError(`${file}: invalid JSON: ${(err as Error).message}`, { cause: err });
  }
  const parsed = learningResultsSchema.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw new BadInputError(
      `${file}: field ${issue.path.map(String).join('.') || '(root)'}: ${issue.message} ` +
        "(expected the learning-results.json written by 'npm run bench:learning')",
    );
  }
  return parsed.data;
}

/** The run's `learning:` line: the same bootstrap (resamples, seed) as the report's paired table. */
export function learningVerdict(results: LearningResults, file = 'learning results'): string {
  if (results.granularity === 'task') {
    const paired = pairedComparison(results.before, results.after, BOOTSTRAP);
    const family = familyClusteredInterval(paired.per_task, taskFamily, BOOTSTRAP);
    return learningLine(paired, family, results.split, results.attempts, results.minutes);
  }
  const k = results.attempts;
  const seen = new Set<string>();
  for (const [i, f] of results.families.entries()) {
    const most = f.tasks * k;
    if (f.before > most || f.after > most)
      throw new BadInputError(
        `${file}: field families.${i}: ${f.family} has ${f.before} / ${f.after} successes, more than ` +
          `${f.tasks} tasks x ${k} attempts`,
      );
    if (seen.has(f.family)) throw new BadInputError(`${file}: field families.${i}: ${f.family} appears twice`);
    seen.add(f.family);
  }
  const tasks = results.families.reduce((s, f) => s + f.tasks, 0);
  const rate = (side: 'before' | 'after') => results.families.reduce((s, f) => s + f[side], 0) / (tasks * k);
  const [a, b] = [rate('before'), rate('after')];
  const interval = clusterBootstrapInterval(
    results.families.map((f) => ({ sum: (f.after - f.before) / k, count: f.tasks })),
    BOOTSTRAP,
  );
  return learningLine(
    { tasks, pass_at_1: { a, b, difference: b - a, interval: null } },
    { families: results.families.length, interval },
    results.split,
    k,
    results.minutes,
  );
}
