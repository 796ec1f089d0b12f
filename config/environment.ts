import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { readLocalPassword } from './local-database-password.ts';
import { BadInputError } from '../core/errors.ts';

/** Repository root, resolved from this file so commands work from any working directory. */
export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

const port = z.coerce.number().int().min(1).max(65535);
/** A count from text: digits only (`z.coerce` alone would turn '' into 0 and '2e3' into 2000). */
const count = (min: number, max: number) =>
  z.string().regex(/^\d+$/, 'expected a whole number').transform(Number).pipe(z.number().int().min(min).max(max));
/**
 * A Postgres URL, checked without ever repeating it: the value may hold a password, and error text ends
 * up in crash logs. Only the part at fault is named.
 */
export function postgresUrlProblem(text: string): string | undefined {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return 'not a valid URL (the value is not shown: it may hold a password); expected a postgres:// URL';
  }
  if (url.protocol !== 'postgres:' && url.protocol !== 'postgresql:')
    return `scheme ${JSON.stringify(url.protocol)}: expected postgres: or postgresql:`;
  if (!url.hostname && !url.searchParams.get('host')) return 'no host';
  for (const [part, value] of [
    ['user name', url.username],
    ['password', url.password],
    ['database name', url.pathname],
  ] as const) {
    try {
      decodeURIComponent(value);
    } catch {
      return `the ${part} is not valid percent-encoding (use encodeURIComponent on it)`;
    }
  }
  return undefined;
}

const postgresUrl = z.string().superRefine((text, ctx) => {
  const problem = postgresUrlProblem(text);
  if (problem) ctx.addIssue({ code: 'custom', message: problem });
});

/** `NAME_API_KEY=host,host;OTHER_API_KEY=host`: the hosts each API key may be sent to. */
const keyOrigin = String.raw`(https?://)?[A-Za-z0-9.:\[\]-]+`;
const keyHostsEntry = String.raw`[A-Z][A-Z0-9_]*_API_KEY=${keyOrigin}(,${keyOrigin})*`;
const keyHostsList = new RegExp(String.raw`^\s*(${keyHostsEntry})?(\s*;\s*${keyHostsEntry})*\s*$`);

/** host:port of a gRPC frontend. */
const hostPort = z
  .string()
  .regex(/^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.-]*):\d{1,5}$/, 'expected host:port (e.g. 10.0.0.10:7233)');

/** A CPU list as taskset takes it: 0, 0-3, 0,2,4-7. */
const cpuList = z
  .string()
  .regex(/^\d+(-\d+)?(,\d+(-\d+)?)*$/, 'expected a CPU list such as 0, 0-3 or 0,2')
  .optional();
/** A task-queue-safe name: it becomes part of `<prefix>-gpu-<host>`. */
const queueName = z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/, 'expected letters, digits, . _ - (at most 63)');

