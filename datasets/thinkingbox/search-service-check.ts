import fs from 'node:fs';
import net from 'node:net';

/**
 * The loopback relay hands sandboxed tool servers a host service (the knowledge-base search on 127.0.0.1:8108).
 * Its API key is the public "Fake", so it proves nothing: any local process that binds the port first would
 * receive the tool servers' queries and answer them. So each relayed connection is checked once it is
 * connected and before any byte passes: the server end of the TCP connection, found in /proc/net/tcp{,6} by
 * its port pair, must belong to the worker's own uid or to root. Another local user's listener is refused.
 * A host address on another machine has no row here: it is trusted by the operator's configuration, as any
 * remote service is. Where /proc/net is missing (not Linux), a loopback address cannot be checked and is refused.
 */

export const trustedServiceUids = (): number[] => [process.getuid?.() ?? 0, 0];

/** uids owning the server end of a TCP connection from `localPort` to `remotePort` on this machine. */
export function connectionOwners(localPort: number, remotePort: number): number[] | undefined {
  const owners: number[] = [];
  let readAny = false;
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text: string;
    try {
      text = fs.readFileSync(table, 'utf8');
    } catch {
      continue;
    }
    readAny = true;
    for (const line of text.split('\n').slice(1)) {
      // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
      const cols = line.trim().split(/\s+/);
      if (cols.length < 8) continue;
      const [local, remote, uid] = [cols[1]!, cols[2]!, Number(cols[7])];
      const port = (address: string) => parseInt(address.slice(address.lastIndexOf(':') + 1), 16);
      // The server's row: its local port is the one we connected to, its remote port is ours.
      if (port(local) === remotePort && port(remote) === localPort) owners.push(uid);
    }
  }
  return readAny ? owners : undefined;
}

function isLoopback(address: string): boolean {
  return address === '::1' || /^(::ffff:)?127\./i.test(address);
}

/** Why the service at the other end of a connected socket is not trusted, or undefined when it is. */
export function untrustedService(socket: net.Socket): string | undefined {
  const { localPort, remoteAddress, remotePort } = socket;
  if (!localPort || !remoteAddress || !remotePort) return 'connection has no address';
  const owners = connectionOwners(localPort, remotePort);
  const trusted = trustedServiceUids();
  const where = `${remoteAddress}:${remotePort}`;
  if (owners === undefined)
    return isLoopback(remoteAddress)
      ? `${where}: /proc/net is not readable, the listener cannot be checked`
      : undefined;
  if (owners.length === 0) return isLoopback(remoteAddress) ? `${where}: no listener found in /proc/net` : undefined;
  const stranger = owners.find((uid) => !trusted.includes(uid));
  return stranger === undefined
    ? undefined
    : `${where} is served by uid ${stranger}, not by this worker's user or root: another local user's program`;
}

/**
 * `net.connect(port, host)` for a relay: the returned socket is destroyed, before any byte is written to it or
 * read from it, when the service at the other end is not trusted (`onRefused` gets the reason, once per call).
 * Write and pipe to it at once, as to any socket: pending writes wait for this check.
 */
export function connectTrustedService(
  host: string,
  port: number,
  onRefused: (reason: string) => void = warnOnce,
): net.Socket {
  const socket = net.connect(port, host);
  // Registered before any caller's listener (and before a pending write's flush), so it runs first.
  socket.once('connect', () => {
    const reason = untrustedService(socket);
    if (reason === undefined) return;
    onRefused(reason);
    socket.destroy(new Error(`search service refused: ${reason}`));
  });
  return socket;
}

const warned = new Set<string>();
function warnOnce(reason: string): void {
  if (warned.has(reason)) return;
  warned.add(reason);
  process.stderr.write(`[dataset-sandbox] loopback relay refused: ${reason}\n`);
}
