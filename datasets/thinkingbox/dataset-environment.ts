import { spawnSync } from 'node:child_process';
import { hostPythonSync } from './host-python.ts';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { readEnvironment, repoRoot } from '../../config/environment.ts';
import { BadInputError, InfrastructureError } from '../../core/errors.ts';
import { isInside, unchangedPath } from './dataset-paths.ts';
import { DatasetSandbox, helperPackageDir, hostProgram, pythonRoots } from './dataset-sandbox.ts';
import { hostPort, operatorPrivateHosts, startIndexProxy } from './index-proxy.ts';
import { readPipIndexConfig } from './pip-index-config.ts';
import { readDeclaredRequirements, type DeclaredRequirement } from './requirement-specs.ts';

/**
 * The Python environment a ThinkingBox-format dataset's code runs in (its tool servers and its test files):
 * one cached venv per dataset, keyed by the dependencies its server packages declare in their own
 * pyproject.toml, by the packages' files, and by the constraints file we keep
 * (thinkingbox/dataset-env/constraints.txt: the declared dependencies float, and the bench servers break with
 * fastmcp 4.x). The server packages are installed into it (so a `src/` layout, console scripts and setup.py
 * dependencies work) from copies kept inside the venv: pip builds in the source folder, and the dataset is read
 * in place and never written. Our `thinkingbox.common` (thinkingbox/shim) goes on
 * PYTHONPATH of test code.
 */

export const CONSTRAINTS_FILE = path.join(repoRoot, 'thinkingbox', 'dataset-env', 'constraints.txt');
export const SHIM_DIR = path.join(repoRoot, 'thinkingbox', 'shim');

export interface DatasetEnvironment {
  /** The venv's interpreter: what "{python}" in servers.yaml means. */
  python: string;
  /** Server package folders of the dataset (installed into the venv from copies of them). */
  packages: string[];
  venv: string;
  /** The data root the import recorded (THINKINGBOX_DATA; its support/ is what the servers read), if any. */
  dataRoot?: string;
}

function cacheRoot(): string {
  return (
    readEnvironment().TBT_DATASET_ENV_DIR ??
    path.join(process.env.XDG_CACHE_HOME ?? path.join(os.homedir(), '.cache'), 'thinkingbox-temporal', 'datasets')
  );
}

/** `[project].dependencies` of each package's pyproject.toml, read by Python's own TOML parser. */
export function declaredDependencies(packages: string[]): string[] {
  if (packages.length === 0) return [];
  const script =
    'import json,sys,tomllib\n' +
    'out=[]\n' +
    'for p in json.load(sys.stdin):\n' +
    '    with open(p+"/pyproject.toml","rb") as f: d=tomllib.load(f)\n' +
    '    deps=d.get("project",{}).get("dependencies",[])\n' +
    '    if not isinstance(deps,list) or not all(isinstance(x,str) for x in deps):\n' +
    '        sys.exit(p+"/pyproject.toml: project.dependencies must be a list of strings")\n' +
    '    out+=deps\n' +
    'print(json.dumps(sorted(set(out))))\n';
  const run = hostPythonSync(['-c', script], { input: JSON.stringify(packages), timeoutMs: 60_000 });
  if (run.status !== 0) throw new BadInputError(`cannot read server packages: ${(run.stderr || '').trim()}`);
  return JSON.parse(run.stdout) as string[];
}

/** One entry of a server package as it is copied and hashed: a folder, a file, or a link kept inside it. */
type PackageEntry =
  { rel: string; kind: 'dir' } | { rel: string; kind: 'file' } | { rel: string; kind: 'link'; target: string };

/** What a build leaves in a source folder (and a dataset author's own builds): neither copied nor hashed. */
function isBuildOutput(rel: string, name: string): boolean {
  if (name === '__pycache__' || name === '.git' || name.endsWith('.pyc') || name.endsWith('.egg-info')) return true;
  return rel === name && (name === 'build' || name === 'dist');
}

/**
 * The entries of a server package folder, sorted; symbolic links are kept as links relative to the package (one
 * leading out of it is refused: the copy would show its target to the install and the servers). The folder
 * itself must still be the path the import checked.
 */
