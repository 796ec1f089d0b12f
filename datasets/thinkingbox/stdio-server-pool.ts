import { createHash } from 'node:crypto';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { canonicalJson } from '../../core/canonical-json.ts';
import { InfrastructureError, errorMessage } from '../../core/errors.ts';
import { CappedStdioTransport, spawnedProcess, type ServerProcess } from './capped-stdio-transport.ts';
import { datasetSandbox, type DatasetSandbox, type SandboxMode } from './dataset-sandbox.ts';
import type { LaunchSpec } from './server-launch.ts';
import { ServerTemplate, templatable } from './server-template.ts';

/**
 * ThinkingBox tool servers: MCP servers the dataset ships, one fresh process per server per episode (that is
 * the isolation). Their start-up (an interpreter and the MCP SDK: about two seconds each) is paid once per
 * server by a template process that forks each episode's server (server-template.ts; `server_start: process`
 * spawns each one cold instead), and can be hidden further by a warm pool of started, initialised processes per
 * server; a process is used by one episode and then stopped, never reused. Each process runs in the dataset
 * sandbox (dataset-sandbox.ts) with its own scratch folder,
 * removed when it stops. A server that does not start, dies, does not answer within its timeout or writes more
 * than its output caps is an infrastructure error, never an agent failure.
 */

/** Bytes of stderr kept per process for error messages (its tail). */
const STDERR_KEPT = 4000;

export interface StartedServer {
  name: string;
  client: Client;
  /** The worker-side process (under the sandbox, `prlimit` running `bwrap`); killing it ends the whole tree. */
  pid: number | null;
  sandbox: SandboxMode;
  /** 'template': forked from the server's template; 'process': spawned cold. */
  started: 'template' | 'process';
  /** Milliseconds from spawn to a completed MCP initialize. */
  startMs: number;
  /** Last lines the process wrote to stderr (for error messages). */
  stderrTail(): string;
  stop(): Promise<void>;
}

export interface StdioServerPoolOptions {
  /** Started processes kept ready per server (0 = start on demand). */
  warm: number;
  startTimeoutMs?: number;
  /** Folders put first on PATH for every server command, besides each spec's own `pathPrefix`. */
  pathPrefix?: string[];
  /** Where the processes run (default: this process's sandbox, which refuses to run without isolation). */
  sandbox?: DatasetSandbox;
  /** 'template' (default): fork each server from a template process where the command allows it; 'process':
   * spawn each one cold. */
  serverStart?: 'template' | 'process';
}

/** How one server process comes to be: forked from a template, or spawned (with what to remove after it). */
interface Launch {
  open(): Promise<ServerProcess>;
  dispose(): void;
  mode: SandboxMode;
  started: StartedServer['started'];
}

async function startServer(name: string, spec: LaunchSpec, launch: Launch, options: StdioServerPoolOptions) {
  const started = Date.now();
  let stderr = '';
  const transport = new CappedStdioTransport(name, launch.open, (chunk: Buffer) => {
    // Only each chunk's tail is decoded: a long line on stderr never becomes a long string.
    stderr = (stderr + chunk.subarray(-STDERR_KEPT).toString('utf8')).slice(-STDERR_KEPT);
  });
  const stderrTail = () => stderr.trim().split('\n').slice(-5).join(' | ');
  const client = new Client({ name: 'tbt-thinkingbox', version: '1.0.0' });
  // The transport's close ends stdin, then sends SIGTERM and SIGKILL to the process it spawned; under the sandbox
  // that process's death takes the sandbox's pid namespace, and so every process the server started, with it.
  const stop = async () => {
    await client.close().catch(() => undefined);
    launch.dispose();
  };
  const timeoutMs = options.startTimeoutMs ?? 30_000;
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      client.connect(transport, { timeout: timeoutMs }),
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`no MCP initialize answer within ${timeoutMs} ms`)), timeoutMs);
      }),
    ]);
  } catch (err) {
    await stop();
    const tail = stderrTail();
    throw new InfrastructureError(
      `tool server '${name}' (${[spec.command, ...spec.args].join(' ')}) did not start: ` +
        `${errorMessage(err)}${tail ? `; stderr: ${tail}` : ''}`,
      { cause: err },
    );
  } finally {
    clearTimeout(timer);
  }
  const server: StartedServer = {
    name,
    client,
    pid: transport.pid,
    sandbox: launch.mode,
    started: launch.started,
    startMs: Date.now() - started,
    stderrTail,
    stop,
  };
  return server;
}

interface Idle {
  server: StartedServer;
  alive: boolean;
}

export class StdioServerPool {
  private readonly idle = new Map<string, Idle[]>();
  private readonly starting = new Map<string, number>();
  private readonly templates = new Map<string, Promise<ServerTemplate>>();
  /** Servers whose template could not start or fork here, with why (logged once; they start cold). */
  private readonly coldOnly = new Map<string, string>();
  private closed = false;

