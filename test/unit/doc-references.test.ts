import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { repoRoot } from '../../config/environment.ts';

/**
 * Docs and comments point readers at files ("see sandbox/sandbox-pool.ts"); after a file moves, such a pointer
 * silently goes stale. Every repository path a doc or source file names must exist, relative to the repository
 * root or to the naming file. Tests are left out: they name missing files on purpose.
 */

/** Paths that are not in this repository by design, with the reason. */
const notInRepository: Record<string, string> = {
  'config/dynamicconfig/tbt.yaml': 'a path inside the Temporal server container (docker/compose.yaml mounts it)',
};

function trackedFiles(): string[] {
  const out = execFileSync('git', ['ls-files', '*.md', '*.ts', '*.py', '*.sh', '*.yaml', '*.js'], {
    cwd: repoRoot,
    encoding: 'utf8',
  });
  return out
    .split('\n')
    .filter((f) => f !== '' && !/^(examples|tasks|test)\/|\/(tests?|fixtures)\//.test(f))
    .filter((f) => fs.existsSync(path.join(repoRoot, f)));
}

/** A path under one of our top-level folders that ends in a source extension or a slash. */
export function namedPaths(text: string, topLevel: readonly string[]): string[] {
  const pattern = new RegExp(`(?<![\\w./-])(?:${topLevel.join('|')})(?:/[\\w.-]+)*/?(?![\\w-])`, 'g');
  const named = [...text.matchAll(pattern)].map((m) => m[0].replace(/\.$/, ''));
  return named.filter((p) => p.endsWith('/') || /\.(ts|py|sql|md|sh|yaml|yml|json|toml|txt|js)$/.test(p));
}

test('namedPaths finds repository paths in prose and comments, not URLs or other words', () => {
  const text = 'see `rollout/episode-runner.ts:12`, core/ and https://x.org/core/a.ts; score/x.ts; tasks';
  assert.deepEqual(namedPaths(text, ['core', 'rollout']), ['rollout/episode-runner.ts', 'core/']);
});

test('every repository path named in docs and source comments exists', () => {
  const topLevel = fs
    .readdirSync(repoRoot, { withFileTypes: true })
    .filter((e) => e.isDirectory() && !e.name.startsWith('.') && e.name !== 'node_modules')
    .map((e) => e.name);
  const missing: string[] = [];
  for (const file of trackedFiles()) {
    const lines = fs.readFileSync(path.join(repoRoot, file), 'utf8').split('\n');
    lines.forEach((line, i) => {
      for (const named of namedPaths(line, topLevel)) {
        const candidates = [path.join(repoRoot, named), path.join(repoRoot, path.dirname(file), named)];
        if (!(named in notInRepository) && !candidates.some((c) => fs.existsSync(c))) {
          missing.push(`${file}:${i + 1}: ${named}`);
        }
      }
    });
  }
  assert.deepEqual(missing, [], `stale paths:\n${missing.join('\n')}`);
});
