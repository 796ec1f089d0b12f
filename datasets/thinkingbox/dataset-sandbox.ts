import { spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { readEnvironment, repoRoot } from '../../config/environment.ts';
import { BadInputError, InfrastructureError } from '../../core/errors.ts';
import { connectionLimit } from './capped-lines.ts';
import { isInside } from './dataset-paths.ts';
import { connectTrustedService } from './search-service-check.ts';
import { sandboxCgroups, type SandboxCgroup, type SandboxCgroups } from './sandbox-cgroups.ts';

/**
 * The sandbox every piece of dataset code runs in (ThinkingBox tool servers and test functions): third-party
 * code that must not read the worker's secrets, reach its databases, write outside its own scratch folder or
 * outlive its episode. See docs/dataset-sandbox.md for the threat, the defence and the tests.
 *
 * Defence, under bubblewrap (`bwrap`): new pid, network, mount, ipc and uts namespaces and a user namespace;
 * a root filesystem built from read-only binds of the system folders, the Python environment and the
 * dataset's folders, with one writable scratch folder (a tmpfs of a fixed size); an environment holding only an
 * allow-list; rlimits on CPU, memory, processes, file size and open files; a cgroup of its own bounding the
 * processes and memory of the whole sandbox (sandbox-cgroups.ts; where there is none, the mode line says which
 * weaker bound applies); and the whole process tree killed with the sandbox
 * (its pid namespace dies with its init, which dies with the worker-side `bwrap` process).
 * When this host's worker runs as root, the code also runs as a fresh unprivileged uid per sandbox (so the
 * process limit counts this sandbox alone and no root-owned file is readable through uid 0).
 *
 * Without a working bubblewrap, dataset code is refused unless the operator asked for `--unsandboxed`
 * (TBT_UNSANDBOXED=1); the mode is logged once per process either way.
 */

export type SandboxMode = 'bubblewrap' | 'unsandboxed';

export interface SandboxLimits {
  /** CPU seconds per process (RLIMIT_CPU). */
  cpuSeconds: number;
  /** Address space per process in MiB (RLIMIT_AS). */
  memoryMb: number;
  /** Processes and threads of the whole sandbox (pids.max of its cgroup; without one, RLIMIT_NPROC of its uid,
   * which is the sandbox's own only when the worker runs as root). */
  processes: number;
  /** Memory of the whole sandbox in MiB: RAM of all its processes plus its scratch files (memory cgroup). */
  totalMemoryMb: number;
  /** Size in MiB of the scratch folder (HOME, TMPDIR), a tmpfs; /tmp is another of the same size. */
  scratchMb: number;
  /** Largest file it may write, MiB (RLIMIT_FSIZE). */
  fileSizeMb: number;
  /** Open file descriptors per process (RLIMIT_NOFILE). */
  openFiles: number;
}

export const defaultSandboxLimits: Readonly<SandboxLimits> = Object.freeze({
  cpuSeconds: 900,
  memoryMb: 4096,
  processes: 256,
  totalMemoryMb: 4096,
  scratchMb: 1024,
  fileSizeMb: 512,
  openFiles: 1024,
});

/** An argument replaced by the sandbox's scratch folder (a server template mounts fresh ones over it). */
export const SCRATCH_ARG = '{tbt-scratch}';

/** One piece of dataset code to run. */
export interface DatasetCommand {
  command: string;
  args: string[];
  /** The dataset's own environment (servers.yaml `env`) and what our runner adds; nothing else is passed. */
  env?: Record<string, string>;
  /** Working directory (made visible read-only). */
  cwd?: string;
  /** Folders or files the code may read (the dataset, our helper package); system folders are always there. */
  readOnly?: string[];
  /** Folders put first on PATH (made visible read-only): the dataset's Python environment. */
  pathPrefix?: string[];
  /** Host folders bound read-write (only `tbt tasks prepare-env`'s venv being built); the caller owns them. */
  writable?: string[];
  /** Short name for the scratch folder and messages. */
  label: string;
  /** 'loopback': the sandbox's configured loopback ports reach their host services (tool servers); default none. */
  network?: 'none' | 'loopback';
  /** A server template (server-template.ts): no RLIMIT_NPROC for it, as it counts per uid and every server it forks
   * has its uid; each of those gets the sandbox's limit in a cgroup and a user namespace of its own instead
   * (`forkedServersBounded`; third review, finding 4). Its own processes are bounded by its cgroup. */
  forksServers?: boolean;
}

/** A loopback port inside the sandbox that reaches one host address. */
export interface LoopbackForward {
  port: number;
  host: string;
  hostPort: number;
}

/** `8108=127.0.0.1:8108,...` (TBT_SANDBOX_LOOPBACK) as forwards; an empty string is none. */
export function parseLoopbackForwards(text: string): LoopbackForward[] {
  return text
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)
    .map((spec) => {
      const m = /^(\d{1,5})=([\w.-]+):(\d{1,5})$/.exec(spec);
      if (!m) throw new BadInputError(`TBT_SANDBOX_LOOPBACK: '${spec}' is not PORT=HOST:PORT`);
      return { port: Number(m[1]), host: m[2]!, hostPort: Number(m[3]) };
    });
}