/** Process environment read once; every address, port and folder of the local stack comes from here. */
export const environmentSchema = z.object({
  TBT_STATE_DIR: z
    .string()
    .default(path.join(repoRoot, '.state'))
    .describe('Folder for server data, logs and pid files'),
  TBT_TEMPORAL_ADDRESS: hostPort
    .optional()
    .describe('host:port of an existing Temporal frontend; unset = the local dev server'),
  TBT_TEMPORAL_PORT: port.default(7233).describe('gRPC port of the local Temporal dev server'),
  TBT_TEMPORAL_UI_PORT: port.default(8233).describe('Web UI port of the local Temporal dev server'),
  TBT_TEMPORAL_NAMESPACE: z.string().default('default').describe('Temporal namespace of every workflow'),
  TBT_TEMPORAL_TLS: z
    .enum(['', 'true', 'false'])
    .default('')
    .describe('true = TLS to the Temporal frontend; unset = on when a TLS file or an API key is set'),
  TBT_TEMPORAL_TLS_CA_FILE: z.string().optional().describe("PEM of the CA that signed the frontend's certificate"),
  TBT_TEMPORAL_TLS_CERT_FILE: z.string().optional().describe('PEM client certificate for mTLS (with the key file)'),
  TBT_TEMPORAL_TLS_KEY_FILE: z.string().optional().describe('PEM private key of the mTLS client certificate'),
  TBT_TEMPORAL_TLS_SERVER_NAME: z.string().optional().describe("Name to check the frontend's certificate against"),
  TBT_TEMPORAL_API_KEY: z
    .string()
    .optional()
    .describe('API key sent to the Temporal frontend (Temporal Cloud); read at connect time, never logged'),
  DATABASE_URL: postgresUrl
    .optional()
    .describe('Control Postgres (admin role with CREATEDB and CREATEROLE); unset = the local server'),
  TBT_PG_PORT: port.default(54329).describe('Port of the local Postgres server'),
  TBT_AGENT_DB_PASSWORD: z
    .string()
    .optional()
    .describe("Password of the deployment's tool-handler role tbt_agent_<tag>, when the server needs one"),
  TBT_READER_DB_PASSWORD: z
    .string()
    .optional()
    .describe("Password of the deployment's read-only checking role tbt_reader_<tag>, when the server needs one"),
  TBT_TASK_QUEUE_PREFIX: queueName.default('tbt').describe('Prefix of every task queue name'),
  // Empty = unset: docker/compose.yaml passes `${TBT_WORKER_DEPLOYMENT_NAME:-}` to every worker.
  TBT_WORKER_DEPLOYMENT_NAME: z
    .preprocess((v) => (v === '' ? undefined : v), queueName.optional())
    .describe(
      "Worker Deployment name: the orchestrator and bookkeeping workers join it with the workflow bundle's build id " +
        '(Worker Versioning; unset = unversioned, rolling restarts)',
    ),
  TBT_SANDBOX_WARM: count(0, 64).default(2).describe('Ready sandbox clones each worker keeps per template'),
  TBT_ROLLOUT_CONCURRENCY: count(1, 256).default(4).describe('Episodes one rollout worker runs at once'),
  TBT_ROLLOUT_DRAIN_S: count(0, 86_400)
    .default(30)
    .describe(
      'Seconds a rollout worker told to stop (SIGTERM: a deploy, a scale-down) lets its running episodes finish ' +
        'before it hands the rest back to Temporal to run elsewhere; a container stop grace must exceed it',
    ),
  TBT_METRICS_PORT: z
    .string()
    .regex(/^$|^(([A-Za-z0-9][A-Za-z0-9.-]*|\[[0-9A-Fa-f:.]+\]):)?\d{1,5}$/, 'expected PORT or HOST:PORT (e.g. 9464)')
    .refine((s) => s === '' || (Number(s.split(':').at(-1)) >= 1 && Number(s.split(':').at(-1)) <= 65532), {
      message: 'port 1-65532: each worker kind uses it plus its offset (0-3)',
    })
    .optional()
    .describe(
      "Workers' Prometheus metrics: orchestrator on PORT, bookkeeping +1, rollout +2, gpu +3 (HOST:PORT binds " +
        'HOST, else 127.0.0.1 only); unset or empty = off (docs/metrics.md)',
    ),
  TBT_GPU_HOST: queueName
    .default(
      os
        .hostname()
        .replace(/[^A-Za-z0-9._-]/g, '-')
        .slice(0, 63) || 'localhost',
    )
    .describe("Names this host's learner task queue <prefix>-gpu-<host>; default: the host name"),
  TBT_PG_BIN: z.string().optional().describe('Folder of the PostgreSQL server binaries (initdb, pg_ctl)'),
  TBT_PG_SEARCH_SYSTEM: z
    .enum(['0', '1'])
    .default('1')
    .describe("0 = look for Postgres binaries only in TBT_PG_BIN and PATH, not Debian's folders"),
  TBT_PY_VENV: z.string().optional().describe('Learner Python environment (scripts/setup.sh creates it)'),
  TBT_TB_VENV: z.string().optional().describe('Python environment of dataset tool servers (scripts/setup.sh)'),
  TBT_DATASET_ENV_DIR: z
    .string()
    .min(1)
    .optional()
    .describe('Folder of the cached per-dataset Python environments (~/.cache/thinkingbox-temporal/datasets)'),
  TBT_TYPESENSE_ADDRESS: z
    .string()
    .regex(/^[\w.-]+:\d{1,5}$/, 'expected host:port')
    .optional()
    .describe("host:port of a Typesense the rollout worker forwards its 127.0.0.1:8108 to (compose's service)"),
  // Caps of the Typesense stand-in `tbt up` starts, shared by every sandbox (third review, finding 12).
  TBT_TYPESENSE_MAX_BODY_MB: count(1, 1024)
    .default(8)
    .describe('Typesense stand-in: largest request body, MiB (bodies read at once: 4 x this)'),
  TBT_TYPESENSE_MAX_IMPORT_DOCUMENTS: count(1, 10_000_000)
    .default(10_000)
    .describe('Typesense stand-in: documents in one import'),
  TBT_TYPESENSE_MAX_COLLECTION_DOCUMENTS: count(1, 100_000_000)
    .default(10_000)
    .describe('Typesense stand-in: documents in one collection'),
  TBT_TYPESENSE_MAX_COLLECTION_MB: count(1, 1_048_576)
    .default(16)
    .describe("Typesense stand-in: bytes of one collection's documents and indexed text, MiB"),
  TBT_TYPESENSE_MAX_COLLECTIONS: count(1, 1_000_000)
    .default(1000)
    .describe('Typesense stand-in: collections at once (each tool-server session makes one)'),
  TBT_TYPESENSE_MAX_TOTAL_MB: count(1, 1_048_576)
    .default(128)
    .describe("Typesense stand-in: bytes of all collections' documents and indexed text, MiB"),
  TBT_THINKINGBOX_DATA: z
    .string()
    .optional()
    .describe('Tests only: the public ThinkingBox data folder (test/thinkingbox-bench-subset.test.ts)'),
  TBT_VLLM_VENV: z.string().optional().describe("vLLM's CPU-build Python environment (scripts/setup.sh creates it)"),
  TBT_TRACKING_VENV: z
    .string()
    .optional()
    .describe('Python environment of the experiment trackers, mlflow and wandb (scripts/setup.sh creates it)'),
  TBT_K8S_VENV: z
    .string()
    .optional()
    .describe('Python environment of kubectl and kubernetes-validate (manifest check; scripts/setup.sh creates it)'),
  TBT_POLICY_CPUS: cpuList.describe(
    'CPUs (taskset list, e.g. 0 or 0-3) the embedded policy server runs on; unset = any (bench:async pins it)',
  ),
  TBT_POLICY_SERVER_HOST: z
    .string()
    .regex(/^[A-Za-z0-9][A-Za-z0-9.-]*$/, 'expected a host name')
    .optional()
    .describe(
      "GPU worker: the name rollout workers reach a campaign's embedded policy server at, which then listens on " +
        'the address that name resolves to (compose: the gpu-worker service); unset = 127.0.0.1 only',
    ),
  TBT_LEARNER_CPUS: cpuList.describe(
    "CPUs (taskset list) the learner's processes run on; unset = any (bench:async pins it)",
  ),
  TBT_VLLM_MAX_MODEL_LEN: count(256, 1_048_576)
    .default(4096)
    .describe('Context length (--max-model-len) of the embedded vLLM policy server'),
  TBT_MEMORY_CHECK: z
    .enum(['on', 'off'])
    .default('on')
    .describe("off: tbt train --dry-run skips the learner's memory model (about 80 s at 27B on 2 cores)"),
  TBT_MODEL_CACHE: z
    .string()
    .optional()
    .describe('Model folder of the Python learner (~/.cache/thinkingbox-temporal/models)'),
  TBT_LEARNER_TEST_HOOKS: z
    .string()
    .refine((s) => {
      try {
        return typeof JSON.parse(s) === 'object';
      } catch {
        return false;
      }
    }, 'expected a JSON object')
    .optional()
    .describe('Tests only: JSON that switches on fault points in the Python learner'),
  TBT_API_KEY_HOSTS: z
    .string()
    .regex(
      keyHostsList,
      'expected NAME_API_KEY=origin,origin;OTHER_API_KEY=origin ' +
        '(host[:port], https://host[:port] or http://host[:port])',
    )
    .default('')
    .describe('Hosts each API key variable may be sent to, added to the built-in ties (docs/security.md)'),
  TBT_MLFLOW_CREDENTIAL_ORIGINS: z
    .string()
    .regex(
      new RegExp(String.raw`^\s*(${keyOrigin}(\s*,\s*${keyOrigin})*)?\s*$`),
      'expected origin,origin (host[:port], https://host[:port] or http://host[:port])',
    )
    .default('')
    .describe(
      "Origins MLflow's credentials may be sent to when a campaign config names tracking_uri (docs/security.md)",
    ),
  TBT_POLICY_SYNC_TOKEN_FILE: z
    .string()
    .min(1)
    .optional()
    .describe('0600 file whose token weight syncs send to external built-in policy servers (read at each sync)'),
  TBT_POLICY_TOKEN_FILE: z
    .string()
    .min(1)
    .optional()
    .describe('vLLM side (tbt_gpu/vllm_route_guard.py): 0600 file with the token its control routes require'),
  TBT_WEIGHTS_ROOTS: z
    .string()
    .optional()
    .describe('vLLM side (tbt_gpu/vllm_route_guard.py): folders weights and adapters may load from (: separated)'),
  TBT_CHROMIUM: z.string().default('/usr/bin/chromium').describe('Chromium for the report and UI screenshots'),
  TBT_DEBUG: z.enum(['', '0', '1']).default('').describe('1 = print stack traces of command errors'),
  TBT_BENCH_ENGINES: z
    .string()
    .regex(/^(builtin|vllm)(,(builtin|vllm))*$/, 'expected builtin, vllm or builtin,vllm')
    .default('builtin,vllm')
    .describe('bench:serving only: the policy servers to measure (the ratio needs both)'),
  TBT_BENCH_WORKER_NODE_FLAGS: z
    .string()
    .default('')
    .describe('bench:scale only: node flags for its workers (e.g. --trace-gc, which NODE_OPTIONS refuses)'),
  TBT_TEST_FILTER: z.string().optional().describe('Tests only: regex over test file paths (scripts/test.sh)'),
  TBT_KEEP_UP: z.string().optional().describe('Tests only: leave the servers scripts/test.sh started running'),
  TBT_UNSANDBOXED: z
    .enum(['0', '1'])
    .default('0')
    .describe('1 = run dataset code without isolation where bubblewrap does not work (`tbt --unsandboxed`)'),
  TBT_SANDBOX_LOOPBACK: z
    .string()
    .default('8108=127.0.0.1:8108')
    .describe(
      'PORT=HOST:PORT,...: loopback ports inside the tool-server sandbox and the one host address each reaches ' +
        "(default: the knowledge-base search service the bench's servers expect on 127.0.0.1:8108); '' = none",
    ),
  TBT_INSTALL_PROXY_PRIVATE_HOSTS: z
    .string()
    .regex(
      /^\s*((\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(:\d{1,5})?\s*(,\s*|$))*$/,
      'expected HOST or HOST:PORT entries separated by commas (IPv6 in brackets)',
    )
    .default('')
    .describe(
      'HOST[:PORT],...: hosts `tbt tasks prepare-env` may reach at private, loopback or link-local addresses ' +
        "(an internal mirror a URL requirement names); others only at public ones; the operator's pip index hosts " +
        'always may (docs/dataset-sandbox.md)',
    ),
  TBT_SANDBOX_RECYCLE: z
    .enum(['true', 'false', '1', '0'])
    .default('true')
    .transform((v) => v === 'true' || v === '1')
    .describe('Reset used sandboxes and return them to the pool (true) or drop and clone one per episode (false)'),
});
export type Environment = z.infer<typeof environmentSchema>;

/** `tbt --unsandboxed`: set for this process and inherited by the workers it starts (read back by the schema). */
export function allowUnsandboxedDatasetCode(): void {
  process.env.TBT_UNSANDBOXED = '1';
}

export function readEnvironment(env: NodeJS.ProcessEnv = process.env): Environment {
  const parsed = environmentSchema.safeParse(env);
  if (!parsed.success) {
    // The message names the variable and the rule, never the value (it may be a password or hold one).
    const issue = parsed.error.issues[0]!;
    throw new BadInputError(`environment variable ${issue.path.join('.')}: ${issue.message}`);
  }
  return Object.freeze(parsed.data);
}

export function temporalAddress(env: Environment): string {
  return env.TBT_TEMPORAL_ADDRESS ?? `127.0.0.1:${env.TBT_TEMPORAL_PORT}`;
}

export function temporalUiUrl(env: Environment): string {
  return `http://localhost:${env.TBT_TEMPORAL_UI_PORT}`;
}

/** DATABASE_URL when set (it wins); else the local server, with the password `tbt up` generated. */
export function databaseUrl(env: Environment): string {
  if (env.DATABASE_URL) return env.DATABASE_URL;
  const password = readLocalPassword(env.TBT_STATE_DIR);
  return `postgres://tbt${password ? `:${encodeURIComponent(password)}` : ''}@127.0.0.1:${env.TBT_PG_PORT}/tbt`;
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
  TbtPaused: 'Bool',
} as const;
