import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { Client } from '@temporalio/client';
import { stringify } from 'yaml';
import { up } from '../cli/commands/infra.ts';
import { loadCampaignConfig } from '../config/campaign-config.ts';
import { databaseUrl, readEnvironment, repoRoot, taskQueues } from '../config/environment.ts';
import { continuousPoolMakespan } from '../core/continuous-pool.ts';
import { mulberry32 } from '../core/metrics.ts';
import { ensureControlDatabase, withClient } from '../infra/control-database.ts';
import { startWorkers, stopWorkers, workerLog, type WorkerKind } from '../infra/local-workers.ts';
import { connectTemporalClient } from '../infra/temporal-connection.ts';
import { OpenAIWireProtocolDouble } from '../test/helpers/openai-wire-double.ts';
import type { evaluationWorkflow } from '../workflows/evaluation-workflow.ts';
import type { probeWorkflow } from '../workflows/probe-workflow.ts';
import { campaignAttributes } from '../workflows/search-attribute-keys.ts';
import { scriptedAnswer, writeScaleSuite } from './scale-suite.ts';

/**
 * bench/utilisation: how full the concurrency bound stays when episodes take realistic, uneven times. A probe and
 * an evaluation (`--tasks` x `--repeats` keys each, in shards of `--shard-size`) run on the local stack against
 * the scripted policy of bench/scale behind a test double of an OpenAI-compatible API, whose first answer of each
 * episode waits a latency drawn from a lognormal (`--median-s`, `--sigma`, capped at `--cap-s`; seeded).
 *
 * For each stage it reads every episode's start and end from Postgres and reports
 * - utilisation U: episode-seconds / (bound x the stage's span, first episode start to last episode end), i.e. the
 *   mean number of episodes in flight over the bound;
 * - vs_pool R: that span over the makespan of one continuous pool of `bound` slots fed the same keys in the same
 *   order with the same durations (each episode's measured duration), computed in the same run.
 * Goals (issue: at bound 32 on 2 cores): U >= 0.95 and R <= 1.1 for both stages. Last line:
 * `utilisation: probe=U1 evaluation=U2 vs_pool=R1,R2 keys=N bound=C`; exit 1 on a miss.
 *
 * Usage: npm run bench:utilisation [-- --concurrency 32 --tasks 250 --repeats 16 --median-s 5 --sigma 0.8
 *   --cap-s 60 --shard-size 500 --seed 1]
 * Starts the local stack if it is down; runs its own orchestrator, bookkeeping and rollout workers under a
 * task-queue prefix and state folder of its own, and stops them at the end.
 */

