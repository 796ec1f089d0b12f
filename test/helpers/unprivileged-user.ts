import { spawn } from 'node:child_process';
import fs from 'node:fs';
import crypto from 'node:crypto';
import os from 'node:os';
import path from 'node:path';

/**
 * Runs a test file (or any command) as a non-root user, so that tests which run as root on this host also show
 * what a worker running as an ordinary user gets (issue 22: the hostile dataset tests run both ways).
 *
 * The command runs as uid/gid 65534 (`nobody`) with no supplementary groups and no capabilities (`setpriv`),
 * a fresh HOME and TBT_STATE_DIR it owns, and only the environment given. Paths it must read but cannot reach
 * (e.g. a Python environment under root's 0700 home) are reported by `unreadableBy`, and `expose` makes them
 * reachable for that command alone: in a private mount namespace, the first non-traversable folder above
 * each is covered by an empty tmpfs into which only the exposed paths are bound back, at their own paths. Root's
 * other files stay out of reach; nothing on the host changes.
 */

export const UNPRIVILEGED_ID = 65534;

const SYSTEM_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/** The paths the unprivileged user cannot read or reach (only the "others" bits count), each with the first
 * folder on its way that stops it. */
export function unreadableBy(paths: string[]): { path: string; blockedAt: string }[] {
  const problems: { path: string; blockedAt: string }[] = [];
  for (const p of paths) {
    const full = path.resolve(p);
    const chain: string[] = [];
    for (let d = full; ; d = path.dirname(d)) {
      chain.unshift(d);
      if (d === '/') break;
    }
    const blocked = chain.find((d, i) => {
      const stat = fs.statSync(d, { throwIfNoEntry: false });
      if (!stat) return true;
      const last = i === chain.length - 1;
      const need = stat.isDirectory() ? (last ? 0o005 : 0o001) : 0o004;
      return (stat.mode & need) !== need;
    });
    if (blocked) problems.push({ path: full, blockedAt: blocked });
  }
  return problems;
}

export interface UnprivilegedRun {
  code: number | null;
  output: string;
}

export interface UnprivilegedOptions {
  /** The command's whole environment, besides PATH, HOME and TBT_STATE_DIR (which this sets). */
  env?: Record<string, string>;
  /** Paths it must read that are below a folder it cannot enter (see `unreadableBy`). */
  expose?: string[];
  cwd?: string;
  timeoutMs: number;
}

/** Runs `command` as uid/gid 65534; resolves with its exit code and output (stdout and stderr together). */
export function runAsUnprivilegedUser(command: string[], options: UnprivilegedOptions): Promise<UnprivilegedRun> {
  if (process.getuid?.() !== 0) throw new Error('runAsUnprivilegedUser needs root (it switches to uid 65534)');
  const home = fs.mkdtempSync(path.join(os.tmpdir(), 'tbt-unprivileged-'));
  fs.mkdirSync(path.join(home, 'state'));
  for (const d of [home, path.join(home, 'state')]) fs.chownSync(d, UNPRIVILEGED_ID, UNPRIVILEGED_ID);
  const blocked = unreadableBy(options.expose ?? []);
  // Shell script run as root in a private mount namespace: stash each exposed path, hide the folder that
  // blocks it behind a tmpfs, put the path back, then drop to the unprivileged user.
  const covers = [...new Set(blocked.map((b) => b.blockedAt))];
  const lines = ['set -e', `stash=$(mktemp -d ${path.join(home, '.stash-XXXXXX')})`];
  blocked.forEach((b, i) => lines.push(`mkdir "$stash/${i}"`, `mount --bind '${b.path}' "$stash/${i}"`));
  for (const c of covers) lines.push(`mount -t tmpfs -o mode=0755,size=1m tbt-expose '${c}'`);
  blocked.forEach((b, i) => lines.push(`mkdir -p '${b.path}'`, `mount --move "$stash/${i}" '${b.path}'`));
  lines.push('exec "$@"');
  for (const p of [home, ...blocked.map((b) => b.path)])
    if (p.includes("'")) throw new Error(`runAsUnprivilegedUser: path ${p} has a quote`);
  const env = { ...options.env, PATH: SYSTEM_PATH, HOME: home, TBT_STATE_DIR: path.join(home, 'state') };
  const args = [
    '--mount',
    '--propagation',
    'private',
    '--',
    '/bin/sh',
    '-c',
    lines.join('\n'),
    'tbt-unprivileged',
    'setpriv',
    `--reuid=${UNPRIVILEGED_ID}`,
    `--regid=${UNPRIVILEGED_ID}`,
    '--clear-groups',
    '--inh-caps=-all',
    '--bounding-set=-all',
    '--',
    'env',
    '-i',
    ...Object.entries(env).map(([k, v]) => `${k}=${v}`),
    ...command,
  ];
  return new Promise((resolve, reject) => {
    const child = spawn('/usr/bin/unshare', args, {
      cwd: options.cwd ?? process.cwd(),
      env: { PATH: SYSTEM_PATH },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (c: Buffer) => (output += c.toString()));
    child.stderr.on('data', (c: Buffer) => (output += c.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), options.timeoutMs);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      fs.rmSync(home, { recursive: true, force: true });
      resolve({ code, output });
    });
  });
}

