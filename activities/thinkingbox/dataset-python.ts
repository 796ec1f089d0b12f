import fs from 'node:fs';
import path from 'node:path';
import { repoRoot } from '../../config/environment.ts';

/**
 * The Python that runs dataset code (tool servers, test functions, the test-file parser): the environment
 * `scripts/setup.sh` prepares from thinkingbox/requirements.txt, else `python3` from PATH.
 */
export function datasetPython(): string {
  const marker = path.join(repoRoot, '.tools', 'thinkingbox-venv');
  if (fs.existsSync(marker)) {
    const python = path.join(fs.readFileSync(marker, 'utf8').trim(), 'bin', 'python');
    if (fs.existsSync(python)) return python;
  }
  return 'python3';
}
