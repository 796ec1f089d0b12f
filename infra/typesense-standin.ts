import net from 'node:net';
import path from 'node:path';
import { repoRoot, type Environment } from '../config/environment.ts';
import { portInUse, spawnDetached, waitFor } from './daemon.ts';
import { stopVerifiedProcess, verifiedPid, type ExpectedProcess } from './pid-identity.ts';
import type { ServiceStatus } from './temporal-dev-server.ts';

/**
 * The knowledge-base search the bench's `search_policy` tools call: a Typesense server on 127.0.0.1:8108 with
 * API key "Fake" (the servers' fixed defaults). Locally and in CI it is our lexical stand-in
 * (thinkingbox/tbt_thinkingbox/typesense_standin.py, SQLite FTS5 BM25); in production the Typesense service of
 * docker/compose.yaml. Collections are per tool-server session (random names), so one server can be shared
 * by every worktree and worker on the machine: if the port already answers Typesense's /health, it is used.
 */

export const TYPESENSE_PORT = 8108;
export const TYPESENSE_API_KEY = 'Fake';

function files(env: Environment) {
  const dir = path.join(env.TBT_STATE_DIR, 'typesense');
  return { log: path.join(dir, 'standin.log'), pid: path.join(dir, 'standin.pid') };
}

/**
 * The stand-in's arguments: its port, key and caps. It is one process shared by every sandbox on the machine,
 * outside their limits, so what a dataset may make it hold is capped (third review, finding 12); the caps come
 * from `TBT_TYPESENSE_MAX_*` (config/environment.ts) and each refusal names its flag and variable.
 */
export function typesenseStandinArgs(env: Environment, port = TYPESENSE_PORT): string[] {
  const caps: [string, number][] = [
    ['--max-body-mb', env.TBT_TYPESENSE_MAX_BODY_MB],
    ['--max-import-documents', env.TBT_TYPESENSE_MAX_IMPORT_DOCUMENTS],
    ['--max-collection-documents', env.TBT_TYPESENSE_MAX_COLLECTION_DOCUMENTS],
    ['--max-collection-mb', env.TBT_TYPESENSE_MAX_COLLECTION_MB],
    ['--max-collections', env.TBT_TYPESENSE_MAX_COLLECTIONS],
    ['--max-total-mb', env.TBT_TYPESENSE_MAX_TOTAL_MB],
  ];
  return ['--port', String(port), '--api-key', TYPESENSE_API_KEY, ...caps.flatMap(([f, v]) => [f, String(v)])];
}

/** The stand-in `startTypesense` runs: its module, on our port. */
const standinProcess: ExpectedProcess = {
  argvIncludes: ['tbt_thinkingbox.typesense_standin', '--port', String(TYPESENSE_PORT)],
};

export async function typesenseHealthy(port = TYPESENSE_PORT, timeoutMs = 2000): Promise<boolean> {
  try {
    const res = await fetch(`http://127.0.0.1:${port}/health`, { signal: AbortSignal.timeout(timeoutMs) });
    return res.ok && ((await res.json()) as { ok?: boolean }).ok === true;
  } catch {
    return false;
  }
}

export async function typesenseStatus(env: Environment): Promise<ServiceStatus> {
  const pid = verifiedPid(files(env).pid, standinProcess);
  const running = await typesenseHealthy();
  const detail =
    `127.0.0.1:${TYPESENSE_PORT} (${pid ? `stand-in pid ${pid}` : running ? 'shared, not ours' : '-'}; ` +
    `lexical-only stand-in)`;
  return { name: 'typesense', running, managed: pid !== undefined, detail };
}

/** Starts the stand-in unless a Typesense already answers on the port. Returns true when this call started it. */
export async function startTypesense(env: Environment): Promise<boolean> {
  if (await typesenseHealthy()) return false;
  if (await portInUse(TYPESENSE_PORT)) {
    // A stand-in shared with another checkout may answer slowly on a busy machine: give it time before giving up.
    for (let i = 0; i < 5; i++) if (await typesenseHealthy(TYPESENSE_PORT, 5000)) return false;
    // Only the ThinkingBox bench's knowledge-base search needs it: the rest of the stack starts without it.
    process.stderr.write(
      `tbt: warning: port ${TYPESENSE_PORT} is in use by something that does not answer as Typesense; ` +
        'the stand-in is not started, so ThinkingBox tools that search a knowledge base will fail\n',
    );
    return false;
  }
  const f = files(env);
  spawnDetached(
    'python3',
    ['-m', 'tbt_thinkingbox.typesense_standin', ...typesenseStandinArgs(env)],
    f.log,
    f.pid,
    { PATH: process.env.PATH ?? '/usr/bin:/bin', LANG: 'C.UTF-8' },
    path.join(repoRoot, 'thinkingbox'),
  );
  await waitFor('Typesense stand-in', () => typesenseHealthy(), 15_000, f.log);
  return true;
}

export async function stopTypesense(env: Environment): Promise<boolean> {
  return stopVerifiedProcess(files(env).pid, [standinProcess]);
}

/**
 * In a container the tool servers still call 127.0.0.1:8108: forward that port to the Typesense service
 * (`host:port`, docker/compose.yaml's `typesense`). Returns a function that stops forwarding.
 */
export async function forwardTypesense(target: string): Promise<() => Promise<void>> {
  const [host, port] = [target.slice(0, target.lastIndexOf(':')), Number(target.slice(target.lastIndexOf(':') + 1))];
  if (!host || !Number.isInteger(port)) throw new Error(`TBT_TYPESENSE_ADDRESS=${target}: expected host:port`);
  const server = net.createServer((client) => {
    const upstream = net.connect({ host, port });
    client.pipe(upstream).pipe(client);
    const close = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on('error', close);
    upstream.on('error', close);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(TYPESENSE_PORT, '127.0.0.1', () => resolve());
  });
  return () => new Promise<void>((resolve) => server.close(() => resolve()));
}