function packageEntries(pkg: string): PackageEntry[] {
  const root = unchangedPath(pkg, 'server package');
  const entries: PackageEntry[] = [];
  const visit = (dir: string) => {
    for (const name of fs.readdirSync(dir).sort()) {
      const full = path.join(dir, name);
      const rel = path.relative(root, full);
      if (isBuildOutput(rel, name)) continue;
      const stat = fs.lstatSync(full);
      if (stat.isSymbolicLink()) {
        const target = fs.existsSync(full) ? fs.realpathSync(full) : undefined;
        if (!target || !isInside(target, root))
          throw new BadInputError(`server package ${root}: ${rel} is a link that leads out of the package`);
        entries.push({ rel, kind: 'link', target: path.relative(root, target) });
      } else if (stat.isDirectory()) {
        entries.push({ rel, kind: 'dir' });
        visit(full);
      } else if (stat.isFile()) entries.push({ rel, kind: 'file' });
    }
  };
  visit(root);
  return entries;
}

/** A digest of the packages' files (names, contents, links): an edited server package is another environment. */
function packagesDigest(packages: string[]): string {
  const hash = createHash('sha256');
  for (const pkg of packages) {
    hash.update(`package\0${pkg}\0`);
    for (const e of packageEntries(pkg)) {
      hash.update(`${e.kind}\0${e.rel}\0`);
      if (e.kind === 'link') hash.update(`${e.target}\0`);
      if (e.kind === 'file') hash.update(fs.readFileSync(path.join(pkg, e.rel)));
    }
  }
  return hash.digest('hex');
}

/** Copies each package into `dest` (one folder per package, named after it); returns the copies. */
function copyPackages(packages: string[], dest: string): string[] {
  const names = packages.map((p) => path.basename(p));
  const twice = names.find((n, i) => names.indexOf(n) !== i);
  if (twice) throw new BadInputError(`two server packages are named ${twice}: ${packages.join(', ')}`);
  return packages.map((pkg, i) => {
    const copy = path.join(dest, names[i]!);
    fs.mkdirSync(copy, { recursive: true });
    for (const e of packageEntries(pkg)) {
      const to = path.join(copy, e.rel);
      if (e.kind === 'dir') fs.mkdirSync(to);
      else if (e.kind === 'file') fs.copyFileSync(path.join(pkg, e.rel), to);
      else fs.symlinkSync(path.relative(path.dirname(to), path.join(copy, e.target)), to);
    }
    return copy;
  });
}

function environmentKey(dependencies: string[], packages: string[]): string {
  const python = hostPythonSync(['-c', 'import sys;print(sys.version.split()[0])'], { timeoutMs: 60_000 });
  return createHash('sha256')
    .update(JSON.stringify({ dependencies, constraints: fs.readFileSync(CONSTRAINTS_FILE, 'utf8') }))
    .update(packagesDigest(packages))
    .update(python.stdout.trim())
    .digest('hex')
    .slice(0, 16);
}

function venvFor(packages: string[]): { venv: string; dependencies: string[] } {
  const dependencies = declaredDependencies(packages);
  return { venv: path.join(cacheRoot(), `env-${environmentKey(dependencies, packages)}`), dependencies };
}

const ready = (venv: string) => fs.existsSync(path.join(venv, '.tbt-ready'));
const known = new Map<string, DatasetEnvironment>();

/**
 * The dataset's environment if it has been built, else a clear error naming the command that builds it
 * (`suiteDir` names the suite in it). `dataRoot` is the suite's recorded data root (THINKINGBOX_DATA).
 */
export function datasetEnvironment(packages: string[], suiteDir?: string, dataRoot?: string): DatasetEnvironment {
  const cacheKey = JSON.stringify([packages, suiteDir, dataRoot]);
  const cached = known.get(cacheKey);
  if (cached) return cached;
  const { venv } = venvFor(packages);
  if (!ready(venv))
    throw new BadInputError(
      `the Python environment of this dataset is not built (${venv}); run: tbt tasks prepare-env ` +
        `${suiteDir ?? 'SUITE_DIR'}`,
    );
  const env = { python: path.join(venv, 'bin', 'python'), packages, venv, ...(dataRoot ? { dataRoot } : {}) };
  known.set(cacheKey, env);
  return env;
}

export interface PrepareOptions {
  /** `name @ https://...` requirements allowed (`--allow-urls`). */
  allowUrls?: boolean;
  /** Projects that may be built from an sdist, inside the sandbox (`--allow-sdist NAME`); `:all:` for any. */
  allowSdist?: string[];
  /** The sandbox to install in (default: one made here, `--unsandboxed` honoured). */
  sandbox?: DatasetSandbox;
}

