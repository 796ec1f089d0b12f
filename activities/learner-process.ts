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
 * checkpoint; steps are idempotent by id, so the retried step is applied exactly once.
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

export function controlUrl(files: LearnerFiles): string | undefined {
  try {
    const info = JSON.parse(fs.readFileSync(path.join(files.checkpoints, 'control.json'), 'utf8')) as {
      host: string;
      port: number;
    };
    return `http://${info.host}:${info.port}`;
  } catch {
    return undefined;
  }
}

export async function learnerRequest<T>(
  url: string,
  method: 'GET' | 'POST',
  route: string,
  body?: unknown,
  timeoutMs = 60_000,
): Promise<T> {
  let response: Response;
  try {
    response = await fetch(`${url}${route}`, {
      method,
      headers: { 'content-type': 'application/json' },
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

async function healthy(url: string | undefined): Promise<boolean> {
  if (!url) return false;
  try {
    const h = await learnerRequest<{ ready?: boolean }>(url, 'GET', '/health', undefined, 3000);
    return h.ready === true;
  } catch {
    return false;
  }
}

/** Returns the control URL of a running learner for this campaign, starting (or resuming) one if needed. */
export async function ensureLearner(
  files: LearnerFiles,
  learnerConfig: Record<string, unknown>,
  nprocPerNode: number,
  startTimeoutMs = 600_000,
): Promise<string> {
  const pid = readPid(files.pid);
  if (pid !== undefined) {
    const url = controlUrl(files);
    if (await healthy(url)) return url!;
    // Alive but not answering: it may still be loading; give it the start timeout before replacing it.
    try {
      await waitFor(
        'learner control endpoint',
        async () => !isAlive(pid) || (await healthy(controlUrl(files))),
        startTimeoutMs,
        files.log,
      );
    } catch {
      await stopPid(-pid, 5000); // the whole group: torchrun and its ranks, or orphaned ranks hold memory
    }
    if (isAlive(pid) && (await healthy(controlUrl(files)))) return controlUrl(files)!;
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
      return healthy(controlUrl(files));
    },
    startTimeoutMs,
    files.log,
  );
  return controlUrl(files)!;
}

export async function stopLearner(files: LearnerFiles): Promise<void> {
  const url = controlUrl(files);
  if (url) await learnerRequest(url, 'POST', '/shutdown', {}, 30_000).catch(() => undefined);
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
