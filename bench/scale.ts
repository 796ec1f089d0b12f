import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { Client } from '@temporalio/client';
import { stringify } from 'yaml';
import { loadCampaignConfig } from '../config/campaign-config.ts';
import { databaseUrl, readEnvironment, repoRoot, taskQueues } from '../config/environment.ts';
import { ensureControlDatabase, withClient } from '../infra/control-database.ts';
import { nodeWorkerEnv, nodeWorkerFlags, type WorkerKind } from '../infra/local-workers.ts';
import { up } from '../cli/commands/infra.ts';
import { OpenAIWireProtocolDouble } from '../test/helpers/openai-wire-double.ts';
import { campaignAttributes } from '../workflows/search-attribute-keys.ts';
import type { probeWorkflow } from '../workflows/probe-workflow.ts';
import { scriptedAnswer, writeScaleSuite } from './scale-suite.ts';
import { connectTemporalClient } from '../infra/temporal-connection.ts';

/**
 * bench/scale: the reference's sizes on the local stack. An evaluation of 507 distinct task uids x 20 repeats
 * (10,140 episodes) through `tbt eval run`, and a probe of 1,000 candidates x 16 (16,000 episodes), against
 * an instant scripted policy: a test double of an OpenAI-compatible API (real wire protocol, test/helpers).
 * Then the evaluation's episodes again in the bare in-process loop (`tbt episodes run`), for Temporal's
 * overhead. Reports wall time, episodes/s, the largest workflow history (events, bytes) and payload, the most
 * episodes in flight (episode start/end times in Postgres), and each worker's RSS (/proc/<pid>/status).
 *
 * Usage: npm run bench:scale [-- --scale 0.05] [--concurrency 8] [--skip-probe] [--skip-bare] [--keep]
 * Starts the local stack if it is down (`tbt up`, idempotent); starts its own workers under a task-queue prefix
 * of its own.
 */

const { values: args } = parseArgs({
  options: {
    scale: { type: 'string', default: '1' },
    concurrency: { type: 'string', default: '8' },
    'skip-probe': { type: 'boolean', default: false },
    'skip-bare': { type: 'boolean', default: false },
    keep: { type: 'boolean', default: false },
  },
});
const scale = Number(args.scale);
const bound = Number(args.concurrency);
if (!(scale > 0 && scale <= 1)) throw new Error(`--scale: expected a fraction in (0, 1], got ${args.scale}`);
if (!Number.isInteger(bound) || bound < 1) throw new Error(`--concurrency: expected an integer >= 1`);

const evalTasks = Math.max(1, Math.round(507 * scale));
const evalRepeats = 20;
const probeCandidates = Math.max(1, Math.round(1000 * scale));
const probeRepeats = 16;
const goals = { maxHistoryEvents: 5_000, maxRssGrowth: 1.5, maxOverhead: 1.5 };

const env = readEnvironment();
const controlUrl = databaseUrl(env);
await up(); // it failed with a bare ECONNREFUSED when the servers were down
await ensureControlDatabase(env);
const runId = `bench-scale-${Date.now()}`;
const prefix = runId;
const queues = taskQueues({ TBT_TASK_QUEUE_PREFIX: prefix });
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'tbt-bench-scale-'));
const logDir = path.join(env.TBT_STATE_DIR, 'bench-scale', runId);
fs.mkdirSync(logDir, { recursive: true });
const tiny = path.join(repoRoot, 'tasks', 'tiny');
const suiteDir = path.join(work, 'suite');
const uids = writeScaleSuite(tiny, suiteDir, Math.max(evalTasks, probeCandidates));

// --- the instant policy -------------------------------------------------------------------------------------
const answer = scriptedAnswer(tiny);
const policy = new OpenAIWireProtocolDouble((body) => answer(body.messages));
const policyUrl = await policy.start();