const VENV_TIMEOUT_MS = 120_000;
const INSTALL_TIMEOUT_MS = 30 * 60_000;
/** Inside the sandbox, the loopback port the relay gives the index proxy. */
const PROXY_PORT = 3128;
/** A larger budget than a test run's: an install unpacks many files and builds what --allow-sdist allows. */
const INSTALL_LIMITS = { cpuSeconds: 1800, fileSizeMb: 1024, scratchMb: 2048, totalMemoryMb: 6144 };

/** The names that make `python` resolve to another interpreter or base: checked unchanged after the install. */
function interpreterSnapshot(venv: string): string {
  const bin = path.join(venv, 'bin');
  const links = fs
    .readdirSync(bin)
    .filter((n) => n.startsWith('python'))
    .map((n) => {
      const stat = fs.lstatSync(path.join(bin, n));
      return `${n}:${stat.isSymbolicLink() ? fs.readlinkSync(path.join(bin, n)) : `${stat.ino}:${stat.size}`}`;
    });
  return JSON.stringify([fs.readFileSync(path.join(venv, 'pyvenv.cfg'), 'utf8'), links.sort()]);
}

/**
 * Gives the tree to `uid` (before the sandbox writes it) or back to us with fixed modes (after): never following
 * a symbolic link, dropping set-id bits and group/other write, leaving it readable by others (the code of later
 * sandboxes runs as other uids).
 */
function setOwner(root: string, uid: number, gid: number, settle: boolean): void {
  const visit = (p: string) => {
    const stat = fs.lstatSync(p);
    fs.lchownSync(p, uid, gid);
    if (stat.isSymbolicLink()) return;
    if (settle) fs.chmodSync(p, stat.isDirectory() ? 0o755 : (stat.mode & 0o755) | 0o644);
    if (stat.isDirectory()) for (const name of fs.readdirSync(p)) visit(path.join(p, name));
  };
  visit(root);
}

/** Why pip failed, with the hint a missing wheel needs. */
export function installFailure(output: string, refusals: string[]): InfrastructureError {
  const missing = [...output.matchAll(/No matching distribution found for (\S+)/g)].map((m) => m[1]);
  // A dependency pinned to releases that are sdists only reads as a conflict, not as a missing distribution.
  const conflict = !missing.length && /ResolutionImpossible/.test(output);
  const hint = missing.length
    ? `\n${missing.join(', ')}: no wheel fits this Python and platform (only wheels are installed by default). ` +
      'If it has only an sdist, its build code must run: pass --allow-sdist NAME to build it inside the sandbox.'
    : conflict
      ? '\nIf a dependency the conflict names has only sdists for the versions allowed (the public bench: sly, ' +
        'for odata-query), pass --allow-sdist NAME to build it inside the sandbox.'
      : '';
  const refused = refusals.length ? `\nthe index proxy refused: ${refusals.slice(0, 5).join('; ')}` : '';
  // pip's note on every index folder lacking a package drowns the error itself.
  const kept = output
    .split('\n')
    .filter((line) => !/^WARNING: Location '.*' is ignored/.test(line))
    .join('\n');
  return new InfrastructureError(`pip install (in the sandbox) failed: ${kept.trim().slice(-1500)}${hint}${refused}`);
}

/** Where the venv keeps the copies of the server packages it has installed (editable: they stay in use). */
const PACKAGE_COPIES = 'server-packages';

/**
 * `pip install` of the validated requirements and of the server packages into `venv`, inside the dataset sandbox:
 * the venv is its one writable host folder, the operator's pip settings (no secrets) its configuration, and an
 * HTTP proxy that reaches only the index hosts its one way out. Wheels only, unless `allowSdist` names the
 * projects whose build may run; a server package is the dataset's own code and is built in any case.
 *
 * The packages are installed editable from copies inside the venv, in setuptools' `compat` mode (a .pth line
 * naming the package's folder): a plain install leaves out the data files a package reads beside its modules
 * when it has no MANIFEST.in (the bench servers' initial_data/), and setuptools' default editable finder is
 * consulted only after a same-named folder in the server's working directory, which the bench's layout has.
 */
