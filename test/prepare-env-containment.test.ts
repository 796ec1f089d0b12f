import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { prepareEnv } from '../cli/commands/tasks.ts';
import { repoRoot } from '../config/environment.ts';
import { IMPORTED_SUITE_FILE } from '../config/thinkingbox-schema.ts';
import { testTempDir } from './helpers/temp-dir.ts';

/**
 * Second review, finding 3: `tbt tasks prepare-env` ran `pip install` of the dataset's declared requirements on
 * the host with the operator's environment. A requirement starting with `-` was a pip option; an sdist's build
 * code ran on the host. Here a hostile dataset declares both, with the operator's secrets in the environment and
 * a local --find-links folder (PIP_FIND_LINKS, as an operator's pip configuration would name it) holding an sdist
 * whose setup.py writes a marker on the host and records what it saw.
 */

const work = testTempDir('tbt-prepare-env-');
fs.chmodSync(work, 0o755); // the install runs as an unprivileged uid of its own: what it reads must be readable
const links = path.join(work, 'links');
const hostMarker = path.join(work, 'host-marker'); // a host path the sandbox does not show
const SECRET = 'finding3-operator-secret-5f1c';
const saved: Record<string, string | undefined> = {};
let listener: net.Server;
let listenerConnections = 0;

function setEnv(name: string, value: string): void {
  if (!(name in saved)) saved[name] = process.env[name];
  process.env[name] = value;
}

/** A tiny sdist, packed as a plain tar: no build step of ours runs its setup.py. */
function packProbeSdist(port: number): void {
  const source = path.join(work, 'sdist-src', 'tbt-probe-sdist-0.1');
  fs.mkdirSync(source, { recursive: true });
  const setupPy = fs
    .readFileSync(path.join(repoRoot, 'test', 'fixtures', 'prepare-env', 'probe-sdist', 'setup.py'), 'utf8')
    .replace('@HOST_MARKER@', hostMarker)
    .replace('@LISTENER_PORT@', String(port));
  fs.writeFileSync(path.join(source, 'setup.py'), setupPy);
  fs.writeFileSync(path.join(source, 'PKG-INFO'), 'Metadata-Version: 1.0\nName: tbt-probe-sdist\nVersion: 0.1\n');
  fs.mkdirSync(links, { recursive: true, mode: 0o755 });
  const sdist = path.join(links, 'tbt-probe-sdist-0.1.tar.gz');
  const tar = spawnSync('tar', ['-czf', sdist, '-C', path.dirname(source), 'tbt-probe-sdist-0.1']);
  assert.equal(tar.status, 0, String(tar.stderr));
  fs.chmodSync(sdist, 0o644);
}

/** An imported suite whose one server package declares `dependencies`. */
function hostileSuite(name: string, dependencies: string[]): { suite: string; pyproject: string } {
  const dir = path.join(work, name);
  const pkg = path.join(dir, 'servers', 'probe_servers');
  fs.mkdirSync(pkg, { recursive: true });
  const pyproject = path.join(pkg, 'pyproject.toml');
  fs.writeFileSync(
    pyproject,
    '[project]\nname = "probe_servers"\nversion = "0.1"\ndependencies = [\n' +
      dependencies.map((d) => `  ${JSON.stringify(d)},\n`).join('') +
      ']\n',
  );
  const suite = path.join(dir, 'suite');
  fs.mkdirSync(suite);
  const imported = {
    format: 'thinkingbox-import/2',
    name,
    dataset_dir: dir,
    server_packages: [pkg],
    servers: {},
    scenarios: {},
    tasks: [],
  };
  fs.writeFileSync(path.join(suite, IMPORTED_SUITE_FILE), JSON.stringify(imported));
  return { suite, pyproject };
}

async function runPrepareEnv(args: string[]): Promise<{ code: number | string; out: string }> {
  const lines: string[] = [];
  const io = { out: (s: string) => lines.push(s), err: (s: string) => lines.push(s) };
  try {
    const code = await prepareEnv(args, io);
    return { code, out: lines.join('\n') };
  } catch (err) {
    return { code: `threw ${(err as Error).name}`, out: [...lines, (err as Error).message].join('\n') };
  }
}

const sitePackages = (venv: string) =>
  fs
    .readdirSync(path.join(venv, 'lib'))
    .map((v) => path.join(venv, 'lib', v, 'site-packages'))
    .find((p) => fs.existsSync(p))!;

before(async () => {
  listener = net.createServer((s) => {
    listenerConnections += 1;
    s.destroy();
  });
  await new Promise<void>((resolve) => listener.listen(0, '127.0.0.1', resolve));
  packProbeSdist((listener.address() as net.AddressInfo).port);
  setEnv('TBT_DATASET_ENV_DIR', path.join(work, 'envs'));
  setEnv('PIP_FIND_LINKS', links);
  setEnv('TBT_FINDING3_SECRET', SECRET);
  setEnv('OPENAI_API_KEY', SECRET);
});
after(() => {
  listener.close();
  for (const [name, value] of Object.entries(saved))
    if (value === undefined) delete process.env[name];
    else process.env[name] = value;
});

test('second review, finding 3: a requirement starting with -- is refused, naming the file and line', async () => {
  const pipLog = path.join(work, 'pip-option.log');
  const { suite, pyproject } = hostileSuite('dash', [`--log=${pipLog}`]);
  const run = await runPrepareEnv([suite]);
  assert.equal(fs.existsSync(pipLog), false, 'pip read the requirement as its --log option');
  assert.notEqual(run.code, 0, run.out);
  assert.ok(run.out.includes(`${pyproject}:5: `), run.out);
  assert.match(run.out, /--log.*not a PEP 508 requirement/);
});

test('second review, finding 3: an sdist is refused by default and its setup.py never runs on the host', async () => {
  fs.rmSync(hostMarker, { force: true });
  const { suite } = hostileSuite('sdist-default', ['tbt-probe-sdist']);
  const run = await runPrepareEnv([suite]);
  assert.equal(fs.existsSync(hostMarker), false, "the sdist's setup.py ran on the host");
  assert.notEqual(run.code, 0, run.out);
  assert.match(run.out, /tbt-probe-sdist/);
  assert.match(run.out, /--allow-sdist/);
});

test('second review, finding 3: with --allow-sdist the build runs sandboxed, without operator secrets', async () => {
  fs.rmSync(hostMarker, { force: true });
  const { suite } = hostileSuite('sdist-allowed', ['tbt-probe-sdist']);
  const run = await runPrepareEnv(['--allow-sdist', 'tbt-probe-sdist', suite]);
  assert.equal(fs.existsSync(hostMarker), false, "the sdist's setup.py ran on the host");
  assert.equal(run.code, 0, run.out);
  const venv = /dataset environment ready: (\S+)/.exec(run.out)![1]!;
  const seen = JSON.parse(fs.readFileSync(path.join(sitePackages(venv), 'tbt_probe_sdist', 'seen.json'), 'utf8'));
  assert.match(seen.marker, /^refused/, 'the build wrote where the host marker lies');
  const environ = JSON.stringify(seen.environ);
  assert.equal(environ.includes(SECRET), false, `the build saw an operator secret: ${environ}`);
  assert.equal('DATABASE_URL' in seen.environ || 'TBT_FINDING3_SECRET' in seen.environ, false, environ);
  assert.match(seen.listener, /^refused/, 'the build reached a host listener');
  assert.equal(listenerConnections, 0);
  assert.match(seen.other_host, /^refused/, 'the build reached a host that is not a package index');
});
