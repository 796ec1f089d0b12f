import { createHash } from 'node:crypto';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { canonicalJson } from '../../core/canonical-json.ts';
import { InfrastructureError, errorMessage } from '../../core/errors.ts';
import { CappedStdioTransport } from './capped-stdio-transport.ts';
import { datasetSandbox, type DatasetSandbox, type SandboxMode } from './dataset-sandbox.ts';
import type { LaunchSpec } from './server-launch.ts';

/**
 * ThinkingBox tool servers: MCP servers the dataset ships, one fresh process per server per episode (that is
 * the isolation). Their start-up (an interpreter and the MCP SDK: about a second each) is hidden by a warm
 * pool of started, initialised processes per server; a process is used by one episode and then stopped,
 * never reused. Each process runs in the dataset sandbox (dataset-sandbox.ts) with its own scratch folder,
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
}

async function startServer(name: string, spec: LaunchSpec, options: StdioServerPoolOptions): Promise<StartedServer> {
  const started = Date.now();
  // The spec's environment is complete (server-launch.ts): nothing of this process's own is added; the
  // sandbox adds only its fixed allow-list (HOME and TMPDIR in the scratch folder, a locale).
  const sandboxed = (options.sandbox ?? datasetSandbox()).prepare({
    command: spec.command,
    args: spec.args,
    env: spec.env,
    cwd: spec.cwd,
    readOnly: spec.readOnly,
    pathPrefix: [...(spec.pathPrefix ?? []), ...(options.pathPrefix ?? [])],
    label: name,
    network: 'loopback',
  });
  let stderr = '';
  const transport = new CappedStdioTransport(name, sandboxed, (chunk: Buffer) => {
    // Only each chunk's tail is decoded: a long line on stderr never becomes a long string.
    stderr = (stderr + chunk.subarray(-STDERR_KEPT).toString('utf8')).slice(-STDERR_KEPT);
  });
  const stderrTail = () => stderr.trim().split('\n').slice(-5).join(' | ');
  const client = new Client({ name: 'tbt-thinkingbox', version: '1.0.0' });
  // The transport's close ends stdin, then sends SIGTERM and SIGKILL to the process it spawned; under the sandbox
  // that process's death takes the sandbox's pid namespace, and so every process the server started, with it.
  const stop = async () => {
    await client.close().catch(() => undefined);
    sandboxed.dispose();
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
  return { name, client, pid: transport.pid, sandbox: sandboxed.mode, startMs: Date.now() - started, stderrTail, stop };
}

interface Idle {
  server: StartedServer;
  alive: boolean;
}

export class StdioServerPool {
  private readonly idle = new Map<string, Idle[]>();
  private readonly starting = new Map<string, number>();
  private closed = false;

  constructor(private readonly options: StdioServerPoolOptions) {}

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
    return server ?? startServer(name, spec, this.options);
  }

  /** Starts processes in the background until `warm` are ready or starting for this server. */
  private refill(key: string, name: string, spec: LaunchSpec): void {
    const ready = this.idle.get(key) ?? [];
    this.idle.set(key, ready);
    while (!this.closed && ready.length + (this.starting.get(key) ?? 0) < this.options.warm) {
      this.starting.set(key, (this.starting.get(key) ?? 0) + 1);
      startServer(name, spec, this.options)
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
  }
}