/** What to spawn: a command line, its environment and working directory; `dispose` removes the scratch folder. */
export interface SandboxedCommand {
  command: string;
  args: string[];
  env: Record<string, string>;
  cwd: string;
  /** The writable folder (also HOME and TMPDIR of the code). */
  scratch: string;
  mode: SandboxMode;
  dispose(): void;
}

export interface DatasetSandboxOptions {
  /** Run dataset code without isolation when bubblewrap does not work (the operator's `--unsandboxed`). */
  unsandboxed?: boolean;
  limits?: Partial<SandboxLimits>;
  /** Where scratch folders are made (default $TBT_STATE_DIR/dataset-scratch). */
  scratchRoot?: string;
  /** The bubblewrap binary (default `bwrap` from PATH). */
  bwrap?: string;
  /** Where the mode line goes (default stderr). */
  log?: (line: string) => void;
  /** Loopback ports that code asking for `network: 'loopback'` may reach, each relayed to one host address. */
  loopback?: LoopbackForward[];
  /** false: no per-sandbox cgroups even where the host has them (the fallback, for tests). */
  cgroups?: boolean;
  /** Cgroup to make the sandboxes' groups under (absolute, or relative to this process's own cgroup), e.g. a
   * subtree delegated to the worker's user; default `<own cgroup>/tbt-sandboxes`. */
  cgroupParent?: string;
}

const SYSTEM_FOLDERS = ['/usr', '/bin', '/sbin', '/lib', '/lib32', '/lib64', '/libx32'];
// Only the /etc entries programs need to start and resolve names; never the whole of /etc.
const ETC_FILES = [
  'ld.so.cache',
  'ld.so.conf',
  'ld.so.conf.d',
  'localtime',
  'passwd',
  'group',
  'nsswitch.conf',
  'hosts',
  'ssl',
  'ca-certificates',
  'alternatives',
  'mime.types',
  'os-release',
];
const SAFE_PATH = '/usr/local/bin:/usr/bin:/bin';
/** Where host-side helpers (prlimit, bwrap, setpriv, unshare, env, python3) are looked up: never a dataset PATH. */
export const SYSTEM_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';
const variableName = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * A host program by absolute path, looked up once in the fixed system PATH. Spawning a helper by name with the
 * sandbox's environment would find it through a PATH that the dataset's venv and servers.yaml `env` control (a
 * `prlimit` console script in the venv then runs on the host, as the worker).
 */
