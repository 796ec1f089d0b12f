import { execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { databaseUrl, readEnvironment, type Environment } from '../config/environment.ts';
import { localPasswordFile, readLocalPassword } from '../config/local-database-password.ts';
import { portInUse, waitFor } from './daemon.ts';
import { identityMismatch } from './pid-identity.ts';
import type { ServiceStatus } from './temporal-dev-server.ts';

/**
 * A local Postgres server with its data folder in the state folder. Binaries: $TBT_PG_BIN, else the
 * system's PostgreSQL (Debian layout or pg_ctl on PATH). Postgres refuses to run as root, so as root the
 * server runs as the `postgres` (or `nobody`) user; when that user cannot reach the state folder (a checkout
 * in a mode-700 folder such as a root home or `mktemp -d`), the data lives in /var/lib/tbt instead.
 *
 * Nothing is trusted: the socket takes peer authentication (only the OS user who ran `tbt up`, as role tbt),
 * TCP takes SCRAM passwords; the admin password is generated once and kept 0600 in the state folder.
 */

function findBinDir(): string {
  const env = readEnvironment();
  const candidates: string[] = [];
  if (env.TBT_PG_BIN) candidates.push(env.TBT_PG_BIN);
  const debian = '/usr/lib/postgresql';
  // TBT_PG_SEARCH_SYSTEM=0 restricts the search to TBT_PG_BIN and PATH (tests use it to simulate a bare machine).
  if (env.TBT_PG_SEARCH_SYSTEM !== '0' && fs.existsSync(debian)) {
    for (const v of fs.readdirSync(debian).sort((a, b) => Number(b) - Number(a)))
      candidates.push(path.join(debian, v, 'bin'));
  }
  for (const dir of (process.env.PATH ?? '').split(':')) candidates.push(dir);
  const found = candidates.find(
    (d) => d && fs.existsSync(path.join(d, 'pg_ctl')) && fs.existsSync(path.join(d, 'initdb')),
  );
  if (!found)
    throw new Error(
      'PostgreSQL server binaries (initdb, pg_ctl) not found: install PostgreSQL >= 13, set TBT_PG_BIN to their ' +
        'folder, or set DATABASE_URL to an existing server',
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

/** Whether `user` can search `dir` (and so every folder above it). */
function reachableBy(user: string, dir: string): boolean {
  try {
    execFileSync('runuser', ['-u', user, '--', 'test', '-x', dir], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** Root of relocated data folders; only used as root, when the server's user cannot reach the state folder. */
export const relocatedDataRoot = '/var/lib/tbt';

export function postgresFiles(env: Environment) {
  const stateDir = path.resolve(env.TBT_STATE_DIR);
  let dir = path.join(stateDir, 'postgres');
  const user = runAsUser();
  if (user && !fs.existsSync(path.join(dir, 'data', 'PG_VERSION'))) {
    fs.mkdirSync(stateDir, { recursive: true });
    if (!reachableBy(user, stateDir)) {
      const key = createHash('sha256').update(stateDir).digest('hex').slice(0, 12);
      dir = path.join(relocatedDataRoot, `postgres-${key}`);
    }
  }
  return { dir, data: path.join(dir, 'data'), log: path.join(dir, 'server.log') };
}
const files = postgresFiles;

/** The admin password, generated (0600) on first use. */
function ensureLocalPassword(env: Environment): string {
  const existing = readLocalPassword(env.TBT_STATE_DIR);
  if (existing) return existing;
  const password = randomBytes(24).toString('hex');
  fs.mkdirSync(env.TBT_STATE_DIR, { recursive: true });
  fs.writeFileSync(localPasswordFile(env.TBT_STATE_DIR), `${password}\n`, { mode: 0o600, flag: 'wx' });
  return password;
}

/** Peer on the socket for the OS user running tbt (as role tbt), SCRAM on loopback TCP, no trust anywhere. */
function writeAuthentication(data: string, user: string | undefined): void {
  const hba = [
    '# Written by tbt up: nothing is trusted. The socket admits the OS user who runs tbt, as role tbt (peer);',
    '# TCP on loopback takes SCRAM passwords (the admin one is in the state folder, mode 0600).',
    'local all tbt peer map=tbt',
    'host all all 127.0.0.1/32 scram-sha-256',
    'host all all ::1/128 scram-sha-256',
    '',
  ].join('\n');
  const ident = `# Written by tbt up: OS user -> database role for the socket.\ntbt ${os.userInfo().username} tbt\n`;
  for (const [file, text] of [
    ['pg_hba.conf', hba],
    ['pg_ident.conf', ident],
  ] as const) {
    const target = path.join(data, file);
    fs.writeFileSync(target, text, { mode: 0o600 });
    if (user) execFileSync('chown', [user, target]);
  }
}

function trustsAnyone(data: string): boolean {
  const hba = fs.readFileSync(path.join(data, 'pg_hba.conf'), 'utf8');
  return hba.split('\n').some((line) => !line.trim().startsWith('#') && /\btrust\b/.test(line));
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

/**
 * Whether the server of `data` runs: postmaster.pid's first line must name a live `postgres -D <data>` of the
 * data folder's owner. A stale file naming an unrelated process is not a server (`pg_ctl stop` would signal it).
 */
function serverRunning(data: string): boolean {
  const pidFile = path.join(data, 'postmaster.pid');
  let pid: number;
  let owner: number;
  try {
    pid = Number(fs.readFileSync(pidFile, 'utf8').split('\n')[0]);
    owner = fs.statSync(data).uid;
  } catch {
    return false;
  }
  if (!Number.isSafeInteger(pid) || pid <= 0) return false;
  return identityMismatch(pid, [{ argvIncludes: [data], uid: owner }]) === undefined;
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
  if (f.dir.startsWith(relocatedDataRoot)) fs.mkdirSync(relocatedDataRoot, { recursive: true, mode: 0o755 });
  fs.mkdirSync(f.dir, { recursive: true, mode: 0o700 });
  if (user) execFileSync('chown', [user, f.dir]);
  const password = ensureLocalPassword(env);
  if (!fs.existsSync(path.join(f.data, 'PG_VERSION'))) {
    // initdb runs as the server's user, so its password file sits in the server's folder, briefly.
    const pwfile = path.join(f.dir, 'initdb-password');
    fs.writeFileSync(pwfile, `${password}\n`, { mode: 0o600 });
    if (user) execFileSync('chown', [user, pwfile]);
    try {
      run(bin, 'initdb', [
        '-D',
        f.data,
        '-U',
        'tbt',
        `--pwfile=${pwfile}`,
        '--auth-local=peer',
        '--auth-host=scram-sha-256',
        '-E',
        'UTF8',
        '--locale=C',
        '--no-sync',
      ]);
    } catch (err) {
      const stderr = String((err as { stderr?: string }).stderr ?? '').trim();
      throw new Error(`initdb failed for ${f.data}: ${stderr.split('\n').at(-1) ?? errorText(err)}`, { cause: err });
    } finally {
      fs.rmSync(pwfile, { force: true });
    }
    writeAuthentication(f.data, user);
  }
  // A data folder from before passwords (trust authentication) is migrated once the server is up.
  const migrate = trustsAnyone(f.data);
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
  const admin = `postgres://tbt:${encodeURIComponent(password)}@127.0.0.1:${env.TBT_PG_PORT}/postgres`;
  if (migrate) {
    await waitFor(
      'Postgres',
      () => postgresReachable(`postgres://tbt@127.0.0.1:${env.TBT_PG_PORT}/postgres`),
      30_000,
      f.log,
    );
    const client = new pg.Client({ connectionString: `postgres://tbt@127.0.0.1:${env.TBT_PG_PORT}/postgres` });
    await client.connect();
    try {
      await client.query(`ALTER ROLE tbt PASSWORD ${pg.escapeLiteral(password)}`);
    } finally {
      await client.end();
    }
    writeAuthentication(f.data, user);
    run(bin, 'pg_ctl', ['-D', f.data, 'reload']);
  }
  await waitFor('Postgres', () => postgresReachable(admin), 30_000, f.log);
  return true;
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

export async function stopPostgres(env: Environment): Promise<boolean> {
  if (env.DATABASE_URL) return false;
  const f = files(env);
  if (!serverRunning(f.data)) return false;
  run(findBinDir(), 'pg_ctl', ['-D', f.data, '-m', 'fast', '-w', 'stop']);
  return true;
}
