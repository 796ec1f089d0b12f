import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import { repoRoot } from '../config/environment.ts';
import { BadInputError, InfrastructureError } from '../core/errors.ts';
import { exitClassOfCode } from '../core/exit-codes.ts';

const run = promisify(execFile);

/** How long one `tbt` subprocess may run before it is killed (and the failure counted as infrastructure). */
const TBT_TIMEOUT_MS = 30 * 60_000;

/**
 * Runs a `tbt` command (the same one users run) and returns its stdout. `signal` is the activity's cancellation
 * signal: a cancelled (or timed-out) activity ends its subprocess, so a retry never runs beside an orphan. `cwd`:
 * where relative paths among `args` start. A failure is thrown by its exit class (`tbtFailure`).
 */
export async function tbt(args: string[], signal: AbortSignal | undefined, cwd?: string): Promise<string> {
  return runClassified(
    path.join(repoRoot, 'node_modules', '.bin', 'tsx'),
    [path.join(repoRoot, 'cli', 'tbt.ts'), ...args],
    `tbt ${args[0]}`,
    { signal, cwd },
  );
}

/** How a subprocess ended, as execFile reports it. */
export interface ProcessEnd {
  /** The exit code; null when a signal ended it (through tsx, which relays it: 128 + the signal's number). */
  code: number | null;
  signal: NodeJS.Signals | null;
  /** Whether we killed it: its time limit passed. */
  killed: boolean;
  stderr: string;
}

/**
 * The error a failed `tbt` subprocess is thrown as, by the exit code core/exit-codes.ts defines: bad flags or bad
 * input is a BadInputError (never retried), infrastructure an InfrastructureError (retried, then the campaign
 * pauses), an unclassified error (most likely a bug) or a code tbt does not use a plain Error (retried within the
 * activity's retry profile, then the campaign fails with it). A signal (a time limit, the OOM killer, V8's abort
 * on a full heap) is infrastructure. Each message ends with the tail of stderr, where tbt wrote what went wrong.
 */
export function tbtFailure(what: string, end: ProcessEnd): Error {
  const tail = end.stderr.trim().slice(-2000);
  // tsx reports its child's death by a signal as exit 128 + the signal's number (137 for SIGKILL).
  if (end.killed || end.code === null || end.code > 128) {
    const how = end.killed ? 'ran past its time limit' : 'was ended by a signal';
    return new InfrastructureError(`${what} ${how} (${end.signal ?? `exit ${end.code}`}): ${tail}`);
  }
  const exitClass = exitClassOfCode(end.code);
  const message = `${what} failed (exit ${end.code}${exitClass ? `, ${exitClass}` : ''}): ${tail}`;
  if (exitClass === 'badInput' || exitClass === 'usage') return new BadInputError(message);
  if (exitClass === 'infrastructure') return new InfrastructureError(message);
  return new Error(message);
}

/**
 * Runs `file argv` and returns its stdout; a non-zero exit is thrown as `tbtFailure` says (`what` names the command
 * in its message). A cancelled run, and a process that could not start, are thrown as they are.
 */
export async function runClassified(
  file: string,
  argv: string[],
  what: string,
  options: { signal?: AbortSignal | undefined; cwd?: string | undefined; timeoutMs?: number },
): Promise<string> {
  try {
    const { stdout } = await run(file, argv, {
      maxBuffer: 64 << 20,
      timeout: options.timeoutMs ?? TBT_TIMEOUT_MS,
      signal: options.signal,
      cwd: options.cwd,
    });
    return stdout;
  } catch (err) {
    const e = err as { code?: unknown; signal?: NodeJS.Signals | null; killed?: boolean; stderr?: string };
    // Cancelled: the activity ends as Temporal asked. A string code: spawning failed or stdout overflowed.
    if (options.signal?.aborted || typeof e.code === 'string') throw err;
    throw tbtFailure(what, {
      code: typeof e.code === 'number' ? e.code : null,
      signal: e.signal ?? null,
      killed: e.killed === true,
      stderr: String(e.stderr ?? ''),
    });
  }
}
