import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import type { StdioServerSpec } from '../config/thinkingbox-schema.ts';
import { IMPORTED_SUITE_FILE } from '../config/thinkingbox-schema.ts';
import { datasetEnvironment, prepareDatasetEnvironment } from '../datasets/thinkingbox/dataset-environment.ts';
import { importThinkingboxDataset } from '../datasets/thinkingbox/dataset-importer.ts';
import { DatasetSandbox } from '../datasets/thinkingbox/dataset-sandbox.ts';
import { serverLaunchSpec } from '../datasets/thinkingbox/server-launch.ts';
import { StdioServerPool } from '../datasets/thinkingbox/stdio-server-pool.ts';
import { testTempDir } from './helpers/temp-dir.ts';

/**
 * Issue 24: a server package is installed into the dataset environment (not put on PYTHONPATH), so a `src/`
 * layout, a console script and dependencies declared only in setup.py work; and THINKINGBOX_DATA names the data
 * root, whose support/ folder the servers read (read-only) inside the sandbox.
 */

const work = testTempDir('tbt-server-packages-');
fs.chmodSync(work, 0o755); // dataset code runs as an unprivileged uid: its files must be readable by others
const root = path.join(work, 'data');
const serversDir = path.join(root, 'servers');
const pkg = path.join(serversDir, 'src_clock');
const suiteDir = path.join(work, 'suite');
const saved = process.env.TBT_DATASET_ENV_DIR;
const sandbox = new DatasetSandbox({ log: () => undefined });
const pool = new StdioServerPool({ warm: 0, sandbox });

const SERVER_PY = `import json
import os

import sortedcontainers
from mcp.server.fastmcp import FastMCP

app = FastMCP("src_clock")


@app.tool()
def where() -> str:
    return json.dumps({
        "module": __file__,
        "sorted": list(sortedcontainers.SortedList([3, 1, 2])),
        "data": os.environ.get("THINKINGBOX_DATA"),
        "beside": open(os.path.join(os.path.dirname(__file__), "initial_data", "zone.json")).read(),
    })


@app.tool()
def read_support(name: str) -> str:
    with open(os.path.expandvars("$THINKINGBOX_DATA/support/" + name), encoding="utf-8") as f:
        return f.read()


@app.tool()
def write_support(name: str) -> str:
    try:
        with open(os.path.expandvars("$THINKINGBOX_DATA/support/" + name), "w", encoding="utf-8") as f:
            f.write("changed")
    except OSError as err:
        return "refused: " + str(err.strerror)
    return "written"


def main() -> None:
    app.run()


if __name__ == "__main__":
    main()
`;

function write(file: string, text: string): void {
  fs.mkdirSync(path.dirname(file), { recursive: true, mode: 0o755 });
  fs.writeFileSync(file, text, { mode: 0o644 });
}

/** A dataset laid out like the public data: dataset/, servers/ (one src-layout package), support/. */
function makeDataset(): void {
  write(path.join(root, 'dataset', 'agent', 'default.yaml'), 'system_instructions: Help.\n');
  fs.mkdirSync(path.join(root, 'dataset', 'scenario'), { recursive: true });
  fs.mkdirSync(path.join(root, 'dataset', 'test_case'), { recursive: true });
  write(path.join(root, 'list.yaml'), '[]\n');
  write(
    path.join(serversDir, 'servers.yaml'),
    'servers:\n  clock:\n    type: mcp-process\n    command: ["{python}", "-m", "src_clock.server"]\n',
  );
  write(
    path.join(pkg, 'pyproject.toml'),
    '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n\n' +
      '[project]\nname = "src_clock"\nversion = "0.1.0"\ndynamic = ["dependencies"]\n\n' +
      '[project.scripts]\ntbt-src-clock = "src_clock.server:main"\n\n' +
      '[tool.setuptools.packages.find]\nwhere = ["src"]\n',
  );
  // Dependencies only setup.py declares: PYTHONPATH never installed them.
  write(
    path.join(pkg, 'setup.py'),
    'from setuptools import setup\n\nsetup(install_requires=["mcp>=1.2,<2", "sortedcontainers"])\n',
  );
  write(path.join(pkg, 'src', 'src_clock', '__init__.py'), '');
  write(path.join(pkg, 'src', 'src_clock', 'server.py'), SERVER_PY);
  // A data file beside the modules, with no MANIFEST.in naming it (the bench servers' initial_data/).
  write(path.join(pkg, 'src', 'src_clock', 'initial_data', 'zone.json'), '"UTC"\n');
  write(path.join(root, 'support', 'notes', 'hello.json'), '{"hello": "support"}\n');
  for (const dir of [root, serversDir, pkg, path.join(root, 'support')]) fs.chmodSync(dir, 0o755);
}

