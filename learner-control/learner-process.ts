import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { readEnvironment } from '../config/environment.ts';
import { InfrastructureError } from '../core/errors.ts';
import { onCpus } from '../infra/cpu-affinity.ts';
import { exitedBy, isAlive, readPid, stopPid, waitFor } from '../infra/daemon.ts';
import { gpuLearnerDir, pythonBinary } from '../infra/python-env.ts';
import { learnerRequest, type LearnerEndpoint } from './learner-client.ts';
import { torchrunArgs, type LearnerLaunch } from './learner-launch.ts';
import { campaignFileName } from '../core/campaign-id.ts';

/**
 * One long-lived learner process group per campaign on this host (`torchrun -m tbt_gpu.learner`), started
 * detached so it outlives a GPU-worker crash, found again through its pid file and the control port it
 * writes to `<checkpoint dir>/control.json`. A dead learner is restarted with `--resume` from its last
 * checkpoint; steps are idempotent by id, so the retried step is applied exactly once. Every request carries
 * the bearer token the learner wrote (0600) to `<checkpoint dir>/control.token` for this run; it is read
 * from there on each call and never passed through Temporal or logged.
 *
 * A learner over several nodes is one torchrun per node, each started by that node's GPU worker
 * (`ensureLearner` on node 0, which waits until rank 0 answers, i.e. every rank has joined; `ensureLearnerNode`
 * on the others, which only starts and keeps its torchrun alive). The learner folder (config, checkpoints,
 * control.json) must then be on a filesystem every node shares; pid and log files are per node.
 */

export interface LearnerFiles {
  dir: string;
  config: string;
  checkpoints: string;
  pid: string;
  log: string;
  /** The campaign's embedded policy server (one per campaign, started by node 0's GPU worker). */
  policyServerPid: string;
}

export function learnerFiles(stateDir: string, campaignId: string, nodeRank = 0): LearnerFiles {
  const dir = path.join(stateDir, 'learners', campaignFileName(campaignId));
  const node = nodeRank === 0 ? '' : `-node${nodeRank}`;
  return {
    dir,
    config: path.join(dir, 'learner.json'),
    checkpoints: path.join(dir, 'checkpoints'),
    pid: path.join(dir, `learner${node}.pid`),
    log: path.join(dir, `learner${node}.log`),
    policyServerPid: path.join(dir, 'policy-server.pid'),
  };
}

/** Pid files of every node's torchrun in a learner folder (node 0's `learner.pid`, then `learner-node<R>.pid`). */
function nodePidFiles(files: LearnerFiles): string[] {
  if (!fs.existsSync(files.dir)) return [];
  return fs
    .readdirSync(files.dir)
    .filter((f) => /^learner(-node\d+)?\.pid$/.test(f))
    .map((f) => path.join(files.dir, f));
}

/** Written atomically: on a shared folder another node may be starting from the same file. */
function writeLearnerConfig(files: LearnerFiles, learnerConfig: Record<string, unknown>): void {
  fs.mkdirSync(files.checkpoints, { recursive: true });
  const text = JSON.stringify(
    { ...learnerConfig, checkpoint: { ...(learnerConfig.checkpoint as object), dir: files.checkpoints } },
    null,
    2,
  );
  const tmp = `${files.config}.${process.pid}.tmp`;
  fs.writeFileSync(tmp, text);
  fs.renameSync(tmp, files.config);
}

function spawnTorchrun(files: LearnerFiles, launch: LearnerLaunch): number {
  // torchrun through tbt_gpu.learner.bound_torchrun: on one node its stores listen on loopback only.
  const args = ['-m', 'tbt_gpu.learner.bound_torchrun', ...torchrunArgs(launch, files.config)];
  const out = fs.openSync(files.log, 'a');
  const child = spawn(...onCpus(pythonBinary(), args, readEnvironment().TBT_LEARNER_CPUS), {
    cwd: gpuLearnerDir,
    detached: true,
    stdio: ['ignore', out, out],
    env: { ...process.env, OMP_WAIT_POLICY: process.env.OMP_WAIT_POLICY ?? 'PASSIVE', PYTHONPATH: gpuLearnerDir },
  });
  fs.closeSync(out);
  child.unref();
  fs.writeFileSync(files.pid, String(child.pid));
  return child.pid!;
}

function logTail(files: LearnerFiles): string {
  return fs.readFileSync(files.log, 'utf8').split('\n').slice(-12).join('\n');
}

