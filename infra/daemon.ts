import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { exitedBy, isAlive, readPidRecord, writePidFile } from './pid-identity.ts';

/**
 * Small helpers for background servers the project manages itself: pid files, ports, waiting. Code that signals
 * a pid from a file checks first that it is still the process we started (infra/pid-identity.ts, which also
 * holds the liveness checks re-exported here).
 */

export { exitedBy, isAlive };

/** The live pid a pid file names, unverified: use `verifiedPid` before signalling it. */
export function readPid(pidFile: string): number | undefined {
  const pid = readPidRecord(pidFile)?.pid;
  return pid !== undefined && isAlive(pid) ? pid : undefined;
}

export function portInUse(port: number, host = '127.0.0.1'): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ port, host });
    socket.setTimeout(1000);
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('timeout', () => {
      socket.destroy();
      resolve(false);
    });
    socket.once('error', () => resolve(false));
  });
}

export async function waitFor(
  what: string,
  check: () => Promise<boolean>,
  timeoutMs: number,
  logFile?: string,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 250));
  }
  const tail =
    logFile && fs.existsSync(logFile)
      ? `\n--- last lines of ${logFile} ---\n${fs.readFileSync(logFile, 'utf8').split('\n').slice(-15).join('\n')}`
      : '';
  throw new Error(`${what} did not become ready within ${timeoutMs / 1000}s${tail}`);
}

/** Starts a detached process that outlives this one; stdout and stderr go to logFile. */
export function spawnDetached(
  command: string,
  args: string[],
  logFile: string,
  pidFile: string,
  env?: NodeJS.ProcessEnv,
  cwd?: string,
): number {
  fs.mkdirSync(path.dirname(logFile), { recursive: true });
  const out = fs.openSync(logFile, 'a');
  const child = spawn(command, args, { detached: true, stdio: ['ignore', out, out], env: env ?? process.env, cwd });
  fs.closeSync(out);
  if (child.pid === undefined) throw new Error(`could not start ${command}`);
  child.unref();
  writePidFile(pidFile, child.pid);
  return child.pid;
}

export async function stopPid(pid: number, timeoutMs = 15_000): Promise<void> {
  try {
    process.kill(pid, 'SIGTERM');
  } catch {
    return;
  }
  if (!(await exitedBy(pid, Date.now() + timeoutMs))) process.kill(pid, 'SIGKILL');
}
