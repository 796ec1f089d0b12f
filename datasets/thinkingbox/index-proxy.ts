import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { repoRoot } from '../../config/environment.ts';
import { InfrastructureError } from '../../core/errors.ts';

/**
 * The one way out of the sandbox while `tbt tasks prepare-env` installs a dataset's requirements: an HTTP proxy
 * on a unix socket that opens tunnels (CONNECT) and forwards plain-HTTP requests only to the package index's
 * `host:port`s, and refuses everything else. Inside the sandbox our loopback relay listens on 127.0.0.1:PORT
 * and passes each connection to this socket; pip finds it through HTTPS_PROXY/HTTP_PROXY.
 *
 * It runs as a child process of its own (this file, run as a script), not in the worker's event loop: the install
 * is a synchronous spawn, which would stall an in-process server. It exits when its parent closes its stdin.
 */

export interface IndexProxy {
  socket: string;
  /** The requests it refused (`CONNECT host:port`), for the error message when the install fails. */
  refusals(): string[];
  stop(): void;
}

const HEAD_LIMIT = 16 * 1024;
const IDLE_MS = 5 * 60_000;

/** `host:port` of a URL as the proxy compares it (lower-case, default ports filled in). */
export function hostPort(url: URL): string {
  const port = url.port || (url.protocol === 'http:' ? '80' : '443');
  return `${url.hostname.toLowerCase().replace(/^\[|\]$/g, '')}:${port}`;
}

/** `host:port` of a CONNECT target or `undefined` when malformed. */
function connectTarget(target: string): string | undefined {
  const m = /^\[?([A-Za-z0-9.:-]+?)\]?:(\d{1,5})$/.exec(target);
  return m ? `${m[1]!.toLowerCase()}:${Number(m[2])}` : undefined;
}

function serve(socketPath: string, logFile: string, allowed: Set<string>): void {
  const refuse = (client: net.Socket, status: string, what: string) => {
    fs.appendFileSync(logFile, `${what}\n`);
    client.end(`HTTP/1.1 ${status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n`);
  };
  const server = net.createServer((client) => {
    client.setTimeout(IDLE_MS, () => client.destroy());
    client.on('error', () => client.destroy());
    let head = Buffer.alloc(0);
    const onData = (chunk: Buffer) => {
      head = Buffer.concat([head, chunk]);
      const end = head.indexOf('\r\n\r\n');
      if (end < 0) {
        if (head.length > HEAD_LIMIT) refuse(client, '431 Request Header Fields Too Large', 'oversized request');
        return;
      }
      client.off('data', onData);
      client.pause();
      const lines = head.subarray(0, end).toString('latin1').split('\r\n');
      const [method, target] = lines[0]!.split(' ');
      let destination: string | undefined;
      let first: Buffer;
      if (method === 'CONNECT') {
        destination = connectTarget(target ?? '');
        first = head.subarray(end + 4);
      } else {
        let url: URL | undefined;
        try {
          url = new URL(target ?? '');
        } catch {
          url = undefined;
        }
        if (url?.protocol === 'http:') destination = hostPort(url);
        // Origin-form request line to the server; the rest of the request passes as it came.
        const originLine = url ? `${method} ${url.pathname}${url.search} ${lines[0]!.split(' ')[2] ?? 'HTTP/1.1'}` : '';
        first = Buffer.concat([Buffer.from(`${originLine}\r\n`, 'latin1'), head.subarray(head.indexOf('\r\n') + 2)]);
      }
      if (!destination || !allowed.has(destination)) {
        refuse(client, '403 Forbidden', `refused ${method} ${String(target).slice(0, 200)}`);
        return;
      }
      const colon = destination.lastIndexOf(':');
      const upstream = net.connect(Number(destination.slice(colon + 1)), destination.slice(0, colon));
      upstream.setTimeout(IDLE_MS, () => upstream.destroy());
      const close = () => {
        client.destroy();
        upstream.destroy();
      };
      upstream.on('error', close).on('close', close);
      client.on('close', close);
      upstream.on('connect', () => {
        if (method === 'CONNECT') client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
        if (first.length) upstream.write(first);
        client.pipe(upstream).pipe(client);
        client.resume();
      });
    };
    client.on('data', onData);
  });
  // Bound under a temporary name and renamed once open to all: the socket appears only when it can be used.
  const binding = `${socketPath}.new`;
  server.listen(binding, () => {
    fs.chmodSync(binding, 0o777); // the sandbox's own uid connects to it
    fs.renameSync(binding, socketPath);
  });
  process.stdin.on('end', () => process.exit(0)).on('close', () => process.exit(0));
  process.stdin.resume();
}

const sleep = (ms: number) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);

/** Starts the proxy in `dir` (made here, mode 0755) for `allowed` (`host:port`); waits until it listens. */
export function startIndexProxy(dir: string, allowed: string[]): IndexProxy {
  fs.mkdirSync(dir, { recursive: true, mode: 0o755 });
  fs.chmodSync(dir, 0o755);
  const socket = path.join(dir, 'index-proxy.sock');
  const logFile = path.join(dir, 'index-proxy.log');
  fs.writeFileSync(logFile, '');
  const script = fileURLToPath(import.meta.url);
  const child = spawn(process.execPath, ['--import', 'tsx', script, socket, logFile, ...allowed], {
    cwd: repoRoot,
    stdio: ['pipe', 'ignore', 'ignore'],
    env: { PATH: '/usr/bin:/bin', LANG: 'C.UTF-8' },
  });
  const stop = () => {
    child.stdin?.destroy();
    child.kill('SIGKILL');
  };
  for (let waited = 0; !fs.existsSync(socket); waited += 50) {
    if (waited > 30_000 || child.exitCode !== null) {
      stop();
      throw new InfrastructureError(`the package index proxy did not start (${socket})`);
    }
    sleep(50);
  }
  return {
    socket,
    refusals: () => fs.readFileSync(logFile, 'utf8').split('\n').filter(Boolean),
    stop,
  };
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const [socketPath, logFile, ...allowed] = process.argv.slice(2);
  serve(socketPath!, logFile!, new Set(allowed));
}
