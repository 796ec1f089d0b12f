import { spawn } from 'node:child_process';
import dns from 'node:dns';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { readEnvironment, repoRoot } from '../../config/environment.ts';
import { BadInputError, InfrastructureError } from '../../core/errors.ts';

/**
 * The one way out of the sandbox while `tbt tasks prepare-env` installs a dataset's requirements: an HTTP proxy
 * on a unix socket that opens tunnels (CONNECT) and forwards plain-HTTP requests only to the package index's
 * `host:port`s, and refuses everything else. Inside the sandbox our loopback relay listens on 127.0.0.1:PORT
 * and passes each connection to this socket; pip finds it through HTTPS_PROXY/HTTP_PROXY.
 *
 * It runs as a child process of its own (this file, run as a script), not in the worker's event loop: the install
 * is a synchronous spawn, which would stall an in-process server. It exits when its parent closes its stdin.
 *
 * An allowed host is reached only at a public address (third review, finding 5: with --allow-urls the dataset's
 * URLs name hosts, and 127.0.0.1 or the metadata address gave the sandbox a tunnel to the worker's local services).
 * The proxy resolves the host once, refuses it when any of its addresses is not public (addressRefusal), and
 * connects to the address it checked, so a second lookup (DNS rebinding) never decides. Hosts the operator names
 * (their own index settings, TBT_INSTALL_PROXY_PRIVATE_HOSTS) may be private.
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

/** Address ranges that are not the public internet, by what they are (IANA's special-purpose registries). */
const NOT_PUBLIC: [why: string, cidrs: string[]][] = [
  ['loopback', ['127.0.0.0/8', '::1/128']],
  ['unspecified, this host', ['0.0.0.0/8', '::/128']],
  ['private', ['10.0.0.0/8', '172.16.0.0/12', '192.168.0.0/16', 'fc00::/7']],
  ['link-local (cloud metadata)', ['169.254.0.0/16', 'fe80::/10', 'fec0::/10']],
  ['carrier-grade NAT', ['100.64.0.0/10']],
  ['multicast', ['224.0.0.0/4', 'ff00::/8']],
  ['reserved, broadcast', ['240.0.0.0/4']],
  ['special-purpose', ['192.0.0.0/24', '192.88.99.0/24', '198.18.0.0/15', '::/96', '100::/64']],
  ['documentation', ['192.0.2.0/24', '198.51.100.0/24', '203.0.113.0/24', '2001:db8::/32']],
  ['local NAT64', ['64:ff9b:1::/48']],
];

/** One block list per reason. IPv4-mapped IPv6 (::ffff:a.b.c.d) is checked as the IPv4 address (net.BlockList
 * does this itself); NAT64 (64:ff9b::/96) and 6to4 (2002::/16) addresses by the IPv4 address inside them. */
