import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { readEnvironment } from '../config/environment.ts';
import { hostileEscape, type HostileEscape } from '../test/fixtures/dataset-sandbox/hostile-escape.ts';

/**
 * Run inside a rollout worker container by scripts/deploy-test.sh (`podman exec`, so as the container's user, with
 * its environment and under its capabilities, seccomp profile and /proc settings): the hostile tool server of the
 * sandbox tests (test/fixtures/dataset-sandbox/hostile_server.py) started the way an episode of an imported dataset
 * starts its tool servers (a StdioServerPool on this process's dataset sandbox, the loopback relay included), and
 * its `escape` tool called. Contained means: none of the container's secrets in its environment or anywhere in its
 * /proc, its own pid namespace (bubblewrap its pid 1, no process of the container in view), no connection to a
 * listener on the container's loopback, no write outside its scratch folder as the container sees it (its own /tmp
 * is a tmpfs of the sandbox), and no grandchild left once the server is stopped. Prints `hostile: contained ...`;
 * exits 1 naming each way out it found.
 */

const secretNames = ['DATABASE_URL', 'TBT_AGENT_DB_PASSWORD', 'TBT_READER_DB_PASSWORD', 'TBT_POLICY_API_KEY'];

/** Pids of this container whose command line holds `token` (the container's view, outside the sandbox's). */
function processesWith(token: string): string[] {
  return fs.readdirSync('/proc').filter((p) => {
    if (!/^\d+$/.test(p)) return false;
    try {
      return fs.readFileSync(`/proc/${p}/cmdline`, 'utf8').includes(token);
    } catch {
      return false;
    }
  });
}

/** Each way out the attempt found; empty when contained. */
function waysOut(found: HostileEscape, secrets: [string, string][], targets: string[], connections: number): string[] {
  const out: string[] = [];
  const texts: [string, string][] = [
    ['its own environment', JSON.stringify(found.own_environ)],
    ['/proc/$PPID/environ', found.parent_environ],
    ...Object.entries(found.proc_environ).map(([p, t]): [string, string] => [`/proc/${p}/environ`, t]),
    ...Object.entries(found.proc_cmdline).map(([p, t]): [string, string] => [`/proc/${p}/cmdline`, t]),
  ];
  for (const [where, text] of texts)
    for (const [name, value] of secrets) if (text.includes(value)) out.push(`${where} shows ${name}`);
  // Its own pid namespace: pid 1 is bubblewrap and no process of the container (this probe, the worker) is in view.
  // (How many it sees varies: the fork server of ThinkingBox tool servers, the loopback relay, the grandchild.)
  const first = (found.proc_cmdline['1'] ?? '').split('\0')[0] ?? '';
  if (!first.endsWith('bwrap')) out.push(`its pid 1 is ${first || 'not visible'}, not bubblewrap: no pid namespace`);
  const container = Object.entries(found.proc_cmdline).filter(([, t]) => /deploy-hostile-probe|workers\//.test(t));
  if (container.length > 0) out.push(`sees the container's processes ${container.map(([p]) => p).join(', ')}`);
  for (const how of ['socket_connect', 'subprocess_connect', 'bash_connect'] as const)
    if (found[how] === 'connected') out.push(`${how}: reached the container's loopback`);
  if (connections > 0) out.push(`${connections} connection(s) reached the listener`);
  // What the container sees is what counts: the sandbox's own /tmp is a tmpfs of its own, where a write succeeds.
  for (const t of targets) {
    if (fs.existsSync(t)) out.push(`wrote ${t}`);
    else if (found.writes[t] === 'written' && !t.startsWith('/tmp/')) out.push(`wrote ${t} (not seen here)`);
  }
  if (found.grandchild !== 'ready') out.push(`its grandchild did not start (${found.grandchild ?? 'no answer'})`);
  return out;
}

async function run(): Promise<void> {
  const secrets = secretNames.flatMap((n): [string, string][] => (process.env[n] ? [[n, process.env[n]!]] : []));
  if (secrets.length < 2) throw new Error(`the container's secrets are not in this environment (${secretNames})`);
  let connections = 0;
  const listener = net.createServer((socket) => {
    connections += 1;
    socket.end();
  });
  await new Promise<void>((resolve) => listener.listen(0, '127.0.0.1', resolve));
  const port = (listener.address() as net.AddressInfo).port;
  const tag = crypto.randomUUID();
  // Folders this user can write outside the sandbox (checked first, so "not written" is the sandbox's doing).
  const targets = ['/tmp', readEnvironment().TBT_STATE_DIR].map((d) => path.join(d, `hostile-${tag}`));
  for (const t of targets) {
    fs.writeFileSync(t, 'control');
    fs.rmSync(t);
  }
  const token = `tbt-hostile-${tag}`;
  try {
    const found = await hostileEscape({ port, targets, token, env: {}, timeoutMs: 120_000 });
    let left = processesWith(token);
    for (let i = 0; i < 100 && left.length > 0; i++) {
      await new Promise((r) => setTimeout(r, 100));
      left = processesWith(token);
    }
    const out = waysOut(found, secrets, targets, connections);
    if (left.length > 0) out.push(`its grandchild outlived the server: pids ${left.join(', ')}`);
    if (out.length > 0) throw new Error(`the hostile tool server got out: ${out.join('; ')}`);
    const seen = Object.keys(found.proc_cmdline).length;
    console.log(
      `hostile: contained (${secrets.length} secrets in no environ or /proc of its ${seen} processes, pid 1 bwrap, ` +
        `loopback ${found.socket_connect}, writes ${Object.values(found.writes).join(' ')} (none in the ` +
        `container), grandchild gone)`,
    );
  } finally {
    await new Promise<void>((resolve) => listener.close(() => resolve()));
  }
}

run().catch((err: unknown) => {
  console.error(err instanceof Error ? err.message : String(err));
  process.exit(1);
});
