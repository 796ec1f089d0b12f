import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { databaseUrl, type Environment } from '../config/environment.ts';
import { portInUse, waitFor } from './daemon.ts';
import type { ServiceStatus } from './temporal-dev-server.ts';

/**
 * A local Postgres server with its data folder in the state folder. Binaries: $TBT_PG_BIN, else the
 * system's PostgreSQL (Debian layout or pg_ctl on PATH). Postgres refuses to run as root, so as root the
 * server runs as the `postgres` (or `nobody`) user.
 */

function findBinDir(): string {
  const candidates: string[] = [];
  if (process.env.TBT_PG_BIN) candidates.push(process.env.TBT_PG_BIN);
  const debian = '/usr/lib/postgresql';
  // TBT_PG_SEARCH_SYSTEM=0 restricts the search to TBT_PG_BIN and PATH (tests use it to simulate a bare machine).
  if (process.env.TBT_PG_SEARCH_SYSTEM !== '0' && fs.existsSync(debian)) {
    for (const v of fs.readdirSync(debian).sort((a, b) => Number(b) - Number(a)))
      candidates.push(path.join(debian, v, 'bin'));
  }
  for (const dir of (process.env.PATH ?? '').split(':')) candidates.push(dir);
  const found = candidates.find(
    (d) => d && fs.existsSync(path.join(d, 'pg_ctl')) && fs.existsSync(path.join(d, 'initdb')),
  );
  if (!found)
    throw new Error(
      'PostgreSQL server binaries (initdb, pg_ctl) not found: install PostgreSQL >= 13, set TBT_PG_BIN to their folder, or set DATABASE_URL to an existing server',
    );
  return found;
}

function runAsUser(): string | undefined {
  if (os.userInfo().uid !== 0) return undefined;
  for (const user of ['postgres', 'nobody']) {
    try {
      execFileSync('id', [user], { stdio: 'ignore' });
      return user;
    } catch {
      /* try the next one */
    }
  }
  throw new Error('running as root and neither a `postgres` nor a `nobody` user exists to run the Postgres server');
}

function pgCommand(bin: string, tool: string, args: string[]): [string, string[]] {
  const user = runAsUser();
  return user ? ['runuser', ['-u', user, '--', path.join(bin, tool), ...args]] : [path.join(bin, tool), args];
}

function run(bin: string, tool: string, args: string[]): string {
  const [cmd, argv] = pgCommand(bin, tool, args);
  return execFileSync(cmd, argv, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

function files(env: Environment) {
  const dir = path.join(env.TBT_STATE_DIR, 'postgres');
  return { dir, data: path.join(dir, 'data'), log: path.join(dir, 'server.log') };
}

export async function postgresReachable(url: string): Promise<boolean> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2000 });
  try {
    await client.connect();
    await client.query('SELECT 1');
    return true;
  } catch {
    return false;
  } finally {
    await client.end().catch(() => undefined);
  }
}

function serverRunning(data: string): boolean {
  const pidFile = path.join(data, 'postmaster.pid');
  if (!fs.existsSync(pidFile)) return false;
  const pid = Number(fs.readFileSync(pidFile, 'utf8').split('\n')[0]);
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

export async function postgresStatus(env: Environment): Promise<ServiceStatus> {
  const url = databaseUrl(env);
  const running = await postgresReachable(url);
  const managed = !env.DATABASE_URL;
  return {
    name: 'postgres',
    running,
    managed,
    detail: managed ? `127.0.0.1:${env.TBT_PG_PORT} (data ${files(env).data})` : 'DATABASE_URL (external)',
  };
}

/** Initialises (first time) and starts the local server; idempotent. Returns true when this call started it. */
export async function startPostgres(env: Environment): Promise<boolean> {
  if (env.DATABASE_URL) return false;
  const f = files(env);
  if (serverRunning(f.data)) return false;
  const bin = findBinDir();
  if (await portInUse(env.TBT_PG_PORT))
    throw new Error(
      `Postgres port ${env.TBT_PG_PORT} is already in use by another process; stop it or set TBT_PG_PORT`,
    );
  const user = runAsUser();
  fs.mkdirSync(f.dir, { recursive: true });
  if (user) execFileSync('chown', [user, f.dir]);
  if (!fs.existsSync(path.join(f.data, 'PG_VERSION'))) {
    run(bin, 'initdb', ['-D', f.data, '-U', 'tbt', '--auth=trust', '-E', 'UTF8', '--locale=C', '--no-sync']);
  }
  const options = [
    `-p ${env.TBT_PG_PORT}`,
    '-c listen_addresses=127.0.0.1',
    `-c unix_socket_directories=${f.data}`,
    '-c max_connections=300',
    '-c shared_buffers=128MB',
  ].join(' ');
  try {
    run(bin, 'pg_ctl', ['-D', f.data, '-l', f.log, '-w', '-t', '60', '-o', options, 'start']);
  } catch (err) {
    const tail = fs.existsSync(f.log) ? fs.readFileSync(f.log, 'utf8').split('\n').slice(-15).join('\n') : '';
    throw new Error(`Postgres did not start (log ${f.log}):\n${tail}`, { cause: err });
  }
  await waitFor(
    'Postgres',
    () => postgresReachable(`postgres://tbt@127.0.0.1:${env.TBT_PG_PORT}/postgres`),
    30_000,
    f.log,
  );
  return true;
}

export async function stopPostgres(env: Environment): Promise<boolean> {
  if (env.DATABASE_URL) return false;
  const f = files(env);
  if (!serverRunning(f.data)) return false;
  run(findBinDir(), 'pg_ctl', ['-D', f.data, '-m', 'fast', '-w', 'stop']);
  return true;
}
