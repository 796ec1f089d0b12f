import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, test } from 'node:test';
import { declaredDependencies } from '../../datasets/thinkingbox/dataset-environment.ts';
import { hostPythonSync } from '../../datasets/thinkingbox/host-python.ts';
import { readDeclaredRequirements } from '../../datasets/thinkingbox/requirement-specs.ts';
import { repoRoot } from '../../config/environment.ts';
import { testTempDir } from '../helpers/temp-dir.ts';

/**
 * Third security review, finding 1: `tbt tasks import-thinkingbox` / `prepare-env` / `validate` run in a dataset's
 * folder started `python3 -c ...` and `python3 -m venv` there, so the folder's own json.py ran on the host as the
 * worker and saw DATABASE_URL. Planted modules here write a marker when imported; none may run.
 */

const PLANTED = ['json.py', 'tomllib.py', 'yaml.py', 'venv/__main__.py', 'venv/__init__.py', 'encodings_x.py'];

function plantedDataset(): { dir: string; marker: string; pkg: string } {
  const dir = testTempDir('tbt-planted-dataset-');
  const marker = path.join(dir, 'planted-code-ran');
  const code = `open(${JSON.stringify(marker)}, "a").write(__file__ + "\\n")\n`;
  for (const rel of PLANTED) {
    fs.mkdirSync(path.dirname(path.join(dir, rel)), { recursive: true });
    fs.writeFileSync(path.join(dir, rel), code);
  }
  const pkg = path.join(dir, 'server-pkg');
  fs.mkdirSync(pkg);
  fs.writeFileSync(path.join(pkg, 'pyproject.toml'), '[project]\nname = "srv"\ndependencies = ["packaging>=20"]\n');
  return { dir, marker, pkg };
}

const cwd = process.cwd();
after(() => process.chdir(cwd));

test('third review, finding 1: a dataset folder as working directory runs none of its Python on the host', () => {
  const { dir, marker, pkg } = plantedDataset();
  process.chdir(dir);
  process.env.DATABASE_URL = 'postgres://secret@example/db';
  try {
    assert.deepEqual(declaredDependencies([pkg]), ['packaging>=20']);
    const requirements = readDeclaredRequirements([pkg], { allowUrls: false, allowSourceUrls: false });
    assert.deepEqual(
      requirements.map((r) => r.requirement),
      ['packaging>=20'],
    );
    const venv = hostPythonSync(['-m', 'venv', '--without-pip', path.join(dir, 'made-venv')], { timeoutMs: 120_000 });
    assert.equal(venv.status, 0, venv.stderr);
    const seen = hostPythonSync(['-c', 'import json, os; print(json.dumps(dict(os.environ)))'], { timeoutMs: 60_000 });
    const env = JSON.parse(seen.stdout) as Record<string, string>;
    assert.equal(env.DATABASE_URL, undefined, 'no secret of the worker reaches the host Python');
  } finally {
    delete process.env.DATABASE_URL;
    process.chdir(cwd);
  }
  assert.equal(fs.existsSync(marker), false, fs.existsSync(marker) ? fs.readFileSync(marker, 'utf8') : '');
});

test('third review, finding 1 (the rule): under datasets/ python3 starts only through host-python.ts', () => {
  const dir = path.join(repoRoot, 'datasets');
  const offenders: string[] = [];
  for (const rel of fs.readdirSync(dir, { recursive: true }) as string[]) {
    if (!rel.endsWith('.ts') || rel.endsWith('host-python.ts')) continue;
    const text = fs.readFileSync(path.join(dir, rel), 'utf8');
    for (const [i, line] of text.split('\n').entries()) {
      if (/\bspawn(Sync)?\(\s*['"`]python3?['"`]|exec(File)?(Sync)?\(\s*['"`]python3?['"`]/.test(line))
        offenders.push(`datasets/${rel}:${i + 1}: ${line.trim()}`);
    }
  }
  assert.deepEqual(offenders, [], 'start the host Python with hostPythonSync (-I, cwd /, a fixed environment)');
});
