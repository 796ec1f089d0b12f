import { compareStrings } from '../difficulty.ts';

/**
 * Which episodes of an evaluation get a page next to the report: per task, the first passed, the first failed,
 * the first infrastructure-errored and the first task-errored episode (by repetition), so the pages stay bounded
 * (at most four per task) while every task shown has an example of each outcome it had.
 */

/** The fields of a result line (rollout/episode-result-line.ts) the choice reads. */
export interface EpisodeResultRef {
  id: string;
  uid: string;
  repetition: number;
  domain: string;
  success: boolean;
  infrastructure_error: boolean;
  /** Absent in result lines written before task errors. */
  task_error?: boolean;
}

export type EpisodeOutcomeLabel = 'passed' | 'failed' | 'infrastructure error' | 'task error';

export const EPISODE_OUTCOMES: readonly EpisodeOutcomeLabel[] = [
  'passed',
  'failed',
  'infrastructure error',
  'task error',
];

export interface ChosenTaskEpisodes {
  uid: string;
  domain: string;
  /** Graded attempts and how many passed. */
  attempts: number;
  passed: number;
  chosen: { outcome: EpisodeOutcomeLabel; id: string; repetition: number }[];
}

export function outcomeOf(
  line: Pick<EpisodeResultRef, 'success' | 'infrastructure_error' | 'task_error'>,
): EpisodeOutcomeLabel {
  if (line.infrastructure_error) return 'infrastructure error';
  if (line.task_error) return 'task error';
  return line.success ? 'passed' : 'failed';
}

export function chooseEpisodes(lines: readonly EpisodeResultRef[]): ChosenTaskEpisodes[] {
  const byUid = new Map<string, EpisodeResultRef[]>();
  for (const l of lines) byUid.set(l.uid, [...(byUid.get(l.uid) ?? []), l]);
  return [...byUid.keys()].sort(compareStrings).map((uid) => {
    const rows = [...byUid.get(uid)!].sort((a, b) => a.repetition - b.repetition || compareStrings(a.id, b.id));
    const graded = rows.filter((r) => !r.infrastructure_error && !r.task_error);
    return {
      uid,
      domain: rows[0]!.domain,
      attempts: graded.length,
      passed: graded.filter((r) => r.success).length,
      chosen: EPISODE_OUTCOMES.flatMap((outcome) => {
        const first = rows.find((r) => outcomeOf(r) === outcome);
        return first ? [{ outcome, id: first.id, repetition: first.repetition }] : [];
      }),
    };
  });
}
