import fs from 'node:fs';
import path from 'node:path';
import { repoRoot } from '../../config/environment.ts';

/**
 * The Python environment for dataset code (tool servers, test functions, the test-file parser) that
 * `scripts/setup.sh` prepares from thinkingbox/requirements.txt and records in .tools/thinkingbox-venv.
 */

function datasetVenv(): string | undefined {
  const marker = path.join(repoRoot, '.tools', 'thinkingbox-venv');
  const venv = fs.existsSync(marker) ? fs.readFileSync(marker, 'utf8').trim() : '';
  return venv && fs.existsSync(path.join(venv, 'bin', 'python')) ? venv : undefined;
}

/** Its interpreter, else `python3` from PATH. */
export function datasetPython(): string {
  const venv = datasetVenv();
  return venv ? path.join(venv, 'bin', 'python') : 'python3';
}

/** Folders to put first on PATH for server commands (so `python` in servers.yaml is that interpreter). */
export function datasetPathPrefix(): string[] {
  const venv = datasetVenv();
  return venv ? [path.join(venv, 'bin')] : [];
}
