import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';

/** Repository root, resolved from this file so commands work from any working directory. */
export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

const port = z.coerce.number().int().min(1).max(65535);

/** Process environment read once; every address, port and folder of the local stack comes from here. */
export const environmentSchema = z.object({
  TBT_STATE_DIR: z
    .string()
    .default(path.join(repoRoot, '.state'))
    .describe('Folder for server data, logs and pid files'),
  TBT_TEMPORAL_ADDRESS: z
    .string()
    .optional()
    .describe('host:port of an existing Temporal frontend; unset = the local dev server'),
  TBT_TEMPORAL_PORT: port.default(7233).describe('gRPC port of the local Temporal dev server'),
  TBT_TEMPORAL_UI_PORT: port.default(8233).describe('Web UI port of the local Temporal dev server'),
  TBT_TEMPORAL_NAMESPACE: z.string().default('default'),
  DATABASE_URL: z
    .string()
    .optional()
    .describe('Control Postgres (admin role with CREATEDB and CREATEROLE); unset = the local server'),
  TBT_PG_PORT: port.default(54329).describe('Port of the local Postgres server'),
  TBT_AGENT_DB_PASSWORD: z
    .string()
    .optional()
    .describe('Password of the tool-handler role tbt_agent, when the server needs one'),
  TBT_READER_DB_PASSWORD: z
    .string()
    .optional()
    .describe('Password of the read-only checking role tbt_reader, when the server needs one'),
  TBT_TASK_QUEUE_PREFIX: z.string().default('tbt').describe('Prefix of every task queue name'),
  TBT_SANDBOX_RECYCLE: z
    .enum(['true', 'false', '1', '0'])
    .default('true')
    .transform((v) => v === 'true' || v === '1')
    .describe('Reset used sandboxes and return them to the pool (true) or drop and clone one per episode (false)'),
});
export type Environment = z.infer<typeof environmentSchema>;

export function readEnvironment(env: NodeJS.ProcessEnv = process.env): Environment {
  const parsed = environmentSchema.safeParse(env);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw new Error(`environment variable ${issue.path.join('.')}: ${issue.message}`);
  }
  return Object.freeze(parsed.data);
}

export function temporalAddress(env: Environment): string {
  return env.TBT_TEMPORAL_ADDRESS ?? `127.0.0.1:${env.TBT_TEMPORAL_PORT}`;
}

export function temporalUiUrl(env: Environment): string {
  return `http://localhost:${env.TBT_TEMPORAL_UI_PORT}`;
}

export function databaseUrl(env: Environment): string {
  return env.DATABASE_URL ?? `postgres://tbt@127.0.0.1:${env.TBT_PG_PORT}/tbt`;
}

/** Task queues, named in one place (workers and workflows both read them from here). */
export function taskQueues(env: Pick<Environment, 'TBT_TASK_QUEUE_PREFIX'>) {
  const p = env.TBT_TASK_QUEUE_PREFIX;
  return {
    orchestrator: `${p}-orchestrator`,
    /**
     * Bookkeeping activities: scheduled by the workflows on their own queue, whose activity tasks Temporal
     * dispatches apart from its workflow tasks; only the bookkeeping worker polls them.
     */
    bookkeeping: `${p}-orchestrator`,
    rollout: `${p}-rollout`,
    gpu: (host: string) => `${p}-gpu-${host}`,
  } as const;
}

/** Search attributes registered on the Temporal server so campaigns can be found in the UI. */
export const searchAttributes = {
  TbtCampaign: 'Keyword',
  TbtStage: 'Keyword',
  TbtStep: 'Int',
} as const;