const configFile = path.join(work, 'campaign.yaml');
fs.writeFileSync(
  configFile,
  stringify({
    name: 'bench-scale',
    suite: suiteDir,
    episode: {
      policy: { base_url: policyUrl, model: 'instant-scripted-double', mode: 'chat' },
      limits: { max_agent_turns: 3, wall_clock_ms: 60_000 },
    },
    probe: { repeats: probeRepeats, concurrency: bound },
    training: { steps: 1, groups_per_step: 1, group_size: 2 },
    evaluation: { repeats: evalRepeats, concurrency: bound },
  }),
);
const config = loadCampaignConfig(configFile);
const evalTasksFile = path.join(work, 'eval-tasks.yaml');
fs.writeFileSync(evalTasksFile, stringify(uids.slice(0, evalTasks)));

// --- workers as separate processes, RSS sampled ---------------------------------------------------------------
const workerEnv = {
  ...nodeWorkerEnv(process.env),
  TBT_TASK_QUEUE_PREFIX: prefix,
  // More slots than the bound, so the workflows' bound (not the worker) limits what is in flight.
  TBT_ROLLOUT_CONCURRENCY: String(bound * 2),
};
const workerKinds = (['orchestrator', 'bookkeeping', 'rollout'] as const).filter((k: WorkerKind) =>
  fs.existsSync(path.join(repoRoot, 'workers', `${k}-worker.ts`)),
);
interface RssTrack {
  start: number;
  peak: number;
  end: number;
}
const workers = new Map<string, { child: ChildProcess; rss: RssTrack }>();

function rssKb(pid: number): number | undefined {
  try {
    const m = /VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) : undefined;
  } catch {
    return undefined;
  }
}

async function startWorker(kind: WorkerKind): Promise<void> {
  const log = path.join(logDir, `${kind}.log`);
  const out = fs.openSync(log, 'a');
  const flags = env.TBT_BENCH_WORKER_NODE_FLAGS.split(' ').filter(Boolean);
  const child = spawn(
    process.execPath,
    [...nodeWorkerFlags(kind), ...flags, '--import', 'tsx', path.join(repoRoot, 'workers', `${kind}-worker.ts`)],
    {
      env: workerEnv,
      cwd: repoRoot,
      stdio: ['ignore', out, out],
    },
  );
  fs.closeSync(out);
  const deadline = Date.now() + 120_000;
  while (!fs.readFileSync(log, 'utf8').includes('worker started')) {
    if (child.exitCode !== null) throw new Error(`${kind} worker exited (log ${log})`);
    if (Date.now() > deadline) throw new Error(`${kind} worker did not start within 2 minutes (log ${log})`);
    await new Promise((r) => setTimeout(r, 200));
  }
  const start = rssKb(child.pid!) ?? 0;
  workers.set(kind, { child, rss: { start, peak: start, end: start } });
}

const sampler = setInterval(() => {
  for (const { child, rss } of workers.values()) {
    const kb = rssKb(child.pid!);
    if (kb === undefined) continue;
    rss.peak = Math.max(rss.peak, kb);
    rss.end = kb;
  }
}, 1000);

// --- measurements ---------------------------------------------------------------------------------------------
const connection = await connectTemporalClient(env);
const client = new Client({ connection, namespace: env.TBT_TEMPORAL_NAMESPACE });

interface HistoryFigures {
  workflows: number;
  maxEvents: number;
  maxEventsWorkflow: string;
  maxBytes: number;
  maxBytesWorkflow: string;
  maxPayloadBytes: number;
  maxPayloadWorkflow: string;
}

/** Size of the largest payload blob (one `payloads` list, as Temporal limits it) anywhere in a history. */
function largestPayload(node: unknown): number {
  if (node === null || typeof node !== 'object' || node instanceof Uint8Array) return 0;
  let best = 0;
  for (const [key, value] of Object.entries(node)) {
    if (key === 'payloads' && Array.isArray(value)) {
      const size = value.reduce(
        (sum: number, p: { data?: Uint8Array | null; metadata?: Record<string, Uint8Array> | null }) =>
          sum +
          (p.data?.length ?? 0) +
          Object.entries(p.metadata ?? {}).reduce((s, [k, v]) => s + k.length + v.length, 0),
        0,
      );
      best = Math.max(best, size);
    } else best = Math.max(best, largestPayload(value));
  }
  return best;
}

