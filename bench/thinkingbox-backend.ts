import os from 'node:os';
import path from 'node:path';
import { repoRoot } from '../config/environment.ts';
import { thinkingboxResources } from '../rollout/thinkingbox-resources.ts';
import { importThinkingboxDataset } from '../datasets/thinkingbox/dataset-importer.ts';
import type { ThinkingBoxSuite } from '../datasets/thinkingbox/imported-suite.ts';
import { thinkingboxEnvironment } from '../datasets/thinkingbox/thinkingbox-environment.ts';

/**
 * bench/thinkingbox-backend: per-episode backend start time for an imported ThinkingBox task (the fixture's
 * two Python MCP tool servers): spawn + MCP initialize + __reserved__init + tools/list, cold (warm pool of 0)
 * against the warm pool (2 started processes per server). Between episodes the bench waits as long as an
 * episode would take at the least (`--gap-ms`, default 2000), which is what lets the pool refill.
 * Prints p50/p95 and the ratio. Usage: npm run bench:thinkingbox [-- N [GAP_MS]]
 */

const n = Number(process.argv[2] ?? 10);
const gapMs = Number(process.argv[3] ?? 2000);
const fixture = path.join(repoRoot, 'examples', 'thinkingbox-fixture');
const imported = importThinkingboxDataset({
  dataDir: path.join(fixture, 'dataset'),
  listFile: path.join(fixture, 'releases', 'fixture_v1', 'testlist_fixture_v1.yaml'),
});
if (imported.problems.length) throw new Error(`fixture import problems: ${JSON.stringify(imported.problems)}`);
const suite: ThinkingBoxSuite = {
  kind: 'thinkingbox',
  name: 'fixture',
  dir: os.tmpdir(),
  imported: imported.suite,
  scenarios: imported.suite.scenarios,
  tasks: imported.suite.tasks.map((t) => ({ ...t, file: t.test.file, line: t.test.line })),
};
const task = suite.tasks.find((t) => Object.keys(t.world_state).length === 2)!;
const quantile = (xs: number[], q: number) =>
  [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))]!;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function measure(warm: number): Promise<number[]> {
  const resources = thinkingboxResources({
    warm_processes: warm,
    server_start_timeout_ms: 30_000,
    test_timeout_ms: 30_000,
    native_grading: true,
  });
  const environment = thinkingboxEnvironment(resources, suite, task);
  const times: number[] = [];
  try {
    if (warm) await (await environment.open('bench:prime')).close(); // the first acquire starts the pool
    for (let i = 0; i < n; i++) {
      await sleep(gapMs);
      const t = performance.now();
      const opened = await environment.open('bench');
      times.push(performance.now() - t);
      await opened.close();
    }
  } finally {
    await resources.servers.close();
  }
  return times;
}

const cold = await measure(0);
const warm = await measure(2);
const row = (name: string, xs: number[]) =>
  `${name.padEnd(6)} p50 ${quantile(xs, 0.5).toFixed(1).padStart(7)} ms  p95 ` +
  `${quantile(xs, 0.95).toFixed(1).padStart(7)} ms`;
console.log(
  `task ${task.uid}: ${Object.keys(task.world_state).length} tool servers per episode, ${n} episodes each, ${gapMs} ` +
    `ms apart (${os.cpus().length} cores)`,
);
console.log(row('warm', warm));
console.log(`${row('cold', cold)}  (${(quantile(cold, 0.5) / quantile(warm, 0.5)).toFixed(1)}x the warm p50)`);
