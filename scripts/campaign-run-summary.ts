/** The summary of an on-demand campaign suite (scripts/crash-test.ts, scripts/fault-test.ts): table and file. */
import fs from 'node:fs';
import type { Check } from './campaign-run-checks.ts';

/** One campaign run of a suite, as printed and written to its summary.json. */
export interface RunSummary {
  run: string;
  campaignId: string;
  wallS: number;
  realUpdates: number;
  retrainedBeforeCommit: number;
  checks: Check[];
  passed: boolean;
}

export const checksCell = (r: RunSummary) =>
  `${r.checks.filter((c) => c.pass).length}/${r.checks.length} ${r.passed ? 'PASS' : 'FAIL'}`;

export function printChecks(log: (msg: string) => void, list: Check[]): void {
  for (const c of list) log(`  ${c.pass ? 'PASS' : 'FAIL'} ${c.name}: ${c.detail}`);
}

export function printTable(header: string[], rows: string[][]): void {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i]!.length)));
  for (const row of [header, ...rows]) console.log(row.map((c, i) => c.padEnd(widths[i]!)).join('  '));
}

/**
 * Every failed check of the suite, one line each, plus the suite's own: whether a step updates the weights
 * depends on the sampled rewards (a group without reward variance is skipped by design), so one run may have
 * none, but the suite as a whole must exercise real updates.
 */
export function suiteFailures(runs: RunSummary[], steps: number): string[] {
  const realUpdates = runs.reduce((n, r) => n + r.realUpdates, 0);
  console.log(
    `real (non-skipped) learner updates in the suite: ${realUpdates} ` +
      `(${runs.map((r) => `${r.run} ${r.realUpdates}/${steps}`).join(', ')})`,
  );
  const failed = runs.flatMap((r) => r.checks.filter((c) => !c.pass).map((c) => `${r.run}: ${c.name}: ${c.detail}`));
  if (realUpdates === 0) failed.push('suite: the learner made no real (non-skipped) update in any run');
  return failed;
}

export function writeSummary(file: string, summary: object): void {
  fs.writeFileSync(file, `${JSON.stringify(summary, null, 2)}\n`);
  console.log(`summary: ${file}`);
}