/** Every workflow of the stage: the root and everything carrying its campaign's search attribute. */
async function historyFigures(rootId: string, campaignId: string): Promise<HistoryFigures> {
  const ids = new Set([rootId]);
  for await (const w of client.workflow.list({ query: `TbtCampaign = "${campaignId}"` })) ids.add(w.workflowId);
  const f: HistoryFigures = {
    workflows: ids.size,
    maxEvents: 0,
    maxEventsWorkflow: '',
    maxBytes: 0,
    maxBytesWorkflow: '',
    maxPayloadBytes: 0,
    maxPayloadWorkflow: '',
  };
  for (const id of ids) {
    const handle = client.workflow.getHandle(id);
    const d = await handle.describe();
    if (d.historyLength > f.maxEvents) [f.maxEvents, f.maxEventsWorkflow] = [d.historyLength, id];
    if ((d.historySize ?? 0) > f.maxBytes) [f.maxBytes, f.maxBytesWorkflow] = [d.historySize ?? 0, id];
    const payload = largestPayload(await handle.fetchHistory());
    if (payload > f.maxPayloadBytes) [f.maxPayloadBytes, f.maxPayloadWorkflow] = [payload, id];
  }
  return f;
}

/** Most episodes of a campaign in flight at once, from their start and end times (an end before a start at a tie). */
async function peakInFlight(campaignId: string): Promise<number> {
  const { rows } = await withClient(controlUrl, (c) =>
    c.query<{ peak: number | null }>(
      `WITH ev AS (
         SELECT started_at AS t, 1 AS d FROM episodes WHERE campaign = $1
         UNION ALL SELECT finished_at, -1 FROM episodes WHERE campaign = $1 AND finished_at IS NOT NULL)
       SELECT max(s)::int AS peak FROM (SELECT sum(d) OVER (ORDER BY t, d ROWS UNBOUNDED PRECEDING) AS s FROM ev) x`,
      [campaignId],
    ),
  );
  return rows[0]?.peak ?? 0;
}

async function episodeCounts(campaignId: string): Promise<Record<string, number>> {
  const { rows } = await withClient(controlUrl, (c) =>
    c.query<{ status: string; n: number }>(
      `SELECT status, count(*)::int AS n FROM episodes WHERE campaign = $1 GROUP BY status`,
      [campaignId],
    ),
  );
  return Object.fromEntries(rows.map((r) => [r.status, r.n]));
}