function installInSandbox(
  venv: string,
  requirements: DeclaredRequirement[],
  packages: string[],
  options: PrepareOptions,
  log: (line: string) => void,
): void {
  const python = path.join(venv, 'bin', 'python');
  const index = readPipIndexConfig(python);
  const sandbox =
    options.sandbox ??
    new DatasetSandbox({ unsandboxed: readEnvironment().TBT_UNSANDBOXED === '1', log, limits: INSTALL_LIMITS });
  const allowSdist = options.allowSdist ?? [];
  const formats = allowSdist.includes(':all:')
    ? ['--prefer-binary']
    : ['--only-binary', ':all:', ...(allowSdist.length ? ['--no-binary', allowSdist.join(',')] : [])];
  const copies = copyPackages(packages, path.join(venv, PACKAGE_COPIES));
  const editable = copies.length
    ? ['--config-settings', 'editable_mode=compat', ...copies.flatMap((c) => ['--editable', c])]
    : [];
  const pipArgs = [
    ...['-I', '-m', 'pip', 'install', '--no-input', '--disable-pip-version-check', '--no-cache-dir'],
    ...['--progress-bar', 'off', '-c', CONSTRAINTS_FILE, ...formats, ...editable, '--'],
    ...requirements.map((r) => r.requirement),
  ];
  const work = fs.mkdtempSync(path.join(path.dirname(venv), '.prepare-'));
  fs.chmodSync(work, 0o755);
  // Unsandboxed (the operator's --unsandboxed), pip shares the host's network anyway: no proxy to go through.
  const hosts = [...index.hosts, ...requirements.flatMap((r) => (r.url ? [hostPort(new URL(r.url))] : []))];
  // Every allowed host is reached at public addresses only, but for the operator's own: their index settings'
  // hosts and TBT_INSTALL_PROXY_PRIVATE_HOSTS (a dataset URL at 127.0.0.1 would reach the worker's services).
  const privateHosts = [...index.hosts, ...operatorPrivateHosts()];
  const proxy =
    sandbox.mode === 'bubblewrap' ? startIndexProxy(path.join(work, 'proxy'), hosts, { privateHosts }) : undefined;
  const relay = path.join(helperPackageDir, 'tbt_thinkingbox', 'loopback_forward.py');
  const proxyUrl = `http://127.0.0.1:${PROXY_PORT}`;
  const before = interpreterSnapshot(venv);
  // With the proxy, our loopback relay runs first: it listens on PROXY_PORT inside, then execs pip.
  const throughRelay = proxy ? ['-I', relay, `${PROXY_PORT}=${proxy.socket}`, '--', python, ...pipArgs] : [];
  const run = sandbox.prepare({
    ...(proxy ? { command: hostProgram('python3'), args: throughRelay } : { command: python, args: pipArgs }),
    env: {
      ...index.env,
      PIP_CONFIG_FILE: '/dev/null', // no config file of the sandbox's view; the settings above are all
      ...(proxy ? { HTTPS_PROXY: proxyUrl, HTTP_PROXY: proxyUrl, https_proxy: proxyUrl, http_proxy: proxyUrl } : {}),
    },
    readOnly: [
      CONSTRAINTS_FILE,
      ...index.readOnly,
      ...pythonRoots(python).filter((r) => r !== venv),
      ...(proxy ? [relay, path.dirname(proxy.socket)] : []),
    ],
    writable: [venv],
    label: 'prepare-env',
  });
  const ours = { uid: process.getuid?.() ?? 0, gid: process.getgid?.() ?? 0 };
  const sandboxUid = fs.statSync(run.scratch).uid;
  let failure: Error | undefined;
  try {
    if (sandboxUid !== ours.uid) setOwner(venv, sandboxUid, sandboxUid, false);
    log(
      `pip install in the sandbox (${run.mode}): ` +
        [...requirements.map((r) => r.requirement), ...packages.map((p) => path.basename(p))].join(' '),
    );
    const result = spawnSync(run.command, run.args, {
      env: run.env,
      cwd: run.cwd,
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
      timeout: INSTALL_TIMEOUT_MS,
      killSignal: 'SIGKILL',
      maxBuffer: 64 * 1024 * 1024,
    });
    if (result.error) failure = new InfrastructureError(`pip install (in the sandbox): ${result.error.message}`);
    else if (result.status !== 0)
      failure = installFailure(`${result.stdout ?? ''}\n${result.stderr ?? ''}`, proxy?.refusals() ?? []);
  } finally {
    run.dispose();
    proxy?.stop();
    fs.rmSync(work, { recursive: true, force: true });
    setOwner(venv, ours.uid, ours.gid, true);
  }
  // The venv's interpreter links and pyvenv.cfg decide what later sandboxes bind: the install may not move them.
  if (!failure && interpreterSnapshot(venv) !== before)
    failure = new InfrastructureError(`the install changed ${venv}'s interpreter or pyvenv.cfg; refused`);
  if (failure) {
    fs.rmSync(venv, { recursive: true, force: true });
    throw failure;
  }
}