const { values: args } = parseArgs({
  options: {
    concurrency: { type: 'string', default: '32' },
    tasks: { type: 'string', default: '250' },
    repeats: { type: 'string', default: '16' },
    'median-s': { type: 'string', default: '5' },
    sigma: { type: 'string', default: '0.8' },
    'cap-s': { type: 'string', default: '60' },
    'shard-size': { type: 'string', default: '500' },
    seed: { type: 'string', default: '1' },
    keep: { type: 'boolean', default: false },
  },
});
const int = (name: keyof typeof args) => {
  const n = Number(args[name]);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--${name}: expected an integer >= 1, got ${String(args[name])}`);
  return n;
};
const num = (name: keyof typeof args) => {
  const n = Number(args[name]);
  if (!Number.isFinite(n) || n < 0) throw new Error(`--${name}: expected a number >= 0, got ${String(args[name])}`);
  return n;
};
const bound = int('concurrency');
const tasks = int('tasks');
const repeats = int('repeats');
const shardSize = int('shard-size');
const latency = { medianMs: num('median-s') * 1000, sigma: num('sigma'), capMs: num('cap-s') * 1000 };
const goals = { minUtilisation: 0.95, maxVsPool: 1.1 };

const env = readEnvironment();
const controlUrl = databaseUrl(env);
await up();
await ensureControlDatabase(env);
const runId = `bench-utilisation-${Date.now()}`;
const queues = taskQueues({ TBT_TASK_QUEUE_PREFIX: runId });
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'tbt-bench-utilisation-'));
const tiny = path.join(repoRoot, 'tasks', 'tiny');
const suiteDir = path.join(work, 'suite');
const uids = writeScaleSuite(tiny, suiteDir, tasks);

// --- the policy: scripted answers, the first of each episode after a lognormal latency --------------------------
const random = mulberry32(int('seed'));
/** A lognormal draw (Box-Muller), capped. */
function drawLatencyMs(): number {
  const z = Math.sqrt(-2 * Math.log(1 - random())) * Math.cos(2 * Math.PI * random());
  return Math.min(latency.capMs, Math.round(latency.medianMs * Math.exp(latency.sigma * z)));
}
const answer = scriptedAnswer(tiny);
const policy = new OpenAIWireProtocolDouble((body) => ({
  content: answer(body.messages),
  delayMs: body.messages.some((m) => m.role === 'assistant') ? 0 : drawLatencyMs(),
}));
const policyUrl = await policy.start();

const configFile = path.join(work, 'campaign.yaml');
fs.writeFileSync(
  configFile,
  stringify({
    name: 'bench-utilisation',
    suite: suiteDir,
    episode: {
      policy: { base_url: policyUrl, model: 'lognormal-latency-scripted-double', mode: 'chat' },
      limits: { max_agent_turns: 3, wall_clock_ms: latency.capMs + 60_000 },
    },
    probe: { repeats, concurrency: bound, shard_size: shardSize },
    training: { steps: 1, groups_per_step: 1, group_size: 2 },
    evaluation: { repeats, concurrency: bound, shard_size: shardSize },
  }),
);
const config = loadCampaignConfig(configFile);

// --- workers of its own ---------------------------------------------------------------------------------------
const workerDir = path.join(work, 'state');
const workerProcessEnv = {
  ...process.env,
  TBT_STATE_DIR: workerDir,
  DATABASE_URL: controlUrl,
  TBT_TASK_QUEUE_PREFIX: runId,
  // More slots than the bound, so that the workflows' bound (not the worker) limits what is in flight.
  TBT_ROLLOUT_CONCURRENCY: String(bound * 2),
};
const workerEnv = readEnvironment(workerProcessEnv);
const kinds: WorkerKind[] = ['orchestrator', 'bookkeeping', 'rollout'];

async function workersStarted(): Promise<void> {
  startWorkers(workerEnv, kinds, workerProcessEnv);
  const deadline = Date.now() + 120_000;
  for (const kind of kinds) {
    const log = workerLog(workerEnv, kind);
    while (!(fs.existsSync(log) && fs.readFileSync(log, 'utf8').includes('worker started'))) {
      if (Date.now() > deadline) throw new Error(`the ${kind} worker did not start within 2 minutes (log ${log})`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }
}

// --- measurement ----------------------------------------------------------------------------------------------
interface StageFigures {
  name: string;
  keys: number;
  episodes: number;
  spanS: number;
  wallS: number;
  utilisation: number;
  poolMakespanS: number;
  poolUtilisation: number;
  vsPool: number;
  medianEpisodeS: number;
}

/** Every episode of a stage in key order (uid-major, then repetition): seconds of its start and end. */
async function episodeTimes(campaignId: string, idPrefix: string): Promise<{ start: number; end: number }[]> {
  const { rows } = await withClient(controlUrl, (c) =>
    c.query<{ id: string; start: Date; end: Date }>(
      `SELECT id, started_at AS start, finished_at AS end FROM episodes
       WHERE campaign = $1 AND finished_at IS NOT NULL`,
      [campaignId],
    ),
  );
  const order = new Map(uids.map((u, i) => [u, i]));
  const keyed = rows.map((r) => {
    // <idPrefix>/<uid>#<rep>[~retry-<n>]
    const key = r.id.slice(idPrefix.length + 1);
    const cut = key.lastIndexOf('#');
    const rank = order.get(key.slice(0, cut));
    if (rank === undefined) throw new Error(`episode ${r.id} is not a key of this stage`);
    return {
      rank,
      rep: Number.parseInt(key.slice(cut + 1), 10),
      start: r.start.getTime() / 1000,
      end: r.end.getTime() / 1000,
    };
  });
  return keyed.sort((a, b) => a.rank - b.rank || a.rep - b.rep);
}

async function measure(name: string, campaignId: string, idPrefix: string, wallS: number): Promise<StageFigures> {
  const times = await episodeTimes(campaignId, idPrefix);
  if (times.length === 0) throw new Error(`${name}: no finished episodes recorded for ${campaignId}`);
  const durations = times.map((t) => t.end - t.start);
  const work = durations.reduce((a, b) => a + b, 0);
  const spanS = Math.max(...times.map((t) => t.end)) - Math.min(...times.map((t) => t.start));
  const poolMakespanS = continuousPoolMakespan(durations, bound);
  const sorted = [...durations].sort((a, b) => a - b);
  return {
    name,
    keys: tasks * repeats,
    episodes: times.length,
    spanS,
    wallS,
    utilisation: work / (bound * spanS),
    poolMakespanS,
    poolUtilisation: work / (bound * poolMakespanS),
    vsPool: spanS / poolMakespanS,
    medianEpisodeS: sorted[Math.floor(sorted.length / 2)]!,
  };
}

const common = {
  uids,
  repeats,
  suiteDir,
  episode: config.episode,
  rolloutQueue: queues.rollout,
  concurrency: bound,
  shardSize,
  maxReruns: 3,
};

const figures: StageFigures[] = [];
const connection = await connectTemporalClient(env);
const client = new Client({ connection, namespace: env.TBT_TEMPORAL_NAMESPACE });
try {
  await workersStarted();
  console.log(
    `bench/utilisation ${runId}: bound ${bound}, ${tasks} x ${repeats} keys per stage in shards of ${shardSize}; ` +
      `first-answer latency lognormal median ${latency.medianMs / 1000} s, sigma ${latency.sigma}, cap ` +
      `${latency.capMs / 1000} s; ${os.cpus().length} CPUs`,
  );
  const probeCampaign = `${runId}-probe`;
  let t0 = performance.now();
  await client.workflow.execute<typeof probeWorkflow>('probeWorkflow', {
    workflowId: `${probeCampaign}/probe`,
    taskQueue: queues.orchestrator,
    typedSearchAttributes: campaignAttributes(probeCampaign, 'probe', 0),
    args: [
      {
        ...common,
        campaignId: probeCampaign,
        minCleanRuns: config.probe.min_clean_runs,
        retainBands: config.probe.retain_bands,
      },
    ],
  });
  figures.push(await measure('probe', probeCampaign, `${probeCampaign}/probe`, (performance.now() - t0) / 1000));
  console.log(`probe done in ${figures[0]!.wallS.toFixed(0)} s`);

  const evalCampaign = `${runId}-eval`;
  const evalPrefix = `${evalCampaign}/eval-bench`;
  t0 = performance.now();
  await client.workflow.execute<typeof evaluationWorkflow>('evaluationWorkflow', {
    workflowId: evalPrefix,
    taskQueue: queues.orchestrator,
    typedSearchAttributes: campaignAttributes(evalCampaign, 'evaluate', 0),
    args: [{ ...common, campaignId: evalCampaign, label: 'bench' }],
  });
  figures.push(await measure('evaluation', evalCampaign, evalPrefix, (performance.now() - t0) / 1000));
  console.log(`evaluation done in ${figures[1]!.wallS.toFixed(0)} s`);
} finally {
  await stopWorkers(workerEnv, kinds);
  await policy.stop();
  await connection.close();
  if (!args.keep) {
    await withClient(controlUrl, (c) => c.query(`DELETE FROM episodes WHERE campaign LIKE $1`, [`${runId}-%`]));
    fs.rmSync(work, { recursive: true, force: true });
  }
}

const checks: [string, boolean][] = [];
for (const f of figures) {
  console.log(
    `${f.name}: ${f.episodes} episodes (${f.keys} keys), median ${f.medianEpisodeS.toFixed(1)} s; span ` +
      `${f.spanS.toFixed(0)} s (workflow ${f.wallS.toFixed(0)} s); utilisation ${f.utilisation.toFixed(3)}; ` +
      `continuous pool ${f.poolMakespanS.toFixed(0)} s (utilisation ${f.poolUtilisation.toFixed(3)}); ` +
      `span / pool ${f.vsPool.toFixed(3)}`,
  );
  checks.push(
    [`${f.name} utilisation >= ${goals.minUtilisation}`, f.utilisation >= goals.minUtilisation],
    [`${f.name} span <= ${goals.maxVsPool}x the continuous pool`, f.vsPool <= goals.maxVsPool],
  );
}
for (const [name, ok] of checks) console.log(`${ok ? 'PASS' : 'MISS'} ${name}`);
const [p, e] = figures;
console.log(
  `utilisation: probe=${p!.utilisation.toFixed(3)} evaluation=${e!.utilisation.toFixed(3)} ` +
    `vs_pool=${p!.vsPool.toFixed(3)},${e!.vsPool.toFixed(3)} keys=${tasks * repeats} bound=${bound}`,
);
process.exit(checks.every(([, ok]) => ok) ? 0 : 1);
