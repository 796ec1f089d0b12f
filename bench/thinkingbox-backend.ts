import os from 'node:os';
import path from 'node:path';
import { repoRoot } from '../config/environment.ts';
import { thinkingboxResources } from '../rollout/thinkingbox-resources.ts';
import { prepareDatasetEnvironment } from '../datasets/thinkingbox/dataset-environment.ts';
import { importThinkingboxDataset } from '../datasets/thinkingbox/dataset-importer.ts';
import type { ThinkingBoxSuite } from '../datasets/thinkingbox/imported-suite.ts';
import { thinkingboxEnvironment } from '../datasets/thinkingbox/thinkingbox-environment.ts';

/**
 * bench/thinkingbox-backend: per-episode backend start time for an imported ThinkingBox task (the fixture's
 * two Python MCP tool servers): start + MCP initialize + __reserved__init + tools/list, in three modes in one run:
 * cold (each server spawned in a fresh sandbox), template (each forked from its server's template, no warm pool)
 * and warm (template forks, 2 kept ready per server). Episodes run back to back by default (`GAP_MS` 0:
 * continuous load, where a warm pool cannot refill); a gap of 2000 is a 2 s episode.
 * Prints p50/p95 and the ratios. Usage: npm run bench:thinkingbox [-- N [GAP_MS]]
 */

const n = Number(process.argv[2] ?? 10);
const gapMs = Number(process.argv[3] ?? 0);
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
prepareDatasetEnvironment(suite.imported.server_packages, (line) => console.log(line)); // cached after the first run
const task = suite.tasks.find((t) => Object.keys(t.world_state).length === 2)!;
const quantile = (xs: number[], q: number) =>
  [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))]!;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function measure(warm: number, start: 'template' | 'process'): Promise<number[]> {
  const resources = thinkingboxResources({
    warm_processes: warm,
    server_start: start,
    server_start_timeout_ms: 30_000,
    test_timeout_ms: 30_000,
    native_grading: true,
  });
  const environment = thinkingboxEnvironment(resources, suite, task);
  const times: number[] = [];
  try {
    // The first episode starts the pool and the templates: not counted (a worker pays it once).
    await (await environment.open('bench:prime')).close();
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

const cold = await measure(0, 'process');
const template = await measure(0, 'template');
const warm = await measure(2, 'template');
const row = (name: string, xs: number[]) =>
  `${name.padEnd(8)} p50 ${quantile(xs, 0.5).toFixed(1).padStart(7)} ms  p95 ` +
  `${quantile(xs, 0.95).toFixed(1).padStart(7)} ms`;
console.log(
  `task ${task.uid}: ${Object.keys(task.world_state).length} tool servers per episode, ${n} episodes each, ${gapMs} ` +
    `ms apart (${os.cpus().length} cores)`,
);
const times = (xs: number[]) => `${(quantile(cold, 0.5) / quantile(xs, 0.5)).toFixed(1)}x faster than cold`;
console.log(row('cold', cold));
console.log(`${row('template', template)}  (${times(template)})`);
console.log(`${row('warm', warm)}  (${times(warm)})`);
console.log(
  `thinkingbox: cold_p50=${quantile(cold, 0.5).toFixed(0)} template_p50=${quantile(template, 0.5).toFixed(0)} ` +
    `warm_p50=${quantile(warm, 0.5).toFixed(0)} speedup=${(quantile(cold, 0.5) / quantile(template, 0.5)).toFixed(1)}`,
);
