import { spawnSync, type SpawnSyncReturns, type StdioOptions } from 'node:child_process';
import { SYSTEM_PATH } from './dataset-sandbox.ts';

/**
 * The only way the host runs a Python of its own on a dataset's behalf (reading pyproject files, making the venv,
 * the interpreter's version): dataset code must never run on the host, and `python3` started by name in a
 * dataset's folder with the worker's environment imports that folder's `json.py`, `tomllib.py` or `venv/` first,
 * as the worker, seeing its secrets (third security review, finding 1). So: the interpreter by absolute path,
 * `-I` (neither the working folder nor PYTHON* variables nor the user site reach `sys.path`), `/` as the working
 * folder, and an environment of a fixed PATH and locale only.
 */
export const HOST_PYTHON_ENV: Readonly<Record<string, string>> = Object.freeze({
  PATH: SYSTEM_PATH,
  LANG: 'C.UTF-8',
  LC_ALL: 'C.UTF-8',
});

let operatorPython: string | undefined;

/**
 * The operator's `python3` (the first on the worker's own PATH, as before), resolved once to the interpreter's real
 * file: a pyenv shim or a wrapper script needs the operator's environment, the interpreter itself does not. The
 * probe runs our one line only (`-I`, in `/`).
 */
export function hostPython(): string {
  if (operatorPython) return operatorPython;
  const probe = spawnSync('python3', ['-I', '-c', 'import sys; print(sys.executable)'], {
    cwd: '/',
    encoding: 'utf8',
    timeout: 60_000,
    killSignal: 'SIGKILL',
  });
  const found = probe.status === 0 ? probe.stdout.trim() : '';
  if (!found) throw new Error(`python3: not found on PATH (${(probe.stderr || probe.error?.message || '').trim()})`);
  operatorPython = found;
  return found;
}

export function hostPythonSync(
  args: string[],
  options: { input?: string; timeoutMs: number; stdio?: StdioOptions; python?: string },
): SpawnSyncReturns<string> {
  return spawnSync(options.python ?? hostPython(), ['-I', ...args], {
    cwd: '/',
    env: { ...HOST_PYTHON_ENV },
    encoding: 'utf8',
    timeout: options.timeoutMs,
    killSignal: 'SIGKILL',
    ...(options.input !== undefined ? { input: options.input } : {}),
    ...(options.stdio ? { stdio: options.stdio } : {}),
  });
}
