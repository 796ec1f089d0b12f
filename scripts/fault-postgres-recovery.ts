/**
 * The fault suite's Postgres that stays in recovery (scenario i): the environment's local server restarted as a
 * standby with nothing to recover from (standby.signal, no restore_command, no primary_conninfo) and
 * hot_standby=off, so every client connection is refused with SQLSTATE 57P03 ("the database system is not
 * accepting connections" / "not yet accepting connections") until the suite restarts it normally.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { databaseUrl, type Environment } from '../config/environment.ts';
import { postgresFiles, startPostgres, stopPostgres } from '../infra/local-postgres.ts';

function binDir(env: Environment): string {
  const debian = '/usr/lib/postgresql';
  const candidates = [
    ...(env.TBT_PG_BIN ? [env.TBT_PG_BIN] : []),
    ...(fs.existsSync(debian)
      ? fs
          .readdirSync(debian)
          .sort((a, b) => Number(b) - Number(a))
          .map((v) => path.join(debian, v, 'bin'))
      : []),
    ...(process.env.PATH ?? '').split(':'),
  ];
  const found = candidates.find((d) => d && fs.existsSync(path.join(d, 'pg_ctl')));
  if (!found) throw new Error('pg_ctl not found (set TBT_PG_BIN)');
  return found;
}

/** pg_ctl as the server's user (as root: `postgres`, as infra/local-postgres.ts runs it). */
function pgCtl(env: Environment, args: string[]): void {
  const ctl = path.join(binDir(env), 'pg_ctl');
  const asRoot = os.userInfo().uid === 0;
  const owner = asRoot ? fs.statSync(postgresFiles(env).data).uid : undefined;
  const user = owner !== undefined ? execFileSync('id', ['-nu', String(owner)], { encoding: 'utf8' }).trim() : '';
  const [cmd, argv] = user ? ['runuser', ['-u', user, '--', ctl, ...args]] : [ctl, args];
  execFileSync(cmd, argv, { stdio: ['ignore', 'pipe', 'pipe'], timeout: 90_000 });
}

/** One connection attempt: undefined when it connected, else the SQLSTATE (or the error's code/message). */
export async function connectCode(env: Environment): Promise<string | undefined> {
  const client = new pg.Client({ connectionString: databaseUrl(env), connectionTimeoutMillis: 5000 });
  try {
    await client.connect();
    await client.query('SELECT 1');
    return undefined;
  } catch (err) {
    const e = err as { code?: string; message?: string };
    return `${e.code ?? 'no code'}: ${e.message ?? String(err)}`;
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** Stops the server and starts it again as a standby that accepts no connections (57P03). */
export async function startInRecovery(env: Environment): Promise<void> {
  const f = postgresFiles(env);
  await stopPostgres(env);
  const signal = path.join(f.data, 'standby.signal');
  fs.writeFileSync(signal, '');
  fs.chownSync(signal, fs.statSync(f.data).uid, fs.statSync(f.data).gid);
  const options = [
    `-p ${env.TBT_PG_PORT}`,
    '-c listen_addresses=127.0.0.1',
    `-c unix_socket_directories=${f.data}`,
    '-c max_connections=300',
    '-c shared_buffers=128MB',
    '-c hot_standby=off',
  ].join(' ');
  // -W: a standby without hot standby never accepts connections, so there is nothing to wait for.
  pgCtl(env, ['-D', f.data, '-l', f.log, '-W', '-o', options, 'start']);
}

/** Stops the standby and starts the server normally (as `tbt up` does). */
export async function endRecovery(env: Environment): Promise<void> {
  const f = postgresFiles(env);
  pgCtl(env, ['-D', f.data, '-m', 'fast', '-w', '-t', '60', 'stop']);
  fs.rmSync(path.join(f.data, 'standby.signal'), { force: true });
  await startPostgres(env);
}

/** Leaves no standby.signal behind (an interrupted scenario): the next start is a normal one. */
export function clearRecoverySignal(env: Environment): void {
  fs.rmSync(path.join(postgresFiles(env).data, 'standby.signal'), { force: true });
}