export const hostProgram = (() => {
  const found = new Map<string, string>();
  return (name: string): string => {
    const known = found.get(name);
    if (known) return known;
    for (const dir of SYSTEM_PATH.split(':')) {
      const candidate = path.join(dir, name);
      try {
        fs.accessSync(candidate, fs.constants.X_OK);
        found.set(name, candidate);
        return candidate;
      } catch {
        // not in this folder
      }
    }
    throw new Error(`${name}: not found in ${SYSTEM_PATH} (the dataset sandbox needs it)`);
  };
})();

/** argv[0] of the launcher that closes inherited descriptors (what `ps` shows for it). */
export const CLOSE_FDS_LAUNCHER = 'tbt-close-inherited-fds';
// Closes every descriptor but 0-2 (those the worker inherited without close-on-exec, which Node and libuv leave
// open across exec), then execs the command line it was given. bash: `exec {fd}>&-` closes any number.
const CLOSE_FDS_SCRIPT =
  'for fd in /proc/self/fd/*; do fd=${fd##*/}; case $fd in 0|1|2|*[!0-9]*) continue ;; esac; ' +
  '[ -e "/proc/self/fd/$fd" ] && exec {fd}>&-; done; exec "$@"';

/**
 * Every command line that runs dataset code starts here (third review, finding 10): a `bash` that closes the
 * descriptors beyond stdin, stdout and stderr that this process inherited without close-on-exec, then execs
 * `command` (the cgroup join, prlimit, bwrap, ...). The sandbox passes no other descriptor on, so nothing the
 * worker was started with reaches the code, bubblewrap or the helpers before it.
 */
export function closingInheritedFds(command: string, args: string[]): { command: string; args: string[] } {
  return { command: hostProgram('bash'), args: ['-c', CLOSE_FDS_SCRIPT, CLOSE_FDS_LAUNCHER, command, ...args] };
}

/** Our helper package (the test runner, the loopback relay), which the sandbox needs to see. */
export const helperPackageDir = path.join(repoRoot, 'thinkingbox');

/** Folders a Python interpreter needs: its venv and the base installation the venv points at. */
export function pythonRoots(python: string): string[] {
  const roots = new Set<string>();
  const bin = path.dirname(path.resolve(python));
  const venv = path.dirname(bin);
  const cfg = path.join(venv, 'pyvenv.cfg');
  if (fs.existsSync(cfg)) {
    roots.add(venv);
    const home = /^home\s*=\s*(.+)$/m.exec(fs.readFileSync(cfg, 'utf8'))?.[1]?.trim();
    if (home) roots.add(path.dirname(home));
  }
  try {
    roots.add(path.dirname(path.dirname(fs.realpathSync(python))));
  } catch {
    // `python3` from PATH: found under /usr, which is always there.
  }
  return [...roots].filter((r) => r !== '/' && fs.existsSync(r));
}

/**
 * bwrap arguments that build the root filesystem: system folders, read-only binds, and the scratch folder and
 * /tmp as two tmpfs of `scratchBytes` each (their pages count in the sandbox's memory cgroup too). Nothing the
 * code writes reaches the host's disk.
 */
