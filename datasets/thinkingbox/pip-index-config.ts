import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { BadInputError, InfrastructureError } from '../../core/errors.ts';
import { hostPort } from './index-proxy.ts';

/**
 * Where pip finds packages, as the operator configured it on this host (pip.conf files, PIP_* variables), carried
 * into the sandbox that installs a dataset's requirements: the sandbox sees none of the host's config files or
 * variables, so pip there is given exactly these settings as PIP_* variables, their local folders (file: indexes,
 * --find-links folders, constraint files) as read-only binds, and their remote hosts as the index proxy's only
 * destinations. Index URLs carrying credentials are refused: the code that runs inside could read them.
 */

export interface PipIndexConfig {
  /** PIP_* variables for pip inside the sandbox. */
  env: Record<string, string>;
  /** Local folders and files the settings name. */
  readOnly: string[];
  /** `host:port` of every remote index and find-links location. */
  hosts: string[];
}

/** The settings carried over; anything else (a proxy, user options) stays on the host. */
const CARRIED = [
  'index-url',
  'extra-index-url',
  'find-links',
  'constraint',
  'cert',
  'no-index',
  'default-timeout',
  'retries',
];
const FILES = new Set(['constraint', 'cert']);
const LOCATIONS = new Set(['index-url', 'extra-index-url', 'find-links']);
/** pip's own default index; its files are served from a second host. */
const PYPI = 'https://pypi.org/simple';
const PYPI_FILES = 'files.pythonhosted.org:443';

/** Operator variables the host's `pip config list` may read (its config files are found through HOME/XDG). */
export function pipConfigEnvironment(env: NodeJS.ProcessEnv = process.env): Record<string, string> {
  const kept: Record<string, string> = { PATH: '/usr/local/bin:/usr/bin:/bin', LANG: 'C.UTF-8' };
  for (const [name, value] of Object.entries(env))
    if (value !== undefined && /^(PIP_[A-Z0-9_]+|HOME|XDG_CONFIG_HOME|XDG_CONFIG_DIRS|VIRTUAL_ENV)$/.test(name))
      kept[name] = value;
  return kept;
}

/** `section.name='value'` lines of `pip config list`, the most specific scope winning (env, install, global). */
export function parsePipConfigList(text: string): Map<string, string> {
  const rank = (scope: string) => (scope === ':env:' ? 3 : scope === 'install' ? 2 : scope === 'global' ? 1 : 0);
  const best = new Map<string, { rank: number; value: string }>();
  for (const line of text.split('\n')) {
    const m = /^([^.=]+|:env:)\.([a-z-]+)=(.*)$/.exec(line.trim());
    if (!m) continue;
    const r = rank(m[1]!);
    if (r === 0) continue;
    let value = m[3]!;
    if (/^(['"]).*\1$/.test(value)) value = value.slice(1, -1).replace(/\\(['"\\])/g, '$1');
    const seen = best.get(m[2]!);
    if (!seen || r >= seen.rank) best.set(m[2]!, { rank: r, value });
  }
  return new Map([...best].map(([k, v]) => [k, v.value]));
}

/** The sandbox's view of `settings` (from parsePipConfigList). */
export function sandboxIndexConfig(settings: Map<string, string>): PipIndexConfig {
  const env: Record<string, string> = {};
  const readOnly = new Set<string>();
  const hosts = new Set<string>();
  const noIndex = /^(1|true|yes|on)$/i.test(settings.get('no-index') ?? '');
  for (const name of CARRIED) {
    let value = settings.get(name);
    if (name === 'index-url' && value === undefined && !noIndex) value = PYPI;
    if (value === undefined) continue;
    env[`PIP_${name.toUpperCase().replace(/-/g, '_')}`] = value;
    if (!LOCATIONS.has(name) && !FILES.has(name)) continue;
    for (const item of value.split(/\s+/).filter(Boolean)) {
      if (/^https?:\/\//i.test(item)) {
        const url = new URL(item);
        if (url.username || url.password)
          throw new BadInputError(
            `pip setting ${name}: an index URL with credentials cannot be given to the sandboxed install (the ` +
              'code that runs there could read them); use a local mirror or a --find-links folder',
          );
        hosts.add(hostPort(url));
        if (url.hostname === 'pypi.org') hosts.add(PYPI_FILES);
      } else {
        const local = item.startsWith('file:') ? fileURLToPath(item) : path.resolve(item);
        // A file: index's pages link to files beside its `simple` folder (../files/...): its parent goes too.
        const isIndex = name.endsWith('index-url') && path.basename(local) === 'simple';
        if (fs.existsSync(local)) readOnly.add(isIndex ? path.dirname(local) : local);
      }
    }
  }
  return { env, readOnly: [...readOnly], hosts: [...hosts] };
}

/** Reads the operator's pip settings with `pip` (the fresh venv's, our own code) under pipConfigEnvironment. */
export function readPipIndexConfig(python: string): PipIndexConfig {
  const run = spawnSync(python, ['-I', '-m', 'pip', 'config', 'list'], {
    env: pipConfigEnvironment(),
    cwd: '/',
    encoding: 'utf8',
    timeout: 60_000,
    killSignal: 'SIGKILL',
  });
  if (run.status !== 0)
    throw new InfrastructureError(`pip config list failed: ${(run.stderr || '').trim().slice(-800)}`);
  return sandboxIndexConfig(parsePipConfigList(run.stdout));
}