/**
 * A cgroup handed to uid 65534 the way systemd's `Delegate=yes` hands a service its subtree: made by root (with a
 * total cap of its own), owned by that user, which may make and fill groups below it. Only cgroup v1 `pids` and
 * `memory` hierarchies mounted at /sys/fs/cgroup/<name> (this host); undefined elsewhere. `parent` is relative to
 * the process's own cgroup (what `DatasetSandboxOptions.cgroupParent` takes).
 */
export function delegatedCgroup(): { parent: string; remove(): void } | undefined {
  const own = new Map<string, string>();
  for (const line of fs.readFileSync('/proc/self/cgroup', 'utf8').split('\n')) {
    const m = /^\d+:([^:]+):(.*)$/.exec(line);
    if (m) for (const c of m[1]!.split(',')) own.set(c, m[2]!);
  }
  const controllers = ['pids', 'memory'];
  if (!controllers.every((c) => own.has(c) && fs.existsSync(`/sys/fs/cgroup/${c}/cgroup.procs`))) return undefined;
  const parent = `tbt-unprivileged-${crypto.randomBytes(4).toString('hex')}`;
  const dirs = controllers.map((c) => path.join(`/sys/fs/cgroup/${c}`, own.get(c)!, parent));
  for (const d of dirs) {
    fs.mkdirSync(d);
    for (const p of [d, path.join(d, 'cgroup.procs'), path.join(d, 'tasks')])
      fs.chownSync(p, UNPRIVILEGED_ID, UNPRIVILEGED_ID);
  }
  // The delegated subtree's own caps (what an operator sets on the service): its groups subdivide them.
  fs.writeFileSync(path.join(dirs[0]!, 'pids.max'), '4096');
  fs.writeFileSync(path.join(dirs[1]!, 'memory.limit_in_bytes'), String(8 * 1024 ** 3));
  return {
    parent,
    remove: () => {
      // Groups still busy (processes dying) are left for a later sweep rather than failing the test.
      for (const d of dirs)
        for (const g of [...fs.readdirSync(d, { withFileTypes: true }).filter((e) => e.isDirectory()), d])
          try {
            fs.rmdirSync(typeof g === 'string' ? g : path.join(d, g.name));
          } catch {
            // busy
          }
    },
  };
}

/** The base installation a venv points at (pyvenv.cfg `home`), which its python needs to start. */
export function pythonBases(venv: string): string[] {
  const cfg = path.join(venv, 'pyvenv.cfg');
  const home = fs.existsSync(cfg) ? /^home\s*=\s*(.+)$/m.exec(fs.readFileSync(cfg, 'utf8'))?.[1]?.trim() : undefined;
  return home ? [path.dirname(home)] : [];
}