function filesystemArgs(readOnly: string[], scratch: string, scratchBytes: number, binds: string[] = []): string[] {
  const args: string[] = [];
  for (const folder of SYSTEM_FOLDERS) {
    const stat = fs.lstatSync(folder, { throwIfNoEntry: false });
    if (!stat) continue;
    if (stat.isSymbolicLink()) args.push('--symlink', fs.readlinkSync(folder), folder);
    else args.push('--ro-bind', folder, folder);
  }
  // Made first and world-traversable: bwrap would create it 0700 as root, hiding these entries from the code's uid.
  args.push('--perms', '0755', '--dir', '/etc');
  for (const name of ETC_FILES) args.push('--ro-bind-try', `/etc/${name}`, `/etc/${name}`);
  // Parents are mounted before what lies inside them (a dataset under /tmp stays visible over the scratch /tmp).
  const mounts = [
    { source: scratch, dest: scratch, writable: true },
    { source: '', dest: '/tmp', writable: true },
    ...binds.map((p) => ({ source: path.resolve(p), dest: path.resolve(p), writable: true, bind: true })),
    ...[...new Set(readOnly.map((p) => path.resolve(p)))]
      .filter((p) => fs.existsSync(p) && !SYSTEM_FOLDERS.some((s) => isInside(p, s)))
      .map((p) => ({ source: p, dest: p, writable: false })),
  ].sort((a, b) => a.dest.split('/').length - b.dest.split('/').length || a.dest.localeCompare(b.dest));
  const mounted: { dest: string; writable: boolean }[] = [];
  const made = new Set<string>(['/']);
  for (const m of mounts) {
    const parent = mounted.filter((k) => isInside(m.dest, k.dest)).at(-1);
    // A read-only bind already inside a read-only one adds nothing.
    if (parent && !parent.writable && !m.writable) continue;
    // bwrap would copy each parent's mode (and /root is 0700), or create missing ones inside a writable mount
    // (a dataset under /tmp, over the scratch /tmp) as 0700 root: make every one world-traversable instead, and
    // read-only (0555): without root bwrap creates them as the code's own uid, which could otherwise write into
    // them (only into the sandbox's private /tmp, but a path that looks like the host's repository).
    const chain: string[] = [];
    for (let d = path.dirname(m.dest); !made.has(d); d = path.dirname(d)) chain.unshift(d);
    for (const d of chain) {
      made.add(d);
      args.push('--perms', '0555', '--dir', d);
    }
    if ('bind' in m) args.push('--bind', m.source, m.dest);
    // 1777: as root the code's uid is not the tmpfs's owner (root); only the sandbox's processes see them.
    else if (m.writable) args.push('--perms', '1777', '--size', String(scratchBytes), '--tmpfs', m.dest);
    else args.push('--ro-bind', m.source, m.dest);
    if (m.dest === scratch) args.push('--perms', '1777', '--dir', path.join(scratch, 'tmp'));
    mounted.push({ dest: m.dest, writable: m.writable });
    made.add(m.dest);
  }
  // /dev is a tmpfs of bwrap's: read-only, so its shm folder is no uncapped scratch space (device nodes work).
  args.push('--proc', '/proc', '--dev', '/dev', '--remount-ro', '/dev', '--remount-ro', '/');
  return args;
}

/** As root the code runs as a uid of its own, so what it must read has to be readable by others. */
function readableByOthers(p: string, label: string): void {
  const stat = fs.statSync(p, { throwIfNoEntry: false });
  if (!stat) return;
  const need = stat.isDirectory() ? 0o005 : 0o004;
  if ((stat.mode & need) !== need)
    throw new BadInputError(
      `${label}: ${p} (mode ${(stat.mode & 0o777).toString(8)}) is not readable by others, and dataset code runs ` +
        `as an unprivileged uid of its own: make it readable (chmod o+r${stat.isDirectory() ? 'x' : ''})`,
    );
}

/** prlimit arguments; `nproc` false where a pids cgroup bounds the sandbox and its uid is the worker's (there
 * RLIMIT_NPROC would count the worker and every other sandbox against this one's budget). */
function limitArgs(limits: SandboxLimits, nproc: boolean): string[] {
  const both = (v: number) => `${v}:${v}`;
  return [
    `--cpu=${both(limits.cpuSeconds)}`,
    `--as=${both(limits.memoryMb * 1024 * 1024)}`,
    ...(nproc ? [`--nproc=${both(limits.processes)}`] : []),
    `--fsize=${both(limits.fileSizeMb * 1024 * 1024)}`,
    `--nofile=${both(limits.openFiles)}`,
    '--core=0:0',
  ];
}

