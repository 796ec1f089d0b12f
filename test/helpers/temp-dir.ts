import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const created: string[] = [];
let registered = false;

/**
 * A fresh folder under the system temp dir, removed when the test process exits (pass or fail), so runs do not
 * pile up learner checkpoints and server data in /tmp: a campaign test leaves 2-4 GB, and CI once filled its disk.
 * TBT_KEEP_TEST_DIRS=1 keeps them for a post-mortem.
 */
export function testTempDir(prefix: string): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  created.push(dir);
  if (!registered && !process.env.TBT_KEEP_TEST_DIRS) {
    registered = true;
    process.on('exit', () => {
      for (const d of created) fs.rmSync(d, { recursive: true, force: true, maxRetries: 2 });
    });
  }
  return dir;
}
