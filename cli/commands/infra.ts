import { readEnvironment, temporalUiUrl } from '../../config/environment.ts';
import { ensureControlDatabase } from '../../infra/control-database.ts';
import { defaultRetention, rotateLogs } from '../../infra/retention.ts';
import { postgresStatus, startPostgres, stopPostgres } from '../../infra/local-postgres.ts';
import { stopWorkers } from '../../infra/local-workers.ts';
import { startTemporal, stopTemporal, temporalStatus } from '../../infra/temporal-dev-server.ts';
import { startTypesense, stopTypesense, typesenseStatus } from '../../infra/typesense-standin.ts';

export async function up(): Promise<void> {
  const env = readEnvironment();
  // Log rotation: server and worker logs over the limit are rotated before the servers append again.
  rotateLogs(env.TBT_STATE_DIR, defaultRetention, false, { removed: [], rotated: [], freedBytes: 0 });
  const [startedPg, startedTemporal, startedTypesense] = await Promise.all([
    startPostgres(env),
    startTemporal(env),
    startTypesense(env),
  ]);
  await ensureControlDatabase(env);
  console.log(`postgres: ${startedPg ? 'started' : 'already running'}`);
  console.log(`temporal: ${startedTemporal ? 'started' : 'already running'} (UI ${temporalUiUrl(env)})`);
  console.log(`typesense: ${startedTypesense ? 'started (lexical-only stand-in)' : 'already running'}`);
}

export async function down(): Promise<void> {
  const env = readEnvironment();
  // Workers first: one left running retries its connection and would serve whatever server next takes the port
  // (another checkout's, with another database password and learner folder).
  const workers = await stopWorkers(env);
  console.log(`workers: ${workers.length ? `stopped ${workers.join(', ')}` : 'not running'}`);
  const [t, p, k] = await Promise.all([stopTemporal(env), stopPostgres(env), stopTypesense(env)]);
  console.log(`temporal: ${t ? 'stopped' : 'not running'}`);
  console.log(`typesense: ${k ? 'stopped' : 'not ours or not running'}`);
  console.log(`postgres: ${p ? 'stopped' : 'not running'}`);
}

export async function status(): Promise<number> {
  const env = readEnvironment();
  const all = await Promise.all([postgresStatus(env), temporalStatus(env), typesenseStatus(env)]);
  for (const s of all) console.log(`${s.name.padEnd(9)} ${s.running ? 'running' : 'stopped'}  ${s.detail}`);
  return all.every((s) => s.running) ? 0 : 1;
}
