import { spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

/**
 * Per-sandbox control groups: one cgroup per dataset sandbox, so that its processes and its memory (scratch
 * tmpfs pages included) are bounded for the sandbox as a whole, not per process or per uid (second review,
 * finding 6). See docs/dataset-sandbox.md.
 *
 * Found once per process: cgroup v2 (unified) when this process's own v2 cgroup offers the `pids` and `memory`
 * controllers and it may make children there, else cgroup v1 when `pids` and `memory` hierarchies are mounted
 * and writable. Groups are made under `<own cgroup>/tbt-sandboxes/` (or under an operator-given parent) and
 * named `sbx-<worker pid>-<random>`; empty ones of dead workers are swept at start.
 *
 * The sandbox's first process joins its group before it execs anything (`joinCommand`: a `sh` that writes its
 * own pid to each `cgroup.procs`, then execs the sandbox), so no process of the sandbox ever runs outside it.
 */

export type CgroupVersion = 'v1' | 'v2';

export interface CgroupLimits {
  /** pids.max: processes and threads of the whole sandbox. */
  processes: number;
  /** memory.max / memory.limit_in_bytes (and no swap): RAM of all its processes plus its tmpfs pages. */
  memoryBytes: number;
}

/** One sandbox's group(s): v2 one folder, v1 one per controller (pids, memory). */
export interface SandboxCgroup {
  /** The `cgroup.procs` files its first process writes its pid to. */
  procsFiles: string[];
  /** Kills what is left in it and removes it (retried in the background while its processes die). */
  remove(): void;
}

export interface CgroupOptions {
  /** A cgroup path to make groups under instead of `<own cgroup>/tbt-sandboxes`: absolute as in /proc/self/cgroup
   * (e.g. `/tbt.service/sandboxes`) or relative to this process's own; a subtree delegated to the worker's user. */
  parent?: string;
}

interface Hierarchy {
  version: CgroupVersion;
  /** Folder where the per-sandbox groups are made. */
  parent: string;
}

const GROUP_NAME = /^sbx-(\d+)-[0-9a-f]+$/;
const MAX_RETRY_MS = 10_000;

function readText(file: string): string {
  return fs.readFileSync(file, 'utf8');
}

function tryWrite(file: string, value: string): void {
  fs.writeFileSync(file, value);
}

interface Mount {
  fstype: string;
  root: string;
  point: string;
  options: string[];
}

function mounts(): Mount[] {
  return readText('/proc/self/mountinfo')
    .split('\n')
    .filter(Boolean)
    .map((line) => {
      const [left, right] = line.split(' - ');
      const f = left!.split(' ');
      const [fstype, , superOptions] = right!.split(' ');
      return { fstype: fstype!, root: f[3]!, point: f[4]!, options: (superOptions ?? '').split(',') };
    });
}

/** This process's cgroup path per hierarchy: '' = v2, else the v1 controller list (e.g. 'pids'). */
function ownCgroups(): Map<string, string> {
  const own = new Map<string, string>();
  for (const line of readText('/proc/self/cgroup').split('\n').filter(Boolean)) {
    const [, controllers, p] = /^\d+:([^:]*):(.*)$/.exec(line) ?? [];
    if (controllers !== undefined && p !== undefined) for (const c of controllers.split(',')) own.set(c, p);
  }
  return own;
}

function folderOf(m: Mount, cgroupPath: string): string {
  return path.join(m.point, path.relative(m.root, cgroupPath));
}

function words(file: string): string[] {
  return readText(file).trim().split(/\s+/).filter(Boolean);
}

/** v2: the parent folder whose children get pids and memory, made so if need be; or why not. */
function unifiedParent(m: Mount, own: string, options: CgroupOptions): string {
  const base = folderOf(m, path.posix.resolve(own, options.parent ?? '.'));
  const offered = words(path.join(base, 'cgroup.controllers'));
  for (const c of ['pids', 'memory'])
    if (!offered.includes(c)) throw new Error(`cgroup v2 ${base} does not offer the ${c} controller`);
  if (options.parent) {
    // A delegated parent: its subtree_control must pass pids and memory on (it holds no process).
    if (!['pids', 'memory'].every((c) => words(path.join(base, 'cgroup.subtree_control')).includes(c)))
      tryWrite(path.join(base, 'cgroup.subtree_control'), '+pids +memory');
    return base;
  }
  // Our own cgroup holds this process, and a v2 group with processes cannot pass controllers on ("no internal
  // processes"): move this process into a leaf `tbt-worker` beside the sandboxes first (still inside its own
  // cgroup, so under the same limits), then enable pids and memory for the children.
  const parent = path.join(base, 'tbt-sandboxes');
  if (!['pids', 'memory'].every((c) => words(path.join(base, 'cgroup.subtree_control')).includes(c))) {
    const leaf = path.join(base, 'tbt-worker');
    fs.mkdirSync(leaf, { recursive: true });
    tryWrite(path.join(leaf, 'cgroup.procs'), String(process.pid));
    try {
      tryWrite(path.join(base, 'cgroup.subtree_control'), '+pids +memory');
    } catch (err) {
      throw new Error(
        `cgroup v2 ${base}: cannot enable pids and memory for children (${(err as Error).message}); other ` +
          'processes share it: give the worker a delegated cgroup of its own (systemd Delegate=yes)',
      );
    }
  }
  fs.mkdirSync(parent, { recursive: true });
  tryWrite(path.join(parent, 'cgroup.subtree_control'), '+pids +memory');
  return parent;
}

function findHierarchies(options: CgroupOptions): Hierarchy[] {
  const all = mounts();
  const own = ownCgroups();
  const problems: string[] = [];
  const unified = all.find((m) => m.fstype === 'cgroup2');
  if (unified && own.has('')) {
    try {
      return [{ version: 'v2', parent: unifiedParent(unified, own.get('')!, options) }];
    } catch (err) {
      problems.push((err as Error).message);
    }
  }
  const v1 = ['pids', 'memory'].map((c) => ({ c, m: all.find((m) => m.fstype === 'cgroup' && m.options.includes(c)) }));
  if (v1.every((h) => h.m && own.has(h.c))) {
    try {
      return v1.map(({ c, m }) => {
        const parent = folderOf(m!, path.posix.resolve(own.get(c)!, options.parent ?? 'tbt-sandboxes'));
        fs.mkdirSync(parent, { recursive: true });
        return { version: 'v1' as const, parent };
      });
    } catch (err) {
      problems.push(`cgroup v1: ${(err as Error).message}`);
    }
  } else problems.push('no cgroup v1 pids and memory hierarchies');
  throw new Error(problems.join('; '));
}

function processIds(group: string): number[] {
  try {
    return words(path.join(group, 'cgroup.procs')).map(Number);
  } catch {
    return [];
  }
}

/** Kills every process left in `group` (cgroup.kill where the kernel has it) and removes it; false if busy. */
function killAndRemove(group: string): boolean {
  if (!fs.existsSync(group)) return true;
  const kill = path.join(group, 'cgroup.kill');
  if (fs.existsSync(kill)) {
    try {
      tryWrite(kill, '1');
    } catch {
      // not ours to kill; rmdir below says whether it is empty
    }
  } else
    for (const pid of processIds(group)) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // gone meanwhile
      }
    }
  try {
    fs.rmdirSync(group);
    return true;
  } catch {
    return false;
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

export class SandboxCgroups {
  private constructor(
    readonly version: CgroupVersion,
    private readonly parents: string[],
  ) {}

  /** This host's per-sandbox cgroups, checked end to end (a group made, limited, joined, removed); else why
   * not (a sentence). */
  static detect(options: CgroupOptions = {}): SandboxCgroups | string {
    let found: SandboxCgroups;
    try {
      const hierarchies = findHierarchies(options);
      found = new SandboxCgroups(
        hierarchies[0]!.version,
        hierarchies.map((h) => h.parent),
      );
    } catch (err) {
      return (err as Error).message;
    }
    found.sweep();
    if (found.version === 'v1' && !options.parent) process.once('exit', () => found.removeParents());
    let probe: SandboxCgroup | undefined;
    try {
      probe = found.create({ processes: 8, memoryBytes: 64 * 1024 * 1024 });
      const joined = spawnSync(found.joinCommand(probe)[0]!, [...found.joinCommand(probe).slice(1), 'true'], {
        encoding: 'utf8',
        env: { PATH: '/usr/bin:/bin' },
        timeout: 10_000,
      });
      if (joined.status !== 0) return `cgroup ${found.version}: cannot join a group (${joined.stderr.trim()})`;
    } catch (err) {
      return `cgroup ${found.version}: ${(err as Error).message}`;
    } finally {
      probe?.remove();
    }
    return found;
  }

  describe(): string {
    return `cgroup ${this.version} under ${this.parents.join(' and ')}`;
  }

  /** A new group with `limits`; the caller puts the sandbox in it with `joinCommand` and calls `remove`. */
  create(limits: CgroupLimits): SandboxCgroup {
    const name = `sbx-${process.pid}-${crypto.randomBytes(6).toString('hex')}`;
    const groups = this.parents.map((p) => path.join(p, name));
    const remove = () => {
      const left = groups.filter((g) => !killAndRemove(g));
      if (!left.length) return;
      // Its processes are still dying (the kernel ends a pid namespace asynchronously): retry for a while; a
      // later worker's sweep removes what is still there.
      const started = Date.now();
      const retry = setInterval(() => {
        const still = left.filter((g) => !killAndRemove(g));
        if (!still.length || Date.now() - started > MAX_RETRY_MS) clearInterval(retry);
        left.splice(0, left.length, ...still);
      }, 100);
      retry.unref();
    };
    try {
      // recursive: v1's parent may have been removed meanwhile by another worker's exit (removeParentsAtExit).
      for (const g of groups) fs.mkdirSync(g, { recursive: this.version === 'v1' });
      if (this.version === 'v2') {
        const [g] = groups as [string];
        tryWrite(path.join(g, 'pids.max'), String(limits.processes));
        tryWrite(path.join(g, 'memory.max'), String(limits.memoryBytes));
        // No swap: the memory bound is RAM plus swap otherwise.
        if (fs.existsSync(path.join(g, 'memory.swap.max'))) tryWrite(path.join(g, 'memory.swap.max'), '0');
      } else {
        const [pids, memory] = groups as [string, string];
        tryWrite(path.join(pids, 'pids.max'), String(limits.processes));
        tryWrite(path.join(memory, 'memory.limit_in_bytes'), String(limits.memoryBytes));
        // No swap: swappiness 0 keeps the group's pages in RAM (the kernel kills at the limit instead of swapping
        // them out), which also holds where the kernel keeps no swap accounting (no memsw files); memsw (RAM
        // plus swap) must be at least the RAM limit, so it is set after it.
        tryWrite(path.join(memory, 'memory.swappiness'), '0');
        const memsw = path.join(memory, 'memory.memsw.limit_in_bytes');
        if (fs.existsSync(memsw)) tryWrite(memsw, String(limits.memoryBytes));
      }
    } catch (err) {
      remove();
      throw err;
    }
    return { procsFiles: groups.map((g) => path.join(g, 'cgroup.procs')), remove };
  }

  /** A command prefix that joins `group` and then execs the rest of the command line (host programs only). */
  joinCommand(group: SandboxCgroup): string[] {
    return [
      fs.existsSync('/usr/bin/sh') ? '/usr/bin/sh' : '/bin/sh',
      '-c',
      'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"',
      'tbt-sandbox-cgroup',
      ...group.procsFiles,
      '--',
    ];
  }

  /** Removes the (empty) parents: a cgroup with children cannot be removed, so ours would keep the cgroup we
   * run in from being removed when its owner is done with it. Busy ones (other workers' groups) stay. */
  removeParents(): void {
    for (const parent of this.parents)
      try {
        fs.rmdirSync(parent);
      } catch {
        // in use
      }
  }

  /** Removes empty groups left by workers that are gone (a live worker's groups, and busy ones, are kept). */
  sweep(): void {
    for (const parent of this.parents) {
      let names: string[];
      try {
        names = fs.readdirSync(parent);
      } catch {
        continue;
      }
      for (const name of names) {
        const owner = GROUP_NAME.exec(name)?.[1];
        if (!owner || isAlive(Number(owner))) continue;
        try {
          fs.rmdirSync(path.join(parent, name));
        } catch {
          // still has processes: left for a later sweep
        }
      }
    }
  }
}

let detected: SandboxCgroups | string | undefined;
let detectedFor: string | undefined;

/** `SandboxCgroups.detect`, once per process (per parent option). */
export function sandboxCgroups(options: CgroupOptions = {}): SandboxCgroups | string {
  const key = options.parent ?? '';
  if (detected === undefined || detectedFor !== key) {
    detected = SandboxCgroups.detect(options);
    detectedFor = key;
  }
  return detected;
}
