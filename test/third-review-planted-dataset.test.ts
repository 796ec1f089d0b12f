import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { databaseUrl, readEnvironment, repoRoot } from '../config/environment.ts';
import { testTempDir } from './helpers/temp-dir.ts';

/**
 * Third security review (issue 39), finding 1: `tbt tasks import-thinkingbox`, `prepare-env` and `validate` run
 * with a dataset's folder as the working directory started `python3` by name there, so the folder's `json.py`,
 * `tomllib.py`, `yaml.py` or `venv/` ran on the host, as the worker, with its environment. Here the fixture
 * dataset carries all of them, at its root and in its dataset folder, and the real CLI imports, prepares and
 * validates it from those folders. Each planted module appends a line to a marker file outside the dataset: on the
 * host the write succeeds; in the dataset sandbox that path is not there and the write fails silently, and the
 * json/tomllib/yaml modules then hand over to the real ones, so a sandboxed process that imports them still works.
 * Needs the local stack (`tbt up`: validate uses the control database) and bubblewrap, as `npm test` provides.
 */

const fixture = path.join(repoRoot, 'examples', 'thinkingbox-fixture');
const tsxLoader = fileURLToPath(import.meta.resolve('tsx'));
const tbt = path.join(repoRoot, 'cli', 'tbt.ts');
/** A secret the planted code must never see: the worker's database URL. */
const SECRET_URL = 'postgres://tbt:secret@127.0.0.1:1/x';

/** On import or execution: one line to `marker`, if the path is reachable (the host); nothing else. */
function markerLines(marker: string): string {
  return [
    '# Planted by test/third-review-planted-dataset.test.ts. On the host this line reaches the marker file;',
    '# inside the dataset sandbox its folder is not mounted, so the write fails and nothing happens.',
    'import os as _os, sys as _sys',
    'try:',
    `    with open(${JSON.stringify(marker)}, "a") as _f:`,
    '        _f.write(f"{__file__} uid={_os.getuid()} DATABASE_URL={\'DATABASE_URL\' in _os.environ}\\n")',
    'except OSError:',
    '    pass',
  ].join('\n');
}

/** A planted stand-in for a standard (or common) module: marks, then becomes the real module. */
function transparentModule(marker: string): string {
  return [
    markerLines(marker),
    '# Then step aside so a process that imported us still works: drop our folder from sys.path, forget ourselves,',
    '# import the real module and stand in its place (the import statement returns what sys.modules holds). A real',
    '# module that is not installed (yaml) raises ImportError, as its absence would have.',
    'import importlib as _importlib',
    '_here = _os.path.dirname(_os.path.abspath(__file__))',
    '_sys.path[:] = [p for p in _sys.path if _os.path.abspath(p or ".") != _here]',
    'del _sys.modules[__name__]',
    '_real = _importlib.import_module(__name__)',
    '_sys.modules[__name__] = _real',
    'globals().update(_real.__dict__)',
    '',
  ].join('\n');
}

/** Plants json.py, tomllib.py, yaml.py and venv/ (a regular package, so it wins over the standard library's). */
function plant(folder: string, marker: string): void {
  for (const name of ['json', 'tomllib', 'yaml'])
    fs.writeFileSync(path.join(folder, `${name}.py`), transparentModule(marker));
  fs.mkdirSync(path.join(folder, 'venv'), { mode: 0o755 });
  fs.chmodSync(path.join(folder, 'venv'), 0o755);
  for (const name of ['__init__.py', '__main__.py'])
    fs.writeFileSync(path.join(folder, 'venv', name), `${markerLines(marker)}\n`);
}

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** The real CLI in a child process, in `cwd`, with the secret in its environment. */
function tbtIn(cwd: string, args: string[], env: Record<string, string>, timeoutMs: number): Promise<Run> {
  const childEnv: NodeJS.ProcessEnv = { ...process.env, ...env };
  delete childEnv.TBT_UNSANDBOXED; // the claim is about the sandboxed path
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      ['--import', tsxLoader, tbt, ...args],
      { cwd, env: childEnv, timeout: timeoutMs, killSignal: 'SIGKILL', maxBuffer: 16 << 20, encoding: 'utf8' },
      (err, stdout, stderr) => {
        const code = err ? (typeof err.code === 'number' ? err.code : -1) : 0;
        resolve({ code, stdout, stderr: err && code === -1 ? `${stderr}\n${err.message}` : stderr });
      },
    );
  });
}

const shown = (r: Run) => `exit ${r.code}\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}`;

