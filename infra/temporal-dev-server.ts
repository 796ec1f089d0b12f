import fs from 'node:fs';
import path from 'node:path';
import { repoRoot, searchAttributes, temporalAddress, temporalUiUrl, type Environment } from '../config/environment.ts';
import { portInUse, spawnDetached, waitFor } from './daemon.ts';
import { stopVerifiedProcess, verifiedPid, type ExpectedProcess } from './pid-identity.ts';
import { ensureSearchAttributes } from './search-attributes.ts';
import { connectTemporalClient } from './temporal-connection.ts';

/** The official Temporal CLI dev server, installed by scripts/setup.sh into .tools/, with SQLite persistence. */

export const temporalBinary = path.join(repoRoot, '.tools', 'venv', 'bin', 'temporal');

function files(env: Environment) {
  const dir = path.join(env.TBT_STATE_DIR, 'temporal');
  return {
    dir,
    db: path.join(dir, 'temporal.sqlite'),
    log: path.join(dir, 'server.log'),
    pid: path.join(dir, 'server.pid'),
  };
}

/** The dev server of this state folder: our Temporal CLI binary, on this folder's database file. */
function serverProcess(env: Environment): ExpectedProcess {
  return { argvIncludes: [temporalBinary, files(env).db] };
}

export async function temporalReachable(env: Environment): Promise<boolean> {
  try {
    const connection = await connectTemporalClient(env, 2000);
    try {
      await connection.workflowService.getSystemInfo({});
      return true;
    } finally {
      await connection.close();
    }
  } catch {
    return false;
  }
}

export interface ServiceStatus {
  name: string;
  running: boolean;
  managed: boolean;
  detail: string;
}

export async function temporalStatus(env: Environment): Promise<ServiceStatus> {
  const address = temporalAddress(env);
  const pid = env.TBT_TEMPORAL_ADDRESS ? undefined : verifiedPid(files(env).pid, serverProcess(env));
  const running = await temporalReachable(env);
  const managed = !env.TBT_TEMPORAL_ADDRESS;
  const detail = managed ? `${address} (pid ${pid ?? '-'}, UI ${temporalUiUrl(env)})` : `${address} (external)`;
  return { name: 'temporal', running, managed, detail };
}

/** Starts the dev server unless it already runs; idempotent. Returns true when this call started it. */
export async function startTemporal(env: Environment): Promise<boolean> {
  if (env.TBT_TEMPORAL_ADDRESS) {
    if (!(await temporalReachable(env)))
      throw new Error(`TBT_TEMPORAL_ADDRESS=${env.TBT_TEMPORAL_ADDRESS} is not reachable`);
    // A campaign upserting an attribute the server lacks fails its workflow task in a loop: add what is missing.
    await registerMissingSearchAttributes(env).catch((err: unknown) => {
      const names = Object.keys(searchAttributes).join(', ');
      console.warn(`tbt: could not register the search attributes ${names} on ${env.TBT_TEMPORAL_ADDRESS}: ${err}`);
    });
    return false;
  }
  const f = files(env);
  if (verifiedPid(f.pid, serverProcess(env)) !== undefined) {
    await waitFor('Temporal dev server', () => temporalReachable(env), 60_000, f.log);
    await registerMissingSearchAttributes(env);
    return false;
  }
  if (!fs.existsSync(temporalBinary))
    throw new Error(`Temporal CLI not found at ${temporalBinary}: run \`bash scripts/setup.sh\``);
  for (const [what, p] of [
    ['gRPC', env.TBT_TEMPORAL_PORT],
    ['Web UI', env.TBT_TEMPORAL_UI_PORT],
  ] as const) {
    if (await portInUse(p))
      throw new Error(
        `Temporal ${what} port ${p} is already in use by another process; stop it or set ` +
          `${what === 'gRPC' ? 'TBT_TEMPORAL_PORT' : 'TBT_TEMPORAL_UI_PORT'}`,
      );
  }
  fs.mkdirSync(f.dir, { recursive: true });
  const args = [
    'server',
    'start-dev',
    '--db-filename',
    f.db,
    '--ip',
    '127.0.0.1',
    '--port',
    String(env.TBT_TEMPORAL_PORT),
    '--ui-port',
    String(env.TBT_TEMPORAL_UI_PORT),
    '--namespace',
    env.TBT_TEMPORAL_NAMESPACE,
    '--log-level',
    'warn',
    ...Object.entries(searchAttributes).flatMap(([name, type]) => ['--search-attribute', `${name}=${type}`]),
  ];
  spawnDetached(temporalBinary, args, f.log, f.pid);
  await waitFor('Temporal dev server', () => temporalReachable(env), 90_000, f.log);
  return true;
}

/**
 * A dev server started by older code (its SQLite file persists) lacks attributes added since, such as TbtPaused:
 * a workflow upserting an unregistered attribute fails its task, so they are added before any worker starts.
 */
export async function registerMissingSearchAttributes(env: Environment): Promise<string[]> {
  const connection = await connectTemporalClient(env, 5000);
  try {
    return await ensureSearchAttributes(connection, env.TBT_TEMPORAL_NAMESPACE);
  } finally {
    await connection.close();
  }
}

export async function stopTemporal(env: Environment): Promise<boolean> {
  return stopVerifiedProcess(files(env).pid, [serverProcess(env)]);
}