const notPublic = NOT_PUBLIC.map(([why, cidrs]) => {
  const list = new net.BlockList();
  for (const cidr of cidrs) {
    const [address, prefix] = cidr.split('/') as [string, string];
    const bits = Number(prefix);
    if (net.isIPv6(address)) {
      list.addSubnet(address, bits, 'ipv6');
      continue;
    }
    list.addSubnet(address, bits, 'ipv4');
    const [a, b, c, d] = address.split('.').map(Number) as [number, number, number, number];
    const inside = `${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
    list.addSubnet(`64:ff9b::${inside}`, 96 + bits, 'ipv6');
    list.addSubnet(`2002:${inside}::`, 16 + bits, 'ipv6');
  }
  return { why, list };
});

let ownAddresses: net.BlockList | undefined;

/** Why the proxy must not connect to `address` (an IP address), or undefined when it is a public one. The host's
 * own interface addresses count as not public too: a local service listening on all of them is reached there. */
export function addressRefusal(address: string): string | undefined {
  const family = net.isIP(address) === 6 ? 'ipv6' : net.isIP(address) === 4 ? 'ipv4' : undefined;
  if (!family) return 'not an IP address';
  for (const { why, list } of notPublic) if (list.check(address, family)) return why;
  if (!ownAddresses) {
    ownAddresses = new net.BlockList();
    for (const i of Object.values(os.networkInterfaces()).flat())
      if (i) ownAddresses.addAddress(i.address.replace(/%.*$/, ''), i.family === 'IPv6' ? 'ipv6' : 'ipv4');
  }
  return ownAddresses.check(address, family) ? 'an address of this host' : undefined;
}

/** TBT_INSTALL_PROXY_PRIVATE_HOSTS (`HOST[:PORT],...`, IPv6 in brackets) as `host:port` or `host:*`. */
export function parsePrivateHosts(text: string): string[] {
  return text
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)
    .map((entry) => {
      const m = /^(?:\[([0-9a-fA-F:.]+)\]|([A-Za-z0-9.-]+))(?::(\d{1,5}))?$/.exec(entry);
      if (!m || (m[1] !== undefined && !net.isIPv6(m[1])))
        throw new BadInputError(`TBT_INSTALL_PROXY_PRIVATE_HOSTS: '${entry}' is not HOST or HOST:PORT`);
      return `${(m[1] ?? m[2]!).toLowerCase()}:${m[3] === undefined ? '*' : Number(m[3])}`;
    });
}

/** The private hosts the operator allows the install to reach (TBT_INSTALL_PROXY_PRIVATE_HOSTS). */
export function operatorPrivateHosts(): string[] {
  return parsePrivateHosts(readEnvironment().TBT_INSTALL_PROXY_PRIVATE_HOSTS);
}

/** The address to connect `host` to: every address it resolves to checked, unless the operator allowed it. */
async function checkedAddress(host: string, privateAllowed: boolean): Promise<{ address?: string; why?: string }> {
  let found: dns.LookupAddress[];
  try {
    found = await dns.promises.lookup(host, { all: true, verbatim: true });
  } catch (err) {
    return { why: `cannot resolve ${host} (${(err as NodeJS.ErrnoException).code ?? 'error'})` };
  }
  if (!found.length) return { why: `cannot resolve ${host}` };
  if (!privateAllowed)
    for (const { address } of found) {
      const why = addressRefusal(address);
      if (why)
        return {
          why:
            `${host} is at ${address} (${why}), not a public address; an operator allows a private host with ` +
            'TBT_INSTALL_PROXY_PRIVATE_HOSTS',
        };
    }
  return { address: found[0]!.address };
}

/** `host:port` of a CONNECT target or `undefined` when malformed. */
function connectTarget(target: string): string | undefined {
  const m = /^\[?([A-Za-z0-9.:-]+?)\]?:(\d{1,5})$/.exec(target);
  return m ? `${m[1]!.toLowerCase()}:${Number(m[2])}` : undefined;
}

function serve(socketPath: string, logFile: string, allowed: Set<string>, privateHosts: Set<string>): void {
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
      const host = destination.slice(0, colon);
      const privateAllowed = privateHosts.has(destination) || privateHosts.has(`${host}:*`);
      void checkedAddress(host, privateAllowed).then(({ address, why }) => {
        if (client.destroyed) return;
        if (address) forward(address, Number(destination.slice(colon + 1)), method === 'CONNECT', first);
        else refuse(client, '403 Forbidden', `refused ${method} ${destination}: ${why}`);
      });
    };
    /** Connects to the checked address itself (no second lookup) and joins the two ends. */
    const forward = (address: string, port: number, tunnel: boolean, first: Buffer) => {
      const upstream = net.connect({ host: address, port });
      upstream.setTimeout(IDLE_MS, () => upstream.destroy());
      const close = () => {
        client.destroy();
        upstream.destroy();
      };
      upstream.on('error', close).on('close', close);
      client.on('close', close);
      upstream.on('connect', () => {
        if (tunnel) client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
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

/**
 * Starts the proxy in `dir` (made here, mode 0755) for `allowed` (`host:port`); waits until it listens.
 * `privateHosts` (`host:port` or `host:*`) may be at private addresses; default TBT_INSTALL_PROXY_PRIVATE_HOSTS.
 */
export function startIndexProxy(dir: string, allowed: string[], options: { privateHosts?: string[] } = {}): IndexProxy {
  const privateHosts = options.privateHosts ?? operatorPrivateHosts();
  fs.mkdirSync(dir, { recursive: true, mode: 0o755 });
  fs.chmodSync(dir, 0o755);
  const socket = path.join(dir, 'index-proxy.sock');
  const logFile = path.join(dir, 'index-proxy.log');
  fs.writeFileSync(logFile, '');
  const script = fileURLToPath(import.meta.url);
  const config = JSON.stringify({ allowed, privateHosts });
  const child = spawn(process.execPath, ['--import', 'tsx', script, socket, logFile, config], {
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
  const [socketPath, logFile, config] = process.argv.slice(2);
  const { allowed, privateHosts } = JSON.parse(config!) as { allowed: string[]; privateHosts: string[] };
  serve(socketPath!, logFile!, new Set(allowed), new Set(privateHosts));
}