test(
  'third review, finding 1: the fixture dataset with planted json.py, tomllib.py, yaml.py and venv/__main__.py ' +
    'imports, prepares and validates from its own folder; none of them runs on the host',
  { timeout: 30 * 60_000 },
  async (t) => {
    const work = testTempDir('tbt-third-review-planted-');
    fs.chmodSync(work, 0o755); // dataset code runs as an unprivileged uid: its files must be readable by others
    // The marker lives outside the dataset (never mounted in its sandbox), writable by any uid of the host.
    const markers = testTempDir('tbt-third-review-markers-');
    fs.chmodSync(markers, 0o1777);
    const marker = path.join(markers, 'host-ran');
    const copy = path.join(work, 'fixture');
    fs.cpSync(fixture, copy, { recursive: true });
    const data = path.join(copy, 'dataset');
    const list = path.join(copy, 'releases', 'fixture_v1', 'testlist_fixture_v1.yaml');
    plant(copy, marker);
    plant(data, marker);
    const listed = (fs.readFileSync(list, 'utf8').match(/^- .+$/gm) ?? []).length;
    assert.ok(listed > 0, 'the fixture list names tasks');

    // A venv folder of our own: the copy's server packages are another environment, built here by prepare-env
    // (`python -m venv` really runs), and removed with the test's folders.
    const envs = { TBT_DATASET_ENV_DIR: path.join(work, 'envs') };
    const noHostRun = (step: string) => {
      if (fs.existsSync(marker))
        assert.fail(`${step}: planted dataset code ran on the host:\n${fs.readFileSync(marker, 'utf8')}`);
    };
    const imported = path.join(work, 'imported');
    const secret = { ...envs, DATABASE_URL: SECRET_URL };

    const fromRoot = await tbtIn(
      copy,
      ['tasks', 'import-thinkingbox', '--data', 'dataset', '--list', list, '--out', path.join(work, 'imported-root')],
      secret,
      180_000,
    );
    assert.equal(fromRoot.code, 0, `import from the dataset's root: ${shown(fromRoot)}`);
    assert.match(fromRoot.stdout, new RegExp(`imported ${listed} of ${listed} listed tasks`), shown(fromRoot));
    noHostRun("import-thinkingbox in the dataset's root");

    const imports = await tbtIn(
      data,
      ['tasks', 'import-thinkingbox', '--data', '.', '--list', list, '--out', imported],
      secret,
      180_000,
    );
    assert.equal(imports.code, 0, `import from the dataset folder: ${shown(imports)}`);
    assert.match(imports.stdout, new RegExp(`imported ${listed} of ${listed} listed tasks`), shown(imports));
    noHostRun('import-thinkingbox in the dataset folder');

    const prepared = await tbtIn(data, ['tasks', 'prepare-env', imported], secret, 900_000);
    assert.equal(prepared.code, 0, `prepare-env: ${shown(prepared)}`);
    assert.match(prepared.stdout, /creating the dataset Python environment/, 'a fresh build: python -m venv ran');
    assert.match(prepared.stdout, /dataset environment ready/, shown(prepared));
    noHostRun('prepare-env in the dataset folder');

    // validate connects to the control database, so here the worker's secret is the real URL of the local stack.
    const controlUrl = databaseUrl(readEnvironment());
    const validated = await tbtIn(
      data,
      [
        'tasks',
        'validate',
        imported,
        '--server-start',
        'template',
        '--concurrency',
        '2',
        '--start-timeout-ms',
        '60000',
      ],
      { ...envs, DATABASE_URL: controlUrl },
      900_000,
    );
    noHostRun('validate in the dataset folder');
    assert.equal(validated.code, 0, `validate: ${shown(validated)}`);
    const summary = /^tasks=(\d+) domains=\d+ golden_pass=(\d+) null_fail=\d+ mutation_fail=\d+$/m.exec(
      validated.stdout,
    );
    assert.ok(summary, `validate printed no summary line: ${shown(validated)}`);
    // Tasks without a golden trajectory are said so, with the reason; each other task's golden replay must pass.
    const noGolden = Number(/^no_golden_tasks=(\d+) \(no golden trajectory declared/m.exec(validated.stdout)?.[1] ?? 0);
    assert.equal(Number(summary[1]), listed, `every listed task validated: ${summary[0]}`);
    assert.equal(Number(summary[2]), listed - noGolden, `golden replays (no_golden_tasks=${noGolden}): ${summary[0]}`);
    for (const line of validated.stdout.trim().split('\n')) t.diagnostic(`validate: ${line}`);
    noHostRun('the whole run');
  },
);
