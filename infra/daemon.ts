import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';

/** Small helpers for background servers the project manages itself: pid files, ports, waiting. */

export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

export function readPid(pidFile: string): number | undefined {
  try {
    const pid = Number(fs.readFileSync(pidFile, 'utf8').trim());
    return Number.isInteger(pid) && pid > 0 && isAlive(pid) ? pid : undefined;
  } catch {
    return undefined;
  }
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
  fs.writeFileSync(pidFile, String(child.pid));
  return child.pid;
}

/** Waits until `pid` is gone or `deadline` (epoch ms) passes; true when it is gone. */
export async function exitedBy(pid: number, deadline: number): Promise<boolean> {
  while (isAlive(pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  return !isAlive(pid);
}

export async function stopPid(pid: number, timeoutMs = 15_000): Promise<void> {
  try {
    process.kill(pid, 'SIGTERM');
  } catch {
    return;
  }
  if (!(await exitedBy(pid, Date.now() + timeoutMs))) process.kill(pid, 'SIGKILL');
}
