import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { InfrastructureError, errorMessage } from '../core/errors.ts';
import { isAlive, readPid, stopPid, waitFor } from '../infra/daemon.ts';
import { gpuLearnerDir, pythonBinary } from '../infra/python-env.ts';

/**
 * One long-lived learner process group per campaign on this host (`torchrun -m tbt_gpu.learner`), started
 * detached so it outlives a GPU-worker crash, found again through its pid file and the control port it
 * writes to `<checkpoint dir>/control.json`. A dead learner is restarted with `--resume` from its last
 * checkpoint; steps are idempotent by id, so the retried step is applied exactly once. Every request carries
 * the bearer token the learner wrote (0600) to `<checkpoint dir>/control.token` for this run; it is read
 * from there on each call and never passed through Temporal or logged.
 */

export interface LearnerFiles {
  dir: string;
  config: string;
  checkpoints: string;
  pid: string;
  log: string;
}

export function learnerFiles(stateDir: string, campaignId: string): LearnerFiles {
  const dir = path.join(stateDir, 'learners', campaignId.replace(/[^A-Za-z0-9_.-]/g, '_'));
  return {
    dir,
    config: path.join(dir, 'learner.json'),
    checkpoints: path.join(dir, 'checkpoints'),
    pid: path.join(dir, 'learner.pid'),
    log: path.join(dir, 'learner.log'),
  };
}

export class LearnerHttpError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** Where a running learner listens, and the run's token; the token stays inside this process. */
export interface LearnerEndpoint {
  url: string;
  token: string;
}

export function controlEndpoint(files: LearnerFiles): LearnerEndpoint | undefined {
  try {
    const info = JSON.parse(fs.readFileSync(path.join(files.checkpoints, 'control.json'), 'utf8')) as {
      host: string;
      port: number;
    };
    const token = fs.readFileSync(path.join(files.checkpoints, 'control.token'), 'utf8').trim();
    return { url: `http://${info.host}:${info.port}`, token };
  } catch {
    return undefined;
  }
}

export async function learnerRequest<T>(
  endpoint: LearnerEndpoint,
  method: 'GET' | 'POST',
  route: string,
  body?: unknown,
  timeoutMs = 60_000,
): Promise<T> {
  let response: Response;
  try {
    response = await fetch(`${endpoint.url}${route}`, {
      method,
      headers: { 'content-type': 'application/json', authorization: `Bearer ${endpoint.token}` },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(timeoutMs),
    });
  } catch (err) {
    throw new InfrastructureError(`learner ${route}: ${errorMessage(err)}`, { cause: err });
  }
  const payload = (await response.json().catch(() => ({}))) as { error?: string; code?: string };
  if (!response.ok)
    throw new LearnerHttpError(
      response.status,
      payload.code ?? 'unknown',
      `learner ${route}: HTTP ${response.status}: ${payload.error ?? 'no message'}`,
    );
  return payload as T;
}

/**
 * torchrun starts each rank in its own session, so killing torchrun's process group (or kill -9 of torchrun)
 * leaves the ranks running. Rank 0 records its pid in control.json; an orphan must be gone before a new
 * learner resumes from the same checkpoints.
 */
async function stopOrphanedRankZero(files: LearnerFiles): Promise<void> {
  try {
    const { pid } = JSON.parse(fs.readFileSync(path.join(files.checkpoints, 'control.json'), 'utf8')) as {
      pid?: number;
    };
    if (typeof pid === 'number' && isAlive(pid)) await stopPid(pid, 10_000);
  } catch {
    // no control file: no rank 0 ever came up
  }
}

async function healthy(endpoint: LearnerEndpoint | undefined): Promise<boolean> {
  if (!endpoint) return false;
  try {
    const h = await learnerRequest<{ ready?: boolean }>(endpoint, 'GET', '/health', undefined, 3000);
    return h.ready === true;
  } catch {
    return false;
  }
}

/** Returns the control endpoint of a running learner for this campaign, starting (or resuming) one if needed. */
export async function ensureLearner(
  files: LearnerFiles,
  learnerConfig: Record<string, unknown>,
  nprocPerNode: number,
  startTimeoutMs = 600_000,
): Promise<LearnerEndpoint> {
  const pid = readPid(files.pid);
  if (pid !== undefined) {
    const known = controlEndpoint(files);
    if (await healthy(known)) return known!;
    // Alive but not answering: it may still be loading; give it the start timeout before replacing it.
    try {
      await waitFor(
        'learner control endpoint',
        async () => !isAlive(pid) || (await healthy(controlEndpoint(files))),
        startTimeoutMs,
        files.log,
      );
    } catch {
      await stopPid(-pid, 5000); // the whole group: torchrun and its ranks, or orphaned ranks hold memory
    }
    if (isAlive(pid) && (await healthy(controlEndpoint(files)))) return controlEndpoint(files)!;
  }
  await stopOrphanedRankZero(files);
  fs.mkdirSync(files.checkpoints, { recursive: true });
  fs.writeFileSync(
    files.config,
    JSON.stringify(
      { ...learnerConfig, checkpoint: { ...(learnerConfig.checkpoint as object), dir: files.checkpoints } },
      null,
      2,
    ),
  );
  fs.rmSync(path.join(files.checkpoints, 'control.json'), { force: true });
  fs.rmSync(path.join(files.checkpoints, 'control.token'), { force: true });
  const torchrun = path.join(path.dirname(pythonBinary()), 'torchrun');
  const args = [
    '--standalone',
    `--nproc-per-node=${nprocPerNode}`,
    '-m',
    'tbt_gpu.learner',
    '--config',
    files.config,
    '--resume',
  ];
  const out = fs.openSync(files.log, 'a');
  const child = spawn(torchrun, args, {
    cwd: gpuLearnerDir,
    detached: true,
    stdio: ['ignore', out, out],
    env: { ...process.env, OMP_WAIT_POLICY: process.env.OMP_WAIT_POLICY ?? 'PASSIVE', PYTHONPATH: gpuLearnerDir },
  });
  fs.closeSync(out);
  child.unref();
  fs.writeFileSync(files.pid, String(child.pid));
  await waitFor(
    'learner control endpoint',
    async () => {
      if (!isAlive(child.pid!))
        throw new InfrastructureError(
          `learner exited during start-up (log ${files.log}):\n${fs.readFileSync(files.log, 'utf8').split('\n').slice(-12).join('\n')}`,
        );
      return healthy(controlEndpoint(files));
    },
    startTimeoutMs,
    files.log,
  );
  return controlEndpoint(files)!;
}

export async function stopLearner(files: LearnerFiles): Promise<void> {
  const endpoint = controlEndpoint(files);
  if (endpoint) await learnerRequest(endpoint, 'POST', '/shutdown', {}, 30_000).catch(() => undefined);
  const pid = readPid(files.pid);
  if (pid !== undefined) await stopPid(-pid, 30_000);
  await stopOrphanedRankZero(files);
}

/** Stops every learner and embedded policy server started under this state folder; returns how many. */
export async function stopDetachedGpuProcesses(stateDir: string): Promise<number> {
  const root = path.join(stateDir, 'learners');
  if (!fs.existsSync(root)) return 0;
  let stopped = 0;
  for (const dir of fs.readdirSync(root)) {
    for (const pidFile of ['learner.pid', 'policy-server.pid']) {
      const pid = readPid(path.join(root, dir, pidFile));
      if (pid === undefined) continue;
      await stopPid(-pid, 20_000); // the whole process group: torchrun and its ranks
      stopped += 1;
    }
  }
  return stopped;
}
