import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import { repoRoot } from '../config/environment.ts';
import { BadInputError } from '../core/errors.ts';

const run = promisify(execFile);

/**
 * Runs a `tbt` command (the same one users run) and returns its stdout. `signal` is the activity's cancellation
 * signal: a cancelled (or timed-out) activity ends its subprocess, so a retry never runs beside an orphan. `cwd`:
 * where relative paths among `args` start.
 */
export async function tbt(args: string[], signal: AbortSignal | undefined, cwd?: string): Promise<string> {
  try {
    const { stdout } = await run(
      path.join(repoRoot, 'node_modules', '.bin', 'tsx'),
      [path.join(repoRoot, 'cli', 'tbt.ts'), ...args],
      { maxBuffer: 64 << 20, timeout: 30 * 60_000, signal, cwd },
    );
    return stdout;
  } catch (err) {
    const e = err as { stderr?: string; code?: number };
    // Exit 1 = the input is wrong (names file/line/field); retrying cannot help.
    if (e.code === 1 || e.code === 2)
      throw new BadInputError(`tbt ${args[0]} failed: ${(e.stderr ?? '').trim().slice(0, 2000)}`);
    throw err;
  }
}