function runCli(argv: string[], extraEnv: NodeJS.ProcessEnv, logName: string): Promise<{ code: number; out: string }> {
  return new Promise((resolve, reject) => {
    const log = fs.createWriteStream(path.join(logDir, logName));
    const child = spawn(process.execPath, ['--import', 'tsx', path.join(repoRoot, 'cli', 'tbt.ts'), ...argv], {
      env: { ...process.env, ...extraEnv },
      cwd: repoRoot,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (b: Buffer) => {
      out += b.toString();
      log.write(b);
    });
    child.stderr.on('data', (b: Buffer) => log.write(b));
    child.on('error', reject);
    child.on('close', (code) => {
      log.end();
      resolve({ code: code ?? 1, out });
    });
  });
}

interface StageFigures {
  name: string;
  episodes: number;
  wallS: number;
  perS: number;
  completed: boolean;
  statuses: Record<string, number>;
  peakInFlight: number;
  history: HistoryFigures;
}

async function stage(
  name: string,
  campaignId: string,
  rootId: () => string,
  run: () => Promise<boolean>,
): Promise<StageFigures> {
  console.log(`\n${name}: started`);
  const t0 = performance.now();
  const completed = await run();
  const wallS = (performance.now() - t0) / 1000;
  const statuses = await episodeCounts(campaignId);
  const episodes = Object.values(statuses).reduce((a, b) => a + b, 0);
  const figures: StageFigures = {
    name,
    episodes,
    wallS,
    perS: episodes / wallS,
    completed,
    statuses,
    peakInFlight: await peakInFlight(campaignId),
    history: await historyFigures(rootId(), campaignId),
  };
  console.log(`${name}: ${completed ? 'completed' : 'FAILED'} in ${wallS.toFixed(0)} s, ${JSON.stringify(statuses)}`);
  return figures;
}

const stages: StageFigures[] = [];
let bare: { episodes: number; wallS: number; perS: number; code: number } | undefined;
try {
  for (const kind of workerKinds) await startWorker(kind);
  console.log(
    `bench/scale: ${runId}; bound ${bound}; evaluation ${evalTasks} x ${evalRepeats}` +
      `${args['skip-probe'] ? '' : `; probe ${probeCandidates} x ${probeRepeats}`}; logs ${logDir}`,
  );

  const evalCampaign = `${runId}-eval`;
  let evalRoot = '';
  stages.push(
    await stage(
      `evaluation (${evalTasks} x ${evalRepeats}, tbt eval run)`,
      evalCampaign,
      () => evalRoot,
      async () => {
        const r = await runCli(
          [
            'eval',
            'run',
            '--config',
            configFile,
            '--campaign',
            evalCampaign,
            '--tasks',
            evalTasksFile,
            '--repeats',
            String(evalRepeats),
          ],
          { TBT_TASK_QUEUE_PREFIX: prefix },
          'eval-run.log',
        );
        evalRoot = /evaluation workflow: (\S+)/.exec(r.out)?.[1] ?? '';
        return r.code === 0;
      },
    ),
  );

  if (!args['skip-probe']) {
    const probeCampaign = `${runId}-probe`;
    const probeId = `${probeCampaign}/probe`;
    stages.push(
      await stage(
        `probe (${probeCandidates} x ${probeRepeats})`,
        probeCampaign,
        () => probeId,
        async () => {
          const result = await client.workflow.execute<typeof probeWorkflow>('probeWorkflow', {
            workflowId: probeId,
            taskQueue: queues.orchestrator,
            typedSearchAttributes: campaignAttributes(probeCampaign, 'probe', 0),
            args: [
              {
                uids: uids.slice(0, probeCandidates),
                repeats: probeRepeats,
                suiteDir,
                episode: config.episode,
                campaignId: probeCampaign,
                rolloutQueue: queues.rollout,
                concurrency: bound,
                shardSize: config.probe.shard_size,
                maxReruns: 3,
                minCleanRuns: config.probe.min_clean_runs,
                retainBands: config.probe.retain_bands,
              },
            ],
          });
          return result.episodes >= probeCandidates * probeRepeats;
        },
      ),
    );
  }
} finally {
  clearInterval(sampler);
  for (const [kind, { child }] of workers) {
    child.kill('SIGTERM');
    await new Promise<void>((r) => (child.exitCode !== null ? r() : child.once('exit', () => r())));
    console.log(`${kind} worker stopped`);
  }
}

if (!args['skip-bare']) {
  // The same evaluation episodes, in this process's loop: no Temporal, same policy, sandboxes and grading.
  const out = path.join(work, 'bare.jsonl');
  console.log(`\nbare loop (tbt episodes run, ${evalTasks} x ${evalRepeats}): started`);
  const t0 = performance.now();
  const r = await runCli(
    [
      'episodes',
      'run',
      '--suite',
      suiteDir,
      ...uids.slice(0, evalTasks).flatMap((u) => ['--uid', u]),
      '--repeats',
      String(evalRepeats),
      '--concurrency',
      String(bound),
      '--policy-url',
      policyUrl,
      '--model',
      'instant-scripted-double',
      '--mode',
      'chat',
      '--max-agent-turns',
      '3',
      '--out',
      out,
    ],
    {},
    'bare-loop.log',
  );
  const wallS = (performance.now() - t0) / 1000;
  const episodes = fs.existsSync(out) ? fs.readFileSync(out, 'utf8').split('\n').filter(Boolean).length : 0;
  bare = { episodes, wallS, perS: episodes / wallS, code: r.code };
  console.log(`bare loop: exit ${r.code}, ${episodes} episodes in ${wallS.toFixed(0)} s`);
}

await policy.stop();
if (!args.keep) {
  await withClient(controlUrl, (c) =>
    c.query(`DELETE FROM episodes WHERE campaign LIKE $1 OR id LIKE 'adhoc:scale/%'`, [`${runId}-%`]),
  );
  fs.rmSync(work, { recursive: true, force: true });
}
await connection.close();

// --- report -----------------------------------------------------------------------------------------------------
const kb = (n: number) => `${(n / 1024).toFixed(0)} MB`;
const lines: string[] = [`\nbench/scale ${runId} (scale ${scale}, bound ${bound}, ${os.cpus().length} CPUs)`];
const checks: [string, boolean, string][] = [];
for (const s of stages) {
  const h = s.history;
  lines.push(
    `${s.name}: ${s.completed ? 'completed' : 'FAILED'}, ${s.episodes} episodes in ${s.wallS.toFixed(0)} s = ` +
      `${s.perS.toFixed(2)} episodes/s; most in flight ${s.peakInFlight}`,
    `  ${h.workflows} workflows; largest history ${h.maxEvents} events (${h.maxEventsWorkflow}), ` +
      `${(h.maxBytes / 1e6).toFixed(2)} MB (${h.maxBytesWorkflow}); largest payload ` +
      `${(h.maxPayloadBytes / 1e3).toFixed(1)} kB (${h.maxPayloadWorkflow})`,
  );
  checks.push(
    [`${s.name} completed`, s.completed, JSON.stringify(s.statuses)],
    [`${s.name} history <= ${goals.maxHistoryEvents} events`, h.maxEvents <= goals.maxHistoryEvents, `${h.maxEvents}`],
    [`${s.name} bound held exactly`, s.peakInFlight === bound, `most in flight ${s.peakInFlight}, bound ${bound}`],
  );
}
if (bare && stages[0]) {
  const ratio = stages[0].wallS / (bare.wallS * (stages[0].episodes / Math.max(1, bare.episodes)));
  lines.push(
    `bare loop: ${bare.episodes} episodes in ${bare.wallS.toFixed(0)} s = ${bare.perS.toFixed(2)} episodes/s; ` +
      `Temporal / bare wall time per episode: ${ratio.toFixed(2)}x`,
  );
  checks.push([
    `Temporal overhead within ${goals.maxOverhead}x of the bare loop`,
    ratio <= goals.maxOverhead && bare.code === 0,
    `${ratio.toFixed(2)}x`,
  ]);
}
for (const [kind, { rss }] of workers) {
  lines.push(`${kind} worker RSS: start ${kb(rss.start)}, peak ${kb(rss.peak)}, end ${kb(rss.end)}`);
  checks.push([
    `${kind} worker peak RSS < ${goals.maxRssGrowth}x start`,
    rss.peak < goals.maxRssGrowth * rss.start,
    `${(rss.peak / rss.start).toFixed(2)}x`,
  ]);
}
for (const [name, ok, detail] of checks) lines.push(`${ok ? 'PASS' : 'MISS'} ${name} (${detail})`);
console.log(lines.join('\n'));
fs.writeFileSync(
  path.join(logDir, 'result.json'),
  JSON.stringify(
    {
      runId,
      scale,
      bound,
      stages,
      bare,
      rss: Object.fromEntries([...workers].map(([k, w]) => [k, w.rss])),
      checks,
    },
    null,
    2,
  ),
);
console.log(`figures: ${path.join(logDir, 'result.json')}`);
process.exit(checks.every(([, ok]) => ok) ? 0 : 1);
