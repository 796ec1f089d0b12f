import fs from 'node:fs';

/**
 * A pid file names a process; before anything signals it, the process must still be the one we started. A stale
 * file (the server died, its pid was reused) or a planted one would otherwise make `tbt down` kill an unrelated
 * process. A pid counts as ours only when, read from /proc:
 * - its start time equals the one recorded with the pid (a reused pid starts later), when one was recorded;
 * - it runs as the expected user (ours, unless the caller names another: Postgres as `postgres` under root);
 * - its arguments include every marker the caller expects (the worker's script path, the server's data file).
 * The markers come from the code, never from the file, so a planted file cannot name what it points at.
 * Where /proc is missing (not Linux) only liveness is checked, as before.
 */

export interface ExpectedProcess {
  /** Each must be one of the process's arguments (argv[0] included). */
  argvIncludes: readonly string[];
  /** The process's real uid; default ours. */
  uid?: number;
}

export interface ProcessIdentity {
  /** Start time in clock ticks since boot (/proc/PID/stat field 22): fixed at fork, unique per pid. */
  startTicks: string;
  uid: number;
  argv: string[];
}

/** Whether a process (or, for a negative pid, a process group) exists. */
export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Waits until `pid` is gone or `deadline` (epoch ms) passes; true when it is gone. */
export async function exitedBy(pid: number, deadline: number): Promise<boolean> {
  while (isAlive(pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  return !isAlive(pid);
}

const procAvailable = () => fs.existsSync('/proc/self/stat');

/** The identity of a live process from /proc, or undefined when it is gone (or /proc cannot be read). */
export function processIdentity(pid: number): ProcessIdentity | undefined {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) may hold spaces and parentheses: fields are counted after its last ')'.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
    const uid = Number(/^Uid:\s+(\d+)/m.exec(status)?.[1]);
    const argv = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean);
    const startTicks = fields[19];
    if (!startTicks || !Number.isInteger(uid)) return undefined;
    return { startTicks, uid, argv };
  } catch {
    return undefined;
  }
}

/** Writes `<pid> <start ticks>`: the start time lets a later reader tell a reused pid from ours. */
export function writePidFile(pidFile: string, pid: number): void {
  const start = processIdentity(pid)?.startTicks;
  fs.writeFileSync(pidFile, start ? `${pid} ${start}\n` : `${pid}\n`);
}

/** The pid and start time a pid file records (older files hold the pid alone). */
export function readPidRecord(pidFile: string): { pid: number; startTicks?: string } | undefined {
  let text: string;
  try {
    text = fs.readFileSync(pidFile, 'utf8');
  } catch {
    return undefined;
  }
  const match = /^\s*(\d+)(?:\s+(\d+))?\s*$/.exec(text);
  if (!match) return undefined;
  const pid = Number(match[1]);
  if (!Number.isSafeInteger(pid) || pid <= 0) return undefined;
  return match[2] ? { pid, startTicks: match[2] } : { pid };
}

/** Why `pid` is not the expected process, or undefined when it is (the reason names no secret). */
export function identityMismatch(
  pid: number,
  expected: readonly ExpectedProcess[],
  startTicks?: string,
): string | undefined {
  if (!procAvailable()) return isAlive(pid) ? undefined : 'not running';
  const id = processIdentity(pid);
  if (!id) return 'not running';
  if (startTicks !== undefined && id.startTicks !== startTicks) return 'started after the pid file was written';
  const ownUid = process.getuid?.() ?? id.uid;
  const fits = expected.some((e) => id.uid === (e.uid ?? ownUid) && e.argvIncludes.every((a) => id.argv.includes(a)));
  return fits ? undefined : `runs as uid ${id.uid}: ${id.argv.slice(0, 4).join(' ')}, not the expected program`;
}

/** The pid in `pidFile` when it is a live process that is the expected one; undefined otherwise. */
export function verifiedPid(pidFile: string, ...expected: ExpectedProcess[]): number | undefined {
  const record = readPidRecord(pidFile);
  if (!record) return undefined;
  return identityMismatch(record.pid, expected, record.startTicks) === undefined ? record.pid : undefined;
}

/**
 * SIGTERM to the verified process (its process group with `group`), SIGKILL after `timeoutMs` if it is still
 * the same process. False when the pid file names no process of ours: nothing is signalled then.
 */
export async function stopVerifiedProcess(
  pidFile: string,
  expected: readonly ExpectedProcess[],
  options: { timeoutMs?: number; group?: boolean } = {},
): Promise<boolean> {
  const pid = verifiedPid(pidFile, ...expected);
  if (pid === undefined) return false;
  const started = processIdentity(pid)?.startTicks;
  const target = options.group ? -pid : pid;
  try {
    process.kill(target, 'SIGTERM');
  } catch {
    return true;
  }
  if (await exitedBy(target, Date.now() + (options.timeoutMs ?? 15_000))) return true;
  // Still what we signalled? A process group keeps its id while any member lives (no new process gets it);
  // a single process must still have the start time it had.
  if (options.group || !procAvailable() || processIdentity(pid)?.startTicks === started) {
    try {
      process.kill(target, 'SIGKILL');
    } catch {
      // gone meanwhile
    }
  }
  return true;
}