export class DatasetSandbox {
  readonly mode: SandboxMode;
  readonly limits: Readonly<SandboxLimits>;
  private readonly scratchRoot: string;
  private readonly bwrap: string;
  private readonly loopback: LoopbackForward[];
  private readonly asRoot = process.getuid?.() === 0;
  /** Per-sandbox cgroups, or why there are none. */
  private readonly cgroups: SandboxCgroups | undefined;
  private readonly cgroupProblem: string | undefined;

  /** Checks that bubblewrap works here; refuses (throws) when it does not, unless `unsandboxed` is set. */
  constructor(options: DatasetSandboxOptions = {}) {
    this.limits = Object.freeze({ ...defaultSandboxLimits, ...options.limits });
    this.scratchRoot = path.resolve(
      options.scratchRoot ?? path.join(readEnvironment().TBT_STATE_DIR, 'dataset-scratch'),
    );
    this.bwrap =
      options.bwrap ??
      (() => {
        try {
          return hostProgram('bwrap');
        } catch {
          return 'bwrap'; // the probe below then reports it missing
        }
      })();
    this.loopback = options.loopback ?? [];
    const cgroups =
      options.cgroups === false ? 'cgroups off' : sandboxCgroups({ parent: options.cgroupParent || undefined });
    this.cgroups = typeof cgroups === 'string' ? undefined : cgroups;
    this.cgroupProblem = typeof cgroups === 'string' ? cgroups : undefined;
    const log = options.log ?? ((line: string) => process.stderr.write(`${line}\n`));
    const problem = this.probe();
    if (!problem) {
      this.mode = 'bubblewrap';
      log(`[dataset-sandbox] mode=bubblewrap: ${this.describe()}`);
      return;
    }
    if (!options.unsandboxed)
      throw new InfrastructureError(
        `dataset code is refused: no working sandbox on this host (${problem}). Install bubblewrap ` +
          `(bash scripts/install-bubblewrap.sh) or, knowing that dataset code then sees this host's secrets and ` +
          `network, pass --unsandboxed (TBT_UNSANDBOXED=1)`,
      );
    this.mode = 'unsandboxed';
    log(
      `[dataset-sandbox] mode=UNSANDBOXED (--unsandboxed; ${problem}): dataset code runs with no namespaces and ` +
        'no filesystem isolation; only the environment allow-list and the rlimits apply; scratch not capped; ' +
        this.describeTotals(),
    );
  }

  describe(): string {
    const l = this.limits;
    return (
      `user, pid, network, mount, ipc and uts namespaces${this.asRoot ? ', a fresh unprivileged uid' : ''}; ` +
      `read-only filesystem but a scratch folder (tmpfs ${l.scratchMb}MiB, /tmp another); limits per process ` +
      `cpu=${l.cpuSeconds}s memory=${l.memoryMb}MiB file=${l.fileSizeMb}MiB files=${l.openFiles}; ` +
      `${this.describeTotals()}; tool servers reach ` +
      (this.loopback.length
        ? this.loopback.map((f) => `127.0.0.1:${f.port} -> ${f.host}:${f.hostPort}`).join(', ')
        : 'no network')
    );
  }

  /** What bounds the sandbox as a whole: its cgroup, or the fallback (stated, as it is weaker). */
  private describeTotals(): string {
    const l = this.limits;
    if (this.cgroups)
      return (
        `per-sandbox limits: ${this.cgroups.describe()}: processes=${l.processes} memory=${l.totalMemoryMb}MiB ` +
        '(with its scratch files)'
      );
    return (
      `per-sandbox limits: none (${this.cgroupProblem}): processes by RLIMIT_NPROC=${l.processes} of the code's uid ` +
      `(${this.asRoot ? "the sandbox's own" : "the worker's, shared with the worker and its other sandboxes"}), ` +
      `memory per process only (${l.processes} x ${l.memoryMb}MiB at worst)`
    );
  }

