import { spawn } from 'node:child_process';
import type { Readable, Writable } from 'node:stream';
import { deserializeMessage, serializeMessage } from '@modelcontextprotocol/sdk/shared/stdio.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import {
  ErrorCode,
  isJSONRPCErrorResponse,
  isJSONRPCRequest,
  isJSONRPCResultResponse,
  type JSONRPCMessage,
  type RequestId,
} from '@modelcontextprotocol/sdk/types.js';
import { InfrastructureError } from '../../core/errors.ts';
import { MiB, readCappedLines, type OutputCaps } from './capped-lines.ts';
import type { SandboxedCommand } from './dataset-sandbox.ts';

/**
 * Caps on what one tool server process writes on stdout (its MCP messages, one a line). A message is held whole
 * before it is parsed: 16 MiB holds any real tool answer or `__reserved__geteffects` state (an agent's whole
 * context is far smaller). The total bounds what a server flooding short messages costs the worker: an episode's
 * tools exchange far less than 64 MiB.
 */
export const TOOL_SERVER_OUTPUT_CAPS: OutputCaps = { lineBytes: 16 * MiB, totalBytes: 64 * MiB, unit: 'message' };

/**
 * MCP over a sandboxed process's stdin and stdout, as the SDK's StdioClientTransport does it, but stdout read by
 * readCappedLines (capped-lines.ts: the SDK's reader joins chunks until a newline, without a total cap) and
 * parsed by the SDK's own deserializeMessage. Over a cap the process is killed and the requests still open are
 * answered with an error naming the cap, as is every later one (the SDK would say only "Connection closed").
 */
/** A started server process as the transport sees it: a spawned child, or a server forked by a template. */
export interface ServerProcess {
  stdin: Writable;
  stdout: Readable;
  stderr: Readable;
  /** The worker-side pid that ends the server's whole sandbox when killed. */
  pid: number | null;
  kill(signal: NodeJS.Signals): void;
  /** Called once, when the process has ended (its output streams closed). */
  onExit(listener: () => void): void;
}

/** `run` spawned as a child of this process. */
export function spawnedProcess(
  run: Pick<SandboxedCommand, 'command' | 'args' | 'env' | 'cwd'>,
): Promise<ServerProcess> {
  return new Promise((resolve, reject) => {
    const child = spawn(run.command, run.args, { env: run.env, cwd: run.cwd, stdio: ['pipe', 'pipe', 'pipe'] });
    child.on('error', reject);
    child.on('spawn', () =>
      resolve({
        stdin: child.stdin,
        stdout: child.stdout,
        stderr: child.stderr,
        pid: child.pid ?? null,
        kill: (signal) => child.kill(signal),
        onExit: (listener) => child.on('close', listener),
      }),
    );
  });
}

export class CappedStdioTransport implements Transport {
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: (message: JSONRPCMessage) => void;
  private child?: ServerProcess;
  private exited = false;
  private closed = false;
  private fault?: InfrastructureError;
  /** Requests sent and not yet answered. */
  private readonly open = new Set<RequestId>();
  private readonly exitListeners: (() => void)[] = [];

  constructor(
    private readonly name: string,
    private readonly launch: () => Promise<ServerProcess>,
    private readonly onStderr: (chunk: Buffer) => void,
  ) {}

  get pid(): number | null {
    return this.child?.pid ?? null;
  }

  async start(): Promise<void> {
    const child = await this.launch();
    this.child = child;
    child.onExit(() => {
      this.exited = true;
      for (const listener of this.exitListeners.splice(0)) listener();
      // After a fault the connection stays open until close(), so later requests get the fault, not "Not connected".
      if (!this.fault) this.closeOnce();
    });
    child.stdin.on('error', (err: Error) => this.onerror?.(err));
    child.stderr.on('data', this.onStderr);
    readCappedLines(
      child.stdout,
      TOOL_SERVER_OUTPUT_CAPS,
      (line) => this.receive(line),
      (reason) => this.failWith(reason),
    );
  }

  private receive(line: string): void {
    let message: JSONRPCMessage;
    try {
      message = deserializeMessage(line);
    } catch (err) {
      this.onerror?.(err instanceof Error ? err : new Error(String(err)));
      return;
    }
    if ((isJSONRPCResultResponse(message) || isJSONRPCErrorResponse(message)) && message.id !== undefined)
      this.open.delete(message.id);
    this.onmessage?.(message);
  }

  private failWith(reason: string): void {
    this.fault = new InfrastructureError(`tool server '${this.name}' wrote ${reason}; it was stopped`);
    this.child?.kill('SIGKILL'); // the sandbox's whole pid namespace goes with it
    for (const id of this.open)
      this.onmessage?.({ jsonrpc: '2.0', id, error: { code: ErrorCode.InternalError, message: this.fault.message } });
    this.open.clear();
    this.onerror?.(this.fault);
  }

  send(message: JSONRPCMessage): Promise<void> {
    if (this.fault) return Promise.reject(this.fault);
    const stdin = this.child?.stdin;
    if (!stdin || this.exited) return Promise.reject(new Error('Not connected'));
    if (isJSONRPCRequest(message)) this.open.add(message.id);
    return new Promise((resolve) => {
      if (stdin.write(serializeMessage(message))) resolve();
      else stdin.once('drain', resolve);
    });
  }

  /** As the SDK's close: stdin ended, then SIGTERM, then SIGKILL, 2 s apart while the process lives. */
  async close(): Promise<void> {
    const child = this.child;
    if (child && !this.exited) {
      const exited = new Promise<void>((resolve) => this.exitListeners.push(resolve));
      const waitUpTo = (ms: number) =>
        Promise.race([exited, new Promise<void>((resolve) => setTimeout(resolve, ms).unref())]);
      child.stdin.end();
      await waitUpTo(2000);
      if (!this.exited) child.kill('SIGTERM');
      await waitUpTo(2000);
      if (!this.exited) child.kill('SIGKILL');
    }
    this.closeOnce();
  }

  private closeOnce(): void {
    if (this.closed) return;
    this.closed = true;
    this.onclose?.();
  }
}