function importSuite() {
  const result = importThinkingboxDataset({
    dataDir: path.join(root, 'dataset'),
    listFile: path.join(root, 'list.yaml'),
  });
  fs.mkdirSync(suiteDir, { recursive: true });
  fs.writeFileSync(path.join(suiteDir, IMPORTED_SUITE_FILE), JSON.stringify(result.suite));
  return result;
}

const spec = (command: string, args: string[]): StdioServerSpec => ({
  transport: 'stdio',
  command,
  args,
  env: {},
  cwd: fs.realpathSync(serversDir),
});

async function call(name: string, server: StdioServerSpec, tool: string, args: Record<string, unknown> = {}) {
  const dataset = datasetEnvironment([fs.realpathSync(pkg)], suiteDir, fs.realpathSync(root));
  const started = await pool.acquire(name, serverLaunchSpec(server, dataset));
  try {
    const result = await started.client.callTool({ name: tool, arguments: args });
    const content = result.content as { type: string; text: string }[];
    return content.map((c) => c.text).join('');
  } catch (err) {
    throw new Error(`${(err as Error).message}; stderr: ${started.stderrTail()}`, { cause: err });
  } finally {
    await started.stop();
  }
}

before(() => {
  process.env.TBT_DATASET_ENV_DIR = path.join(work, 'envs');
  makeDataset();
  const { problems } = importSuite();
  assert.deepEqual(problems, []);
  prepareDatasetEnvironment([fs.realpathSync(pkg)], () => undefined, { sandbox });
});
after(async () => {
  await pool.close();
  if (saved === undefined) delete process.env.TBT_DATASET_ENV_DIR;
  else process.env.TBT_DATASET_ENV_DIR = saved;
});

/** Where the venv's copy of the package keeps the server module. */
const installedModule = () =>
  path.join(datasetEnvironment([fs.realpathSync(pkg)]).venv, 'server-packages', 'src_clock', 'src', 'src_clock');

test('issue 24: a src/-layout server package is installed, with the dependencies its setup.py declares', async () => {
  const seen = JSON.parse(await call('clock', spec('{python}', ['-m', 'src_clock.server']), 'where'));
  assert.equal(seen.module, path.join(installedModule(), 'server.py'), 'imported from the venv, not the dataset');
  assert.deepEqual(seen.sorted, [1, 2, 3]);
  assert.equal(seen.beside, '"UTC"\n', 'a data file beside the modules is there too');
});

test("issue 24: a server package's console script starts the server", async () => {
  const seen = JSON.parse(await call('clock-script', spec('tbt-src-clock', []), 'where'));
  assert.equal(seen.module, path.join(installedModule(), 'server.py'));
});

test('issue 24: THINKINGBOX_DATA is the data root, recorded at import; support/ is visible read-only', async () => {
  const imported = JSON.parse(fs.readFileSync(path.join(suiteDir, IMPORTED_SUITE_FILE), 'utf8'));
  assert.equal(imported.data_root, fs.realpathSync(root));
  const server = spec('{python}', ['-m', 'src_clock.server']);
  assert.equal(JSON.parse(await call('clock', server, 'where')).data, fs.realpathSync(root));
  assert.deepEqual(JSON.parse(await call('clock', server, 'read_support', { name: 'notes/hello.json' })), {
    hello: 'support',
  });
  assert.match(await call('clock', server, 'write_support', { name: 'notes/hello.json' }), /^refused: Read-only/);
  assert.equal(fs.readFileSync(path.join(root, 'support', 'notes', 'hello.json'), 'utf8'), '{"hello": "support"}\n');
});

test('issue 24: a support/ link leading out of the data root is an import problem and is never mounted', () => {
  const outside = path.join(work, 'outside');
  write(path.join(outside, 'secret.txt'), 'host secret\n');
  const link = path.join(root, 'support', 'escape');
  fs.symlinkSync(outside, link);
  try {
    const { problems, suite } = importSuite();
    assert.ok(
      problems.some((p) => p.file === link && /outside/.test(p.message)),
      JSON.stringify(problems),
    );
    assert.equal(suite.data_root, undefined, 'a data root whose support/ leads out is not recorded');
  } finally {
    fs.rmSync(link);
    importSuite();
  }
});

test('issue 24: an edited server package file changes the environment key (prepare-env rebuilds it)', () => {
  const packages = [fs.realpathSync(pkg)];
  const before = datasetEnvironment(packages, suiteDir).venv;
  const server = path.join(pkg, 'src', 'src_clock', 'server.py');
  const text = fs.readFileSync(server, 'utf8');
  fs.writeFileSync(server, `${text}\n# edited\n`);
  try {
    assert.throws(() => datasetEnvironment(packages, path.join(work, 'other-suite')), /prepare-env/);
  } finally {
    fs.writeFileSync(server, text);
  }
  assert.equal(datasetEnvironment(packages, path.join(work, 'third-suite')).venv, before);
});