  /** Why bubblewrap cannot run a trivial command here, or undefined when it can. */
  private probe(): string | undefined {
    const scratch = this.makeScratch('probe');
    try {
      const run = this.wrap({ command: 'true', args: [], label: 'probe' }, scratch, 'bubblewrap');
      const result = spawnSync(run.command, run.args, { env: run.env, cwd: '/', encoding: 'utf8', timeout: 10_000 });
      if (result.error) return `${this.bwrap}: ${result.error.message}`;
      if (result.status !== 0) return `${this.bwrap} exited ${result.status}: ${(result.stderr ?? '').trim()}`;
      return undefined;
    } finally {
      fs.rmSync(scratch.dir, { recursive: true, force: true });
    }
  }

  private makeScratch(label: string): { dir: string; uid: number } {
    fs.mkdirSync(this.scratchRoot, { recursive: true, mode: 0o755 });
    const dir = fs.mkdtempSync(path.join(this.scratchRoot, `${label.replace(/[^\w.-]/g, '_').slice(0, 40)}-`));
    fs.mkdirSync(path.join(dir, 'tmp'));
    // A uid no other sandbox and no host account uses (the range is far above any system's accounts).
    const uid = this.asRoot ? crypto.randomInt(1_000_000, 2_000_000_000) : (process.getuid?.() ?? 0);
    if (this.asRoot) {
      fs.chownSync(dir, uid, uid);
      fs.chownSync(path.join(dir, 'tmp'), uid, uid);
    }
    fs.chmodSync(dir, 0o700);
    return { dir, uid };
  }

  private wrap(
    code: DatasetCommand,
    scratch: { dir: string; uid: number },
    mode: SandboxMode,
    relayDir?: string,
    group?: SandboxCgroup,
  ) {
    const pathPrefix = code.pathPrefix ?? [];
    const cwd = code.cwd ? path.resolve(code.cwd) : scratch.dir;
    const codeEnv: Record<string, string> = {
      PATH: [...pathPrefix, SAFE_PATH].join(path.delimiter),
      HOME: scratch.dir,
      TMPDIR: path.join(scratch.dir, 'tmp'),
      LANG: 'C.UTF-8',
      PYTHONDONTWRITEBYTECODE: '1',
      // Fixed values for the names the MCP SDK would otherwise copy from the worker's own environment.
      SHELL: '/bin/sh',
      TERM: 'dumb',
      USER: 'sandbox',
      LOGNAME: 'sandbox',
      PWD: cwd, // as bwrap's --chdir sets it, which --clearenv no longer passes on
      ...code.env,
    };
    for (const name of Object.keys(codeEnv))
      if (!variableName.test(name)) throw new Error(`${code.label}: env name '${name}' is not a variable name`);
    // The helpers on the host (prlimit, bwrap) and the ones in the sandbox before the code (setpriv, unshare, the
    // relay) run with this fixed environment: no dataset value (PATH, LD_PRELOAD, ...) reaches them. The code's
    // own environment is set by `env -i` as the last step before it.
    const env: Record<string, string> = {
      PATH: SYSTEM_PATH,
      HOME: scratch.dir,
      LANG: 'C.UTF-8',
      SHELL: '/bin/sh',
      TERM: 'dumb',
      USER: 'sandbox',
      LOGNAME: 'sandbox',
    };
    const withCodeEnv = [
      hostProgram('env'),
      '-i',
      '--',
      ...Object.entries(codeEnv).map(([k, v]) => `${k}=${v}`),
      code.command,
      ...code.args,
    ];
    // The first process joins the sandbox's cgroup, then execs prlimit (and so everything after it).
    const join = group && this.cgroups ? this.cgroups.joinCommand(group) : [];
    const prlimit = hostProgram('prlimit');
    const command = join[0] ?? prlimit;
    const head = join.length ? [...join.slice(1), prlimit] : [];
    const limits = limitArgs(this.limits, !group || (this.asRoot && !code.forksServers));
    if (mode === 'unsandboxed')
      return { ...closingInheritedFds(command, [...head, ...limits, '--', ...withCodeEnv]), env, cwd };
    const readOnly = [...(code.readOnly ?? []), ...pathPrefix, ...(code.cwd ? [cwd] : [])];
    // The relay runs first inside the sandbox: it binds the loopback ports, forks, and execs the code.
    const relay = relayDir
      ? [
          hostProgram('python3'),
          '-I',
          path.join(helperPackageDir, 'tbt_thinkingbox', 'loopback_forward.py'),
          ...this.loopback.map((f) => `${f.port}=${path.join(relayDir, `${f.port}.sock`)}`),
          '--',
        ]
      : [];
    if (relayDir) readOnly.push(relayDir, path.join(helperPackageDir, 'tbt_thinkingbox', 'loopback_forward.py'));
    for (const p of pathPrefix) readOnly.push(...pythonRoots(path.join(p, 'python')));
    if (this.asRoot) for (const p of readOnly) readableByOthers(p, code.label);
    const inner = this.asRoot
      ? [
          // Drop to the sandbox's own uid with no capabilities, then enter a user namespace as that uid.
          hostProgram('setpriv'),
          `--reuid=${scratch.uid}`,
          `--regid=${scratch.uid}`,
          '--clear-groups',
          '--bounding-set=-all',
          '--inh-caps=-all',
          '--no-new-privs',
          '--',
          hostProgram('unshare'),
          '--user',
          '--map-current-user',
          '--',
        ]
      : [];
    const args = [
      ...head,
      ...limits,
      '--',
      this.bwrap,
      '--die-with-parent',
      '--clearenv',
      '--new-session',
      ...(this.asRoot ? [] : ['--unshare-user', '--cap-drop', 'ALL']),
      '--unshare-pid',
      '--unshare-net',
      '--unshare-ipc',
      '--unshare-uts',
      '--unshare-cgroup-try',
      '--hostname',
      'sandbox',
      ...filesystemArgs(readOnly, scratch.dir, this.limits.scratchMb * 1024 * 1024, code.writable),
      '--chdir',
      cwd,
      '--',
      ...inner,
      ...relay,
      ...withCodeEnv,
    ];
    // bwrap itself gets only the fixed environment too: its init (pid 1 inside) is what /proc/1/environ shows.
    return { ...closingInheritedFds(command, args), env, cwd: '/' };
  }

