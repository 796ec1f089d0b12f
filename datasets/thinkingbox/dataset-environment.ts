import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { readEnvironment, repoRoot } from '../../config/environment.ts';
import { BadInputError, InfrastructureError } from '../../core/errors.ts';

/**
 * The Python environment a ThinkingBox-format dataset's code runs in (its tool servers and its test files):
 * one cached venv per dataset, keyed by the dependencies its server packages declare in their own
 * pyproject.toml and by the constraints file we keep (thinkingbox/dataset-env/constraints.txt: the declared
 * dependencies float, and the bench servers break with fastmcp 4.x). The packages themselves are not
 * installed: their folders go on PYTHONPATH (installing would build inside the dataset folder, which we
 * read in place and never write). Our `thinkingbox.common` (thinkingbox/shim) goes on PYTHONPATH of test code.
 */

export const CONSTRAINTS_FILE = path.join(repoRoot, 'thinkingbox', 'dataset-env', 'constraints.txt');
export const SHIM_DIR = path.join(repoRoot, 'thinkingbox', 'shim');

export interface DatasetEnvironment {
  /** The venv's interpreter: what "{python}" in servers.yaml means. */
  python: string;
  /** Server package folders (on PYTHONPATH of the servers). */
  packages: string[];
  venv: string;
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
  const run = spawnSync('python3', ['-c', script], { input: JSON.stringify(packages), encoding: 'utf8' });
  if (run.status !== 0) throw new BadInputError(`cannot read server packages: ${(run.stderr || '').trim()}`);
  return JSON.parse(run.stdout) as string[];
}

function environmentKey(dependencies: string[]): string {
  const python = spawnSync('python3', ['-c', 'import sys;print(sys.version.split()[0])'], { encoding: 'utf8' });
  return createHash('sha256')
    .update(JSON.stringify({ dependencies, constraints: fs.readFileSync(CONSTRAINTS_FILE, 'utf8') }))
    .update(python.stdout.trim())
    .digest('hex')
    .slice(0, 16);
}

function venvFor(packages: string[]): { venv: string; dependencies: string[] } {
  const dependencies = declaredDependencies(packages);
  return { venv: path.join(cacheRoot(), `env-${environmentKey(dependencies)}`), dependencies };
}

const ready = (venv: string) => fs.existsSync(path.join(venv, '.tbt-ready'));
const known = new Map<string, DatasetEnvironment>();

/** The dataset's environment if it has been built, else a clear error naming the command that builds it. */
export function datasetEnvironment(packages: string[], suiteDir?: string): DatasetEnvironment {
  const cacheKey = JSON.stringify(packages);
  const cached = known.get(cacheKey);
  if (cached) return cached;
  const { venv } = venvFor(packages);
  if (!ready(venv))
    throw new BadInputError(
      `the Python environment of this dataset is not built (${venv}); run: tbt tasks prepare-env ` +
        `${suiteDir ?? 'SUITE_DIR'}`,
    );
  const env = { python: path.join(venv, 'bin', 'python'), packages, venv };
  known.set(cacheKey, env);
  return env;
}

/** Builds (once) the venv: `pip install -c constraints.txt <declared dependencies>`. */
export function prepareDatasetEnvironment(packages: string[], log: (line: string) => void): DatasetEnvironment {
  const { venv, dependencies } = venvFor(packages);
  if (!ready(venv)) {
    log(`creating the dataset Python environment at ${venv}: ${dependencies.join(' ') || '(no dependencies)'}`);
    fs.rmSync(venv, { recursive: true, force: true });
    fs.mkdirSync(path.dirname(venv), { recursive: true });
    const steps: [string, string[]][] = [
      ['python3', ['-m', 'venv', venv]],
      ...(dependencies.length
        ? ([[path.join(venv, 'bin', 'pip'), ['install', '-q', '-c', CONSTRAINTS_FILE, ...dependencies]]] as [
            string,
            string[],
          ][])
        : []),
    ];
    for (const [command, args] of steps) {
      const run = spawnSync(command, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
      if (run.status !== 0)
        throw new InfrastructureError(
          `${path.basename(command)} ${args.slice(0, 2).join(' ')} failed: ` +
            `${(run.stderr || run.stdout || '').trim().slice(-1500)}`,
        );
    }
    fs.writeFileSync(path.join(venv, '.tbt-ready'), `${dependencies.join('\n')}\n`);
  }
  return datasetEnvironment(packages);
}