/** Rank 0's endpoint file: its host, port and pid, written once it is ready and removed at its clean-up. */
function endpointFile(files: LearnerFiles): string {
  return path.join(files.checkpoints, 'control.json');
}

/** The run's bearer token (0600), written by rank 0 before its endpoint file. */
function tokenFile(files: LearnerFiles): string {
  return path.join(files.checkpoints, 'control.token');
}

/**
 * Removed before a start (the new rank 0 announces itself there) and after a stop: a learner killed before its
 * own clean-up leaves it behind, nothing listens there any more, and a later start must not find it (seen in CI
 * under load).
 */
function removeEndpointFile(files: LearnerFiles): void {
  fs.rmSync(endpointFile(files), { force: true });
}

export function controlEndpoint(files: LearnerFiles): LearnerEndpoint | undefined {
  try {
    const info = JSON.parse(fs.readFileSync(endpointFile(files), 'utf8')) as { host: string; port: number };
    const token = fs.readFileSync(tokenFile(files), 'utf8').trim();
    return { url: `http://${info.host}:${info.port}`, token };
  } catch {
    return undefined;
  }
}

/**
 * torchrun starts each rank in its own session, so killing torchrun's process group (or kill -9 of torchrun)
 * leaves the ranks running. Rank 0 records its pid in control.json; an orphan must be gone before a new
 * learner resumes from the same checkpoints.
 */
async function stopOrphanedRankZero(files: LearnerFiles): Promise<void> {
  try {
    const { pid } = JSON.parse(fs.readFileSync(endpointFile(files), 'utf8')) as { pid?: number };
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
  launch: LearnerLaunch,
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
  writeLearnerConfig(files, learnerConfig);
  fs.writeFileSync(launchFile(files), JSON.stringify(launch));
  removeEndpointFile(files);
  fs.rmSync(tokenFile(files), { force: true }); // the new run writes its own
  const child = spawnTorchrun(files, launch);
  await waitFor(
    'learner control endpoint',
    async () => {
      if (!isAlive(child))
        throw new InfrastructureError(`learner exited during start-up (log ${files.log}):\n${logTail(files)}`);
      return healthy(controlEndpoint(files));
    },
    startTimeoutMs,
    files.log,
  );
  return controlEndpoint(files)!;
}

/** Where node 0 records how it launched (export and restarts relaunch the same way). */
export function launchFile(files: LearnerFiles): string {
  return path.join(files.dir, 'launch.json');
}

/**
 * A node other than 0: starts its torchrun if it is not running and returns once it has stayed up a moment (it
 * then waits in the rendezvous for the others; node 0's `ensureLearner` sees every rank join).
 */
export async function ensureLearnerNode(
  files: LearnerFiles,
  learnerConfig: Record<string, unknown>,
  launch: LearnerLaunch,
): Promise<{ pid: number; started: boolean }> {
  const running = readPid(files.pid);
  if (running !== undefined && isAlive(running)) return { pid: running, started: false };
  writeLearnerConfig(files, learnerConfig);
  const pid = spawnTorchrun(files, launch);
  await new Promise((r) => setTimeout(r, 3000));
  if (!isAlive(pid))
    throw new InfrastructureError(
      `learner node ${launch.nodeRank} exited at once (log ${files.log}):\n${logTail(files)}`,
    );
  return { pid, started: true };
}

/** How many nodes' torchruns with a pid file here are running. */
export function runningLearnerNodes(files: LearnerFiles): number {
  return nodePidFiles(files).filter((f) => readPid(f) !== undefined).length;
}

/**
 * Stops the campaign's learner (not its policy server): rank 0's shutdown ends every node's ranks; then every
 * node's torchrun whose pid file is here is stopped.
 */
export async function stopLearner(files: LearnerFiles): Promise<void> {
  const endpoint = controlEndpoint(files);
  const asked = endpoint
    ? await learnerRequest(endpoint, 'POST', '/shutdown', {}, 30_000).then(
        () => true,
        () => false,
      )
    : false;
  // After /shutdown the ranks leave on their own (torchrun then exits 0); a signal is for one that does not.
  const deadline = Date.now() + (asked ? 30_000 : 0);
  for (const pidFile of nodePidFiles(files)) {
    const pid = readPid(pidFile);
    if (pid !== undefined && !(await exitedBy(pid, deadline))) await stopPid(-pid, 30_000);
  }
  await stopOrphanedRankZero(files);
  removeEndpointFile(files); // one killed here (its /shutdown timed out) did not remove it
}