  /** The command line that runs `code` in this sandbox, with a fresh scratch folder. */
  prepare(code: DatasetCommand): SandboxedCommand {
    if (code.forksServers && !this.forkedServersBounded)
      throw new InfrastructureError(`${code.label}: its forked servers would share one uid's process limit here`);
    const scratch = this.makeScratch(code.label);
    // Unsandboxed code shares the host's network anyway; under the sandbox each forward is a unix socket the
    // worker relays to its one host address (outside the scratch folder, so the code cannot replace it).
    const relays =
      code.network === 'loopback' && this.mode === 'bubblewrap' && this.loopback.length
        ? this.startRelays(`${scratch.dir}.net`)
        : undefined;
    let group: SandboxCgroup | undefined;
    try {
      group = this.cgroups?.create({
        processes: this.limits.processes,
        memoryBytes: this.limits.totalMemoryMb * 1024 * 1024,
      });
    } catch (err) {
      relays?.close();
      fs.rmSync(scratch.dir, { recursive: true, force: true });
      throw new InfrastructureError(`${code.label}: cannot make the sandbox's cgroup: ${(err as Error).message}`);
    }
    const args = code.args.map((a) => (a === SCRATCH_ARG ? scratch.dir : a));
    const run = this.wrap({ ...code, args }, scratch, this.mode, relays?.dir, group);
    let disposed = false;
    return {
      ...run,
      scratch: scratch.dir,
      mode: this.mode,
      dispose: () => {
        if (disposed) return;
        disposed = true;
        group?.remove();
        relays?.close();
        fs.rmSync(scratch.dir, { recursive: true, force: true });
      },
    };
  }

