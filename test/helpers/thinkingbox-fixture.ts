import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { importThinkingbox } from '../../cli/commands/tasks.ts';
import { repoRoot } from '../../config/environment.ts';
import { prepareDatasetEnvironment } from '../../datasets/thinkingbox/dataset-environment.ts';
import { loadImportedSuite, type ThinkingBoxSuite } from '../../datasets/thinkingbox/imported-suite.ts';
import { thinkingboxResources } from '../../rollout/thinkingbox-resources.ts';
import { testTempDir } from './temp-dir.ts';

/**
 * The fixture ThinkingBox dataset (examples/thinkingbox-fixture) imported into a fresh folder with its server
 * packages prepared, and resources that start its real servers per episode: what episode tests against the fixture's
 * servers share (no Postgres, no Temporal).
 */

export const fixtureDir = path.join(repoRoot, 'examples', 'thinkingbox-fixture');

/** Imports the fixture's release list under a new temporary folder (call it in `before`). */
export function importFixtureSuite(tempPrefix: string): ThinkingBoxSuite {
  const work = testTempDir(tempPrefix);
  fs.chmodSync(work, 0o755); // dataset code runs as an unprivileged uid: its files must be readable by others
  const imported = path.join(work, 'imported');
  const errors: string[] = [];
  const io = { out: () => undefined, err: (s: string) => errors.push(s) };
  const list = path.join(fixtureDir, 'releases', 'fixture_v1', 'testlist_fixture_v1.yaml');
  const code = importThinkingbox(['--data', path.join(fixtureDir, 'dataset'), '--list', list, '--out', imported], io);
  assert.equal(code, 0, errors.join('\n'));
  const suite = loadImportedSuite(imported).suite!;
  prepareDatasetEnvironment(suite.imported.server_packages, () => undefined);
  return suite;
}

/** Fresh server processes per episode (none kept warm), the fixture's tests graded natively. */
export function fixtureResources() {
  return thinkingboxResources({
    warm_processes: 0,
    server_start: 'template',
    server_start_timeout_ms: 60_000,
    test_timeout_ms: 60_000,
    native_grading: true,
  });
}
