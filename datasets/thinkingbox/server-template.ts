import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { InfrastructureError } from '../../core/errors.ts';
import { connectionLimit, MiB, readCappedLines, type OutputCaps } from './capped-lines.ts';
import type { ServerProcess } from './capped-stdio-transport.ts';
import { helperPackageDir, SCRATCH_ARG, type DatasetSandbox, type SandboxedCommand } from './dataset-sandbox.ts';
import type { LaunchSpec } from './server-launch.ts';

/**
 * A tool server's template: one sandboxed process of the server's interpreter that has imported the MCP SDK
 * (about 1.2 s of a cold start's 2 s) and forks a fresh server per episode
 * (thinkingbox/tbt_thinkingbox/server_template.py). Each forked server enters namespaces of its own, with a
 * fresh scratch folder and /tmp, no capability, and (before it runs any dataset code) a cgroup of its own with
 * the sandbox's totals, moved there by this process; its stdin/stdout and stderr are unix-socket connections to
 * this process, authenticated by a one-time token. See docs/dataset-sandbox.md, "Server templates".
 */

/** Forks a template serves before it is replaced (its own CPU-seconds limit counts every fork). */
const FORKS_PER_TEMPLATE = 500;
const TEMPLATE_SCRIPT = path.join(helperPackageDir, 'tbt_thinkingbox', 'server_template.py');
const RELAY_SCRIPT = path.join(helperPackageDir, 'tbt_thinkingbox', 'loopback_forward.py');
/**
 * The template's stdout carries its `ready`, `forked` and `failed` lines (under 500 bytes each) and whatever a
 * preloaded dependency prints: a longer line or more output in all is the template misbehaving (third review,
 * finding 2: a 64 MiB line, rescanned per chunk, stalled the worker for seconds). It is stopped and replaced.
 */
const TEMPLATE_OUTPUT_CAPS: OutputCaps = { lineBytes: 64 * 1024, totalBytes: 4 * MiB, unit: 'line' };
/**
 * A connection to servers.sock first sends `TOKEN ROLE` and a newline (a forked server does so at once). One
 * that sends more, or nothing within the deadline, is closed; at most WAITING_CONNECTIONS wait for their header
 * at a time, more are closed at once (third review, finding 3: connections that never sent a header held a
 * descriptor each, 20,000 in 3 s). Forks pending at once need two each.
 */
const HEADER_CAPS: OutputCaps = { lineBytes: 200, totalBytes: 201, unit: 'header', maxLines: 1, timeoutMs: 5000 };
const WAITING_CONNECTIONS = 32;

/** Whether `spec` can be forked from a template: a Python interpreter running `-m module` or a script. */
export function templatable(spec: LaunchSpec, sandbox: DatasetSandbox): boolean {
  return (
    sandbox.mode === 'bubblewrap' &&
    sandbox.forkedServersBounded &&
    /^python(\d(\.\d+)?)?$/.test(path.basename(spec.command)) &&
    spec.args.length > 0 &&
    (spec.args[0] === '-m' ? spec.args.length >= 2 : !spec.args[0]!.startsWith('-'))
  );
}

interface Pending {
  io?: net.Socket;
  err?: net.Socket;
  nsPid?: number;
  /** Why the forked process gave up before it ran the server (it says so on the template's stdout). */
  failed?: string;
  settle(): void;
}

/** SIGKILL to a pid that may have ended meanwhile. */
function killQuietly(pid: number): void {
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    // already gone
  }
}

/** The pid namespace entries of a process (/proc/PID/status NSpid: host first, innermost last). */
function nsPids(pid: number): number[] {
  try {
    const line = /^NSpid:\s+(.+)$/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? '';
    return line.split(/\s+/).map(Number);
  } catch {
    return [];
  }
}