  /** The loopback ports code asking for `network: 'loopback'` reaches; each relayed from
   * `<scratch>.net/<port>.sock` (a server template's children bind and relay them themselves). */
  get loopbackPorts(): number[] {
    return this.mode === 'bubblewrap' ? this.loopback.map((f) => f.port) : [];
  }

  /** A new folder, readable by every sandbox uid, for the unix sockets a sandbox connects to (bound read-only). */
  makeSocketFolder(label: string): string {
    fs.mkdirSync(this.scratchRoot, { recursive: true, mode: 0o755 });
    const dir = fs.mkdtempSync(path.join(this.scratchRoot, `${label.replace(/[^\w.-]/g, '_').slice(0, 40)}-sock-`));
    fs.chmodSync(dir, 0o755);
    return dir;
  }

  /**
   * Whether each server a template forks has the sandbox's process limit to itself, as a cold start has: with
   * per-sandbox cgroups (`adopt`), yes. Without them, as root, no: a cold start's limit is RLIMIT_NPROC of a fresh
   * uid, and forked servers all have their template's (third review, finding 4), so servers start cold there.
   * Without them and not as root every sandbox, cold or forked, counts against the worker's own uid anyway.
   */
  get forkedServersBounded(): boolean {
    return this.mode === 'bubblewrap' && (this.cgroups !== undefined || !this.asRoot);
  }

  /**
   * Moves a running process (one a server template forked, not yet running dataset code) into a cgroup of its
   * own with this sandbox's totals, as a cold start's first process joins one; undefined where there are none.
   */
  adopt(pid: number): SandboxCgroup | undefined {
    if (!this.cgroups) return undefined;
    const group = this.cgroups.create({
      processes: this.limits.processes,
      memoryBytes: this.limits.totalMemoryMb * 1024 * 1024,
    });
    try {
      for (const file of group.procsFiles) fs.writeFileSync(file, String(pid));
    } catch (err) {
      group.remove();
      throw new InfrastructureError(`cannot move process ${pid} into its sandbox cgroup: ${(err as Error).message}`);
    }
    return group;
  }

  private startRelays(dir: string): { dir: string; close(): void } {
    fs.mkdirSync(dir, { mode: 0o755 });
    // Dataset code may connect to the socket itself, not only through its relay: at most 64 connections at a time
    // per socket (two descriptors each here), more are closed at once, and one idle for 60 s is closed (third
    // review, finding 3: 2000 connections held 3000 of the worker's descriptors and stalled it for a minute).
    const [connections, idleMs] = [64, 60_000];
    const servers = this.loopback.map((f) => {
      const socketPath = path.join(dir, `${f.port}.sock`);
      const admit = connectionLimit(connections);
      const server = net.createServer((inside) => {
        inside.on('error', () => undefined);
        if (!admit(inside)) return;
        inside.setTimeout(idleMs, () => inside.destroy());
        const host = connectTrustedService(f.host, f.hostPort);
        inside.pipe(host).pipe(inside);
        const end = () => {
          inside.destroy();
          host.destroy();
        };
        inside.on('error', end).on('close', end);
        host.on('error', end).on('close', end);
      });
      server.listen(socketPath, () => fs.chmodSync(socketPath, 0o777));
      server.unref();
      return server;
    });
    return {
      dir,
      close: () => {
        for (const s of servers) s.close();
        fs.rmSync(dir, { recursive: true, force: true });
      },
    };
  }
}

let shared: DatasetSandbox | undefined;

/** The process's sandbox, made (and its mode logged) on first use; `--unsandboxed` is TBT_UNSANDBOXED=1. */
export function datasetSandbox(): DatasetSandbox {
  const env = readEnvironment();
  shared ??= new DatasetSandbox({
    unsandboxed: env.TBT_UNSANDBOXED === '1',
    loopback: parseLoopbackForwards(env.TBT_SANDBOX_LOOPBACK),
  });
  return shared;
}
