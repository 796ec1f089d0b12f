import { spawnSync, type SpawnSyncReturns, type StdioOptions } from 'node:child_process';
import { hostProgram, SYSTEM_PATH } from './dataset-sandbox.ts';

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

export function hostPythonSync(
  args: string[],
  options: { input?: string; timeoutMs: number; stdio?: StdioOptions; python?: string },
): SpawnSyncReturns<string> {
  return spawnSync(options.python ?? hostProgram('python3'), ['-I', ...args], {
    cwd: '/',
    env: { ...HOST_PYTHON_ENV },
    encoding: 'utf8',
    timeout: options.timeoutMs,
    killSignal: 'SIGKILL',
    ...(options.input !== undefined ? { input: options.input } : {}),
    ...(options.stdio ? { stdio: options.stdio } : {}),
  });
}