function childrenOf(pid: number): number[] {
  try {
    return fs.readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

/** The host pid of the descendant of `root` whose innermost pid is `inner` (breadth first, a few levels). */
function hostPidOf(root: number, inner: number, depth = 6): number | undefined {
  let level = [root];
  for (let d = 0; d < depth && level.length; d++) {
    for (const pid of level) if (nsPids(pid).at(-1) === inner && nsPids(pid).length > 1) return pid;
    level = level.flatMap(childrenOf);
  }
  return undefined;
}

export class ServerTemplate {
  private readonly pending = new Map<string, Pending>();
  private stderrTail = '';
  /** Why the template was stopped for what it wrote (over TEMPLATE_OUTPUT_CAPS). */
  private fault?: InfrastructureError;
  /** The stderr of each forked server still running: told why, should the template be stopped. */
  private readonly serverStderr = new Set<PassThrough>();
  /** Connections to servers.sock waiting for their header. */
  private readonly admit = connectionLimit(WAITING_CONNECTIONS);
  private templatePid?: number;
  private forks = 0;
  /** Forked servers still running: a retired template is stopped when the last one ends. */
  private active = 0;
  private retired = false;
  private ended = false;
  private closed = false;
  private readonly ready: Promise<void>;

  private constructor(
    readonly name: string,
    private readonly sandbox: DatasetSandbox,
    private readonly sandboxed: SandboxedCommand,
    private readonly socketDir: string,
    private readonly server: net.Server,
    private readonly child: ChildProcess,
    timeoutMs: number,
  ) {
    this.ready = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(this.failure(`no answer within ${timeoutMs} ms`)), timeoutMs);
      const onLine = (text: string) => {
        const line = text.trim().split(' ');
        if (line[0] === 'ready') {
          clearTimeout(timer);
          this.templatePid = hostPidOf(child.pid!, Number(line[1]));
          if (this.templatePid) resolve();
          else reject(this.failure(`its process (pid ${line[1]} inside) is not found under pid ${child.pid}`));
        } else if (line[0] === 'forked' || line[0] === 'failed') {
          const p = this.pending.get(line[1]!);
          if (!p) {
            // A server that failed after its start was handed over: its error goes with the template's stderr.
            if (line[0] === 'failed') this.stderrTail = `${this.stderrTail}\n${line.slice(2).join(' ')}`.slice(-4000);
            return;
          }
          if (line[0] === 'forked') p.nsPid = Number(line[2]);
          else p.failed = line.slice(2).join(' ');
          p.settle();
        }
      };
      readCappedLines(child.stdout!, TEMPLATE_OUTPUT_CAPS, onLine, (reason) => {
        clearTimeout(timer);
        reject(this.stopFor(reason));
      });
      child.on('close', () => {
        clearTimeout(timer);
        this.ended = true;
        reject(this.failure('it exited'));
        for (const p of this.pending.values()) p.settle();
      });
    });
    this.ready.catch(() => undefined);
    child.stderr!.on('data', (chunk: Buffer) => {
      this.stderrTail = (this.stderrTail + chunk.subarray(-4000).toString('utf8')).slice(-4000);
    });
    server.on('connection', (socket) => this.accept(socket));
  }

  /** Starts the template of `spec` in `sandbox`; resolves once it has imported the SDK. */
  static async start(name: string, spec: LaunchSpec, sandbox: DatasetSandbox, timeoutMs: number) {
    const socketDir = sandbox.makeSocketFolder(name);
    const socketPath = path.join(socketDir, 'servers.sock');
    const server = net.createServer({ pauseOnConnect: true });
    await new Promise<void>((resolve, reject) => server.once('error', reject).listen(socketPath, resolve));
    fs.chmodSync(socketPath, 0o777); // the sandbox's own uid connects to it
    const sandboxed = sandbox.prepare({
      command: spec.command,
      args: [
        TEMPLATE_SCRIPT,
        socketPath,
        SCRATCH_ARG,
        String(sandbox.limits.scratchMb * 1024 * 1024),
        sandbox.loopbackPorts.join(',') || '-',
        String(sandbox.limits.processes), // each forked server's RLIMIT_NPROC, in its own user namespace
        '--',
        spec.command,
        ...spec.args,
      ],
      env: spec.env,
      cwd: spec.cwd,
      readOnly: [...(spec.readOnly ?? []), TEMPLATE_SCRIPT, RELAY_SCRIPT, socketDir],
      pathPrefix: spec.pathPrefix,
      label: `${name}-template`,
      network: 'loopback',
      forksServers: true,
    });
    const child = spawn(sandboxed.command, sandboxed.args, {
      env: sandboxed.env,
      cwd: sandboxed.cwd,
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    child.on('error', () => undefined); // reported as 'it exited' by the close that follows
    const template = new ServerTemplate(name, sandbox, sandboxed, socketDir, server, child, timeoutMs);
    try {
      await template.ready;
    } catch (err) {
      template.close();
      throw err;
    }
    return template;
  }

  /** False once it has ended or served its forks: the pool then starts another and retires this one. */
  get usable(): boolean {
    return !this.ended && !this.retired && this.forks < FORKS_PER_TEMPLATE;
  }

  /** No more forks; stopped once the servers it forked have ended (stopping it would end them too). */
  retire(): void {
    this.retired = true;
    if (this.active === 0) this.close();
  }

  private failure(what: string): InfrastructureError {
    const tail = this.stderrTail.trim().split('\n').slice(-5).join(' | ');
    return new InfrastructureError(`tool server '${this.name}' template: ${what}${tail ? `; stderr: ${tail}` : ''}`);
  }

  /**
   * The template wrote over its caps: it is stopped at once, and with its sandbox every server it forked (each
   * one's stderr says why); the pool starts another on its next use. Returns the reason.
   */
  private stopFor(reason: string): InfrastructureError {
    this.fault = this.failure(`wrote ${reason}; it was stopped`);
    this.ended = true;
    process.stderr.write(`[tool-servers] ${this.fault.message}\n`);
    for (const stderr of this.serverStderr) if (!stderr.writableEnded) stderr.write(`\n${this.fault.message}\n`);
    this.child.kill('SIGKILL');
    return this.fault;
  }

  private accept(socket: net.Socket): void {
    socket.on('error', () => undefined);
    const release = this.admit(socket); // at most WAITING_CONNECTIONS wait for a header; others closed at once
    if (!release) return;
    const onHeader = (header: string) => {
      release();
      const [token, role] = header.split(' ');
      const p = token ? this.pending.get(token) : undefined;
      if (!p || (role !== 'io' && role !== 'err') || p[role]) return socket.destroy();
      p[role] = socket;
      p.settle();
    };
    // Over a cap or past the deadline the reader destroys the socket.
    readCappedLines(socket, HEADER_CAPS, onHeader, () => undefined);
    socket.resume(); // paused on connect: nothing is read before the reader listens
  }

  /** A fresh server forked from the template, moved into its own cgroup, then let go. */
  async fork(timeoutMs: number): Promise<ServerProcess> {
    await this.ready;
    if (this.ended) throw this.fault ?? this.failure('it exited');
    this.forks++;
    const token = randomBytes(16).toString('hex');
    const p: Pending = { settle: () => undefined };
    this.pending.set(token, p);
    try {
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(this.failure(`no forked server within ${timeoutMs} ms`)), timeoutMs);
        p.settle = () => {
          if (this.ended) reject(this.fault ?? this.failure('it exited'));
          else if (p.failed) reject(this.failure(`the forked server failed: ${p.failed}`));
          else if (p.io && p.err && p.nsPid) resolve();
          else return;
          clearTimeout(timer);
        };
        this.child.stdin!.write(`${token}\n`);
      });
    } catch (err) {
      p.io?.destroy();
      p.err?.destroy();
      throw err;
    } finally {
      this.pending.delete(token);
    }
    const { io, err } = p as Required<Pending>;
    const pid = (await this.findChild(p.nsPid!)) ?? 0;
    let group;
    try {
      if (!pid) throw this.failure(`forked server (pid ${p.nsPid} inside) not found`);
      group = this.sandbox.adopt(pid);
    } catch (e) {
      if (pid) killQuietly(pid);
      io.destroy();
      err.destroy();
      throw e;
    }
    let exited = false;
    this.active++;
    const exitListeners: (() => void)[] = [];
    // The socket closes when the server's last process does (the forked process holds it until its server ends).
    const stdout = new PassThrough();
    io.on('data', (chunk) => stdout.write(chunk));
    io.on('close', () => {
      exited = true;
      stdout.end();
      group?.remove();
      for (const listener of exitListeners.splice(0)) listener();
      if (--this.active === 0 && this.retired) this.close();
    });
    const stderr = new PassThrough(); // holds what the server writes before the transport listens
    err.pipe(stderr);
    this.serverStderr.add(stderr);
    err.on('close', () => this.serverStderr.delete(stderr));
    io.resume();
    io.write('go\n');
    return {
      stdin: io,
      stdout,
      stderr,
      pid,
      kill: () => {
        // The forked process: its death takes the server (pid 1 of its namespace, by PDEATHSIG) and all it started.
        if (!exited) killQuietly(pid);
        group?.remove();
      },
      onExit: (listener) => (exited ? listener() : exitListeners.push(listener)),
    };
  }

  /** The host pid of the template's child `nsPid`: it exists before the template reports it, so a few tries. */
  private async findChild(nsPid: number): Promise<number | undefined> {
    for (let i = 0; i < 20; i++) {
      const found = childrenOf(this.templatePid!).find((pid) => nsPids(pid).at(-1) === nsPid);
      if (found) return found;
      await new Promise((r) => setTimeout(r, 5));
    }
    return undefined;
  }

  /** Stops the template (and with its pid namespace every server it forked) and removes its sockets. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.ended = true;
    this.child.stdin?.end();
    this.child.kill('SIGKILL');
    this.server.close();
    this.sandboxed.dispose();
    fs.rmSync(this.socketDir, { recursive: true, force: true });
  }
}