  constructor(private readonly options: StdioServerPoolOptions) {}

  private get sandbox(): DatasetSandbox {
    return this.options.sandbox ?? datasetSandbox();
  }

  /** A process spawned cold in the sandbox, as every server started before templates. */
  private coldLaunch(name: string, spec: LaunchSpec): Launch {
    // The spec's environment is complete (server-launch.ts): nothing of this process's own is added; the
    // sandbox adds only its fixed allow-list (HOME and TMPDIR in the scratch folder, a locale).
    const sandboxed = this.sandbox.prepare({
      command: spec.command,
      args: spec.args,
      env: spec.env,
      cwd: spec.cwd,
      readOnly: spec.readOnly,
      pathPrefix: spec.pathPrefix,
      label: name,
      network: 'loopback',
    });
    return {
      open: () => spawnedProcess(sandboxed),
      dispose: () => sandboxed.dispose(),
      mode: sandboxed.mode,
      started: 'process',
    };
  }

  /** The server's template, started on first use and replaced once it has ended or served its forks. */
  private template(key: string, name: string, spec: LaunchSpec): Promise<ServerTemplate> {
    const timeoutMs = this.options.startTimeoutMs ?? 30_000;
    const current = this.templates.get(key);
    const next = (current ?? Promise.reject(new Error('none'))).then(
      (t) => (t.usable ? t : (t.retire(), ServerTemplate.start(name, spec, this.sandbox, timeoutMs))),
      () => ServerTemplate.start(name, spec, this.sandbox, timeoutMs),
    );
    this.templates.set(key, next);
    return next;
  }

  private async start(key: string, name: string, given: LaunchSpec): Promise<StartedServer> {
    const spec = { ...given, pathPrefix: [...(given.pathPrefix ?? []), ...(this.options.pathPrefix ?? [])] };
    const timeoutMs = this.options.startTimeoutMs ?? 30_000;
    if (this.options.serverStart !== 'process' && !this.coldOnly.has(key) && templatable(spec, this.sandbox)) {
      try {
        const template = await this.template(key, name, spec);
        return await startServer(
          name,
          spec,
          { open: () => template.fork(timeoutMs), dispose: () => undefined, mode: 'bubblewrap', started: 'template' },
          this.options,
        );
      } catch (err) {
        if (this.closed) throw err; // its template was stopped with the pool
        // A template that cannot start or fork on this host (no nested user namespaces, say) costs speed, not
        // episodes: this server starts cold from now on, and the reason is logged once.
        process.stderr.write(
          `[tool-servers] '${name}': forking from a template failed, starting cold: ${errorMessage(err)}\n`,
        );
        this.coldOnly.set(key, errorMessage(err));
      }
    }
    return startServer(name, spec, this.coldLaunch(name, spec), this.options);
  }

  private key(name: string, spec: LaunchSpec): string {
    return `${name}:${createHash('sha256').update(canonicalJson(spec)).digest('hex').slice(0, 16)}`;
  }

  /** A started, initialised process for one episode: warm if one is ready, else started now. */
  async acquire(name: string, spec: LaunchSpec): Promise<StartedServer> {
    const key = this.key(name, spec);
    const ready = this.idle.get(key) ?? [];
    let server: StartedServer | undefined;
    while (ready.length && !server) {
      const next = ready.shift()!;
      if (next.alive) server = next.server;
      else await next.server.stop();
    }
    this.refill(key, name, spec);
    return server ?? this.start(key, name, spec);
  }

  /** Starts processes in the background until `warm` are ready or starting for this server. */
  private refill(key: string, name: string, spec: LaunchSpec): void {
    const ready = this.idle.get(key) ?? [];
    this.idle.set(key, ready);
    while (!this.closed && ready.length + (this.starting.get(key) ?? 0) < this.options.warm) {
      this.starting.set(key, (this.starting.get(key) ?? 0) + 1);
      this.start(key, name, spec)
        .then(
          (server) => {
            const entry: Idle = { server, alive: true };
            server.client.onclose = () => {
              entry.alive = false;
            };
            if (this.closed) void server.stop();
            else ready.push(entry);
          },
          () => undefined, // a warm start that fails is retried by the next acquire, which reports the error
        )
        .finally(() => this.starting.set(key, (this.starting.get(key) ?? 1) - 1));
    }
  }

  /** Warm processes ready now, per server (for progress and tests). */
  readyCounts(): Record<string, number> {
    return Object.fromEntries([...this.idle].map(([k, v]) => [k.split(':')[0]!, v.filter((e) => e.alive).length]));
  }

  async close(): Promise<void> {
    this.closed = true;
    const all = [...this.idle.values()].flat();
    this.idle.clear();
    await Promise.all(all.map((e) => e.server.stop()));
    const templates = [...this.templates.values()];
    this.templates.clear();
    for (const t of await Promise.allSettled(templates)) if (t.status === 'fulfilled') t.value.close();
  }
}