/** How long a build waits for another one of the same venv (which may be installing for up to its own limit). */
const LOCK_WAIT_S = INSTALL_TIMEOUT_MS / 1000 + 600;

/**
 * Runs `build` holding an exclusive lock on `<venv>.lock`, so that two builds of one venv (two prepare-env runs,
 * two workers) never write it at once: the second waits, then finds it ready. The lock is flock(2) on a
 * descriptor of ours, taken by flock(1) (Node has no flock): it belongs to the open file, not to the helper, and
 * goes away with our process, so a builder that dies leaves no stale lock.
 */
function holdingBuildLock<T>(venv: string, log: (line: string) => void, build: () => T): T {
  const lockFile = `${venv}.lock`;
  fs.mkdirSync(path.dirname(venv), { recursive: true });
  const fd = fs.openSync(lockFile, 'a', 0o644);
  try {
    const take = (wait: string[]) =>
      spawnSync(hostProgram('flock'), ['--exclusive', ...wait, '3'], {
        stdio: ['ignore', 'ignore', 'pipe', fd],
        encoding: 'utf8',
        timeout: (LOCK_WAIT_S + 60) * 1000,
        killSignal: 'SIGKILL',
      });
    let taken = take(['--nonblock']);
    if (taken.status === 1) {
      log(`waiting for another build of ${venv} to finish (${lockFile})`);
      taken = take(['--wait', String(LOCK_WAIT_S)]);
    }
    if (taken.status !== 0)
      throw new InfrastructureError(
        `cannot lock ${lockFile} (another build of this environment still runs?): ` +
          `${(taken.stderr || taken.error?.message || `flock exited ${taken.status}`).trim()}`,
      );
    return build();
  } finally {
    fs.closeSync(fd); // releases the lock
  }
}

/**
 * Builds (once) the venv: `python3 -m venv` on the host (our interpreter only), then the dataset's declared
 * requirements, validated as PEP 508 (requirement-specs.ts), and its server packages, installed inside the
 * sandbox (installInSandbox). No dataset-controlled code runs on the host. One build at a time per venv.
 */
export function prepareDatasetEnvironment(
  packages: string[],
  log: (line: string) => void,
  options: PrepareOptions = {},
): DatasetEnvironment {
  const allowSdist = options.allowSdist ?? [];
  const requirements = readDeclaredRequirements(packages, {
    allowUrls: options.allowUrls ?? false,
    allowSourceUrls: allowSdist.length > 0,
  });
  const { venv } = venvFor(packages);
  if (!ready(venv))
    holdingBuildLock(venv, log, () => {
      if (!ready(venv)) buildEnvironment(venv, requirements, packages, options, log);
    });
  return datasetEnvironment(packages);
}

/** `python3 -m venv`, the install, and the marker that says the venv is complete. */
function buildEnvironment(
  venv: string,
  requirements: DeclaredRequirement[],
  packages: string[],
  options: PrepareOptions,
  log: (line: string) => void,
): void {
  log(
    `creating the dataset Python environment at ${venv}: ` +
      `${requirements.map((r) => r.requirement).join(' ') || '(no dependencies)'}` +
      `${packages.length ? `; server packages ${packages.map((p) => path.basename(p)).join(', ')}` : ''}`,
  );
  fs.rmSync(venv, { recursive: true, force: true });
  fs.mkdirSync(path.dirname(venv), { recursive: true });
  const made = hostPythonSync(['-m', 'venv', path.resolve(venv)], {
    stdio: ['ignore', 'pipe', 'pipe'],
    timeoutMs: VENV_TIMEOUT_MS,
  });
  if (made.status !== 0)
    throw new InfrastructureError(`python3 -m venv failed: ${(made.stderr || made.error?.message || '').trim()}`);
  if (requirements.length || packages.length) installInSandbox(venv, requirements, packages, options, log);
  // Written by us, never through a name the install could have planted (a link would write elsewhere).
  const marker = path.join(venv, '.tbt-ready');
  fs.rmSync(marker, { force: true });
  const installed = [...requirements.map((r) => r.requirement), ...packages];
  fs.writeFileSync(marker, `${installed.join('\n')}\n`, { flag: 'wx' });
}
