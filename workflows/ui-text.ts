/**
 * The text the Temporal UI shows for our workflows: children's static summaries (fixed at start) and the
 * current-details lines workflows keep up to date (docs/temporal-ui.md). Pure and deterministic: no locale.
 */

/** 1234567 -> "1,234,567" (Intl's locale data is not part of the workflow's deterministic inputs). */
export function thousands(n: number): string {
  return String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ',');
}

export function probeSummary(candidates: number, repeats: number): string {
  return `probe: ${thousands(candidates)} candidates x ${repeats} episodes`;
}

/** `what`: `evaluation before training`, `scheduled evaluation of step 12`. */
export function evaluationSummary(what: string, tasks: number, repeats: number): string {
  return `${what}: ${thousands(tasks)} tasks x ${repeats} episodes`;
}

export function trainingStepSummary(step: number, steps: number, groups: number, groupSize: number): string {
  return `step ${step} of ${steps}: ${groups} groups x ${groupSize}`;
}

/** `probe shard 2 of 3: keys 500-999 of 1,200` (shard numbers from 1; the workflow id's `shard-<n>` from 0). */
export function shardSummary(
  stage: string,
  shard: number,
  shards: number,
  firstKey: number,
  keyCount: number,
  keys: number,
) {
  const last = firstKey + keyCount - 1;
  const range = `${thousands(firstKey)}-${thousands(last)}`;
  return `${stage} shard ${shard + 1} of ${shards}: keys ${range} of ${thousands(keys)}`;
}

/** A shard's or stage's progress: `340/507 keys done · 12 in flight · 3 re-runs`. */
export function episodeProgress(p: {
  done: number;
  keys: number;
  inFlight: number;
  reruns: number;
  uncovered: number;
  taskErrors?: number;
}) {
  const parts = [`${thousands(p.done)}/${thousands(p.keys)} keys done`, `${p.inFlight} in flight`];
  if (p.reruns) parts.push(`${p.reruns} re-runs`);
  if (p.uncovered) parts.push(`${p.uncovered} uncovered`);
  if (p.taskErrors) parts.push(`${p.taskErrors} task errors (their tests raise; not re-run)`);
  return parts.join(' · ');
}

/** A wait in words: seconds below a minute (test configs), else minutes. */
export function waitInWords(ms: number): string {
  return ms < 60_000 ? `${Math.round(ms / 1000)} s` : `${Math.round(ms / 60_000)} min`;
}
