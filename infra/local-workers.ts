import fs from 'node:fs';
import path from 'node:path';
import { repoRoot, type Environment } from '../config/environment.ts';
import { spawnDetached } from './daemon.ts';
import { stopVerifiedProcess, verifiedPid, type ExpectedProcess } from './pid-identity.ts';

/** The four workers as local background processes (the embedded default runs all of them on one machine). */

export const workerKinds = ['orchestrator', 'bookkeeping', 'rollout', 'gpu'] as const;
export type WorkerKind = (typeof workerKinds)[number];

function files(env: Environment, kind: WorkerKind) {
  const dir = path.join(env.TBT_STATE_DIR, 'workers');
  return { dir, pid: path.join(dir, `${kind}.pid`), log: path.join(dir, `${kind}.log`) };
}

/** What a worker's pid must run: its script, by absolute path (a pid file naming anything else is not ours). */
function workerProcess(kind: WorkerKind): ExpectedProcess {
  return { argvIncludes: [path.join(repoRoot, 'workers', `${kind}-worker.ts`)] };
}

export function workerPid(env: Environment, kind: WorkerKind): number | undefined {
  return verifiedPid(files(env, kind).pid, workerProcess(kind));
}

/**
 * Environment of the Node workers (not the GPU worker, whose children are vLLM and torch). Two malloc arenas
 * instead of glibc's 8 per core: native allocations (sockets of per-episode database and tool connections,
 * Temporal's core threads) otherwise spread over arenas that never shrink (bench/scale: rollout worker peak RSS
 * 2.20x -> 2.00x its start over 26,000 episodes; docs/scale.md). An operator's value wins.
 */
export function nodeWorkerEnv(base: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  return { ...base, MALLOC_ARENA_MAX: base.MALLOC_ARENA_MAX ?? '2' };
}

/**
 * Node flags of a worker (docker/compose.yaml and worker.Dockerfile repeat the rollout worker's). The rollout
 * worker allocates fast (JSON, tool and database traffic of every episode) while its live heap stays near 55 MB;
 * under V8's default limit (a quarter of RAM) the old generation grows to 4x its live size before a major GC, and
 * that slack was most of the worker's RSS growth (--trace-gc: 215 MB used before, 55 MB after). A 1 GB limit, far
 * above what it holds, makes V8 collect at about 1.6x: peak RSS 2.05x -> 1.29x at 0.2 scale, same episodes/s.
 */
export function nodeWorkerFlags(kind: WorkerKind): string[] {
  return kind === 'rollout' ? ['--max-old-space-size=1024'] : [];
}

/** Starts any of the workers not already running; returns the ones it started. */
/** `processEnv` is what the workers inherit (a test starts one with another state folder this way). */
export function startWorkers(
  env: Environment,
  kinds: readonly WorkerKind[] = workerKinds,
  processEnv: NodeJS.ProcessEnv = process.env,
): WorkerKind[] {
  const started: WorkerKind[] = [];
  for (const kind of kinds) {
    const f = files(env, kind);
    if (verifiedPid(f.pid, workerProcess(kind)) !== undefined) continue;
    fs.mkdirSync(f.dir, { recursive: true });
    // `node --import tsx` keeps the worker in this pid (the tsx launcher would add a relay process).
    spawnDetached(
      process.execPath,
      [...nodeWorkerFlags(kind), '--import', 'tsx', path.join(repoRoot, 'workers', `${kind}-worker.ts`)],
      f.log,
      f.pid,
      kind === 'gpu'
        ? { ...processEnv, OMP_WAIT_POLICY: 'PASSIVE' }
        : nodeWorkerEnv({ ...processEnv, OMP_WAIT_POLICY: 'PASSIVE' }),
      repoRoot,
    );
    started.push(kind);
  }
  return started;
}

export async function stopWorkers(env: Environment, kinds: readonly WorkerKind[] = workerKinds): Promise<WorkerKind[]> {
  const stopped: WorkerKind[] = [];
  for (const kind of kinds) {
    const f = files(env, kind);
    if (await stopVerifiedProcess(f.pid, [workerProcess(kind)], { timeoutMs: 40_000 })) stopped.push(kind);
    fs.rmSync(f.pid, { force: true }); // a pid file left behind means the worker exited on its own
  }
  return stopped;
}

/** Local workers that exited on their own: a pid file without its process (stopWorkers removes the file). */
export function exitedWorkers(env: Environment): { kind: WorkerKind; log: string }[] {
  return workerKinds
    .map((kind) => ({ kind, ...files(env, kind) }))
    .filter((f) => fs.existsSync(f.pid) && verifiedPid(f.pid, workerProcess(f.kind)) === undefined)
    .map(({ kind, log }) => ({ kind, log }));
}

export function workerLog(env: Environment, kind: WorkerKind): string {
  return files(env, kind).log;
}
