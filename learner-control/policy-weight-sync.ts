import { randomBytes } from 'node:crypto';
import { InfrastructureError, errorMessage } from '../core/errors.ts';
import { freePort } from '../infra/embedded-policy-server.ts';
import { longRequestDispatcher } from '../infra/long-request-dispatcher.ts';
import { isAdapterFolder, LORA_ADAPTER_NAME } from '../infra/policy-lora.ts';
import { BOOT_ID_HEADER } from '../rollout/served-weights.ts';

/**
 * Full-weight sync into policy servers from an exported safetensors folder, in vLLM's dev-mode protocol (the
 * built-in server speaks the same routes): pause (waiting for in-flight requests), reload the weights from the
 * folder (or receive them from the learner over the collective transport), reset the prefix cache (entries
 * computed with the old weights must not be reused), record the weight version and read it back, resume; the label
 * is `loading:<label>` from the pause until the load succeeded. Several servers are synced
 * at once, each step on every server concurrently; a collective push is one group for all of them (learner rank 0
 * plus every worker of every server), so the learner sends once. The whole sequence runs under one deadline; any
 * failure, or a server that then reports another version, is an InfrastructureError for that server. A server left
 * paused by a failed sync is resumed on a best-effort basis (the caller restarts or re-syncs it). The folder must
 * be readable by the servers' hosts.
 */

/** How weights reach a server: full weights from the export folder or the learner, or a LoRA adapter's folder. */
export type WeightTransport = 'disk' | 'collective' | 'lora';

export interface WeightSyncResult {
  baseUrl: string;
  label: string;
  seconds: number;
  /** How the weights got there: `collective` only when the push succeeded; `disk` otherwise. */
  transport: WeightTransport;
  /** Why a requested collective push fell back to the disk export. */
  fallback?: string;
  /** The server process's boot id as it reported it with the label (absent: a server that reports none). */
  bootId?: string;
}

/** The label the sync writes before it loads: it names weights on their way, never served ones. */
export const LOADING_PREFIX = 'loading:';

/**
 * The learner's end of a collective push: sends the step's weights into the `worldSize - 1` server workers that
 * join `host:port` and prove `secret`, within `timeoutS` (learner-control/learner-weight-push.ts).
 */
export interface CollectivePush {
  /** The address the servers' workers reach learner rank 0 on (its store and gloo/NCCL listen there). */
  host: string;
  timeoutS: number;
  /** Both ends must use the same: NCCL when the learner runs on CUDA, gloo otherwise. */
  backend: 'gloo' | 'nccl';
  push: (host: string, port: number, timeoutS: number, worldSize: number, secret: string) => Promise<unknown>;
}

/** One server to sync: its base URL (with /v1) and the bearer token of its weight-sync routes, if it takes one. */
export interface SyncTarget {
  baseUrl: string;
  /** Bearer token of the server's weight-sync routes (vLLM's through tbt_gpu/vllm_route_guard.py). */
  token?: string;
}

/**
 * The label a server holds for a campaign's weight version: the campaign id is part of it, so a server reused
 * from another campaign (or restarted on other weights) never passes for holding this campaign's version.
 */
export function weightLabel(campaignId: string, weightVersion: number): string {
  return `${campaignId}@${weightVersion}`;
}

/** One server's sync; throws its InfrastructureError (see syncPolicyServers for several at once). */
export async function syncPolicyWeights(
  baseUrl: string,
  weightsPath: string,
  label: string,
  deadlineMs: number,
  /** Bearer token of the server's weight-sync routes (vLLM's through tbt_gpu/vllm_route_guard.py). */
  token?: string,
  /** Push the weights from the learner instead of loading the folder; the folder stays the fallback. */
  collective?: CollectivePush,
): Promise<WeightSyncResult> {
  const [result] = await syncPolicyServers([{ baseUrl, token }], weightsPath, label, deadlineMs, collective);
  if (result!.status === 'rejected') throw result!.reason;
  return result!.value;
}

/**
 * Every target brought to the folder's weights as `label`, all at once; one settled result per target, in order.
 * With `collective`, the servers that answer the receiver probe get the weights in one broadcast from the learner;
 * the others, and any whose receive fails (or all of them, when the push fails), load the folder in the same
 * paused window.
 */
export async function syncPolicyServers(
  targets: SyncTarget[],
  weightsPath: string,
  label: string,
  deadlineMs: number,
  collective?: CollectivePush,
  /**
   * `wait` (default): generations in flight finish on the old weights first. `abort` (`training.partial_rollouts`):
   * they end at once with the tokens they sampled (finish_reason `abort`), and the driver continues them after.
   */
  pauseMode: 'wait' | 'abort' = 'wait',
): Promise<PromiseSettledResult<WeightSyncResult>[]> {
  const started = Date.now();
  const signal = AbortSignal.timeout(deadlineMs);
  const servers = targets.map((t) => ({ ...t, root: t.baseUrl.replace(/\/v1\/?$/, ''), call: serverCall(t, signal) }));
  // Paused, each server is first labelled as loading: a load that fails half way leaves no label that passes for
  // any campaign's weights (the built-in server and our vLLM middleware also drop the label on every load).
  const paused = await Promise.allSettled(
    servers.map(async (s) => {
      await s.call('POST', `/pause?mode=${pauseMode}`);
      await s.call('POST', '/update_weight_version', { new_version: `${LOADING_PREFIX}${label}` });
    }),
  );
  const live = servers.filter((_, i) => paused[i]!.status === 'fulfilled');
  const loads = await loadWeights(live, weightsPath, collective);
  return Promise.allSettled(
    servers.map(async (server, i) => {
      const pause = paused[i]!;
      if (pause.status === 'rejected') throw pause.reason;
      try {
        const load = loads.get(server)!;
        if (load.status === 'rejected') throw load.reason;
        const { transport, fallback } = load.value;
        await server.call('POST', '/reset_prefix_cache');
        // The label only after the load succeeded, read back before any request is served on the new weights.
        await server.call('POST', '/update_weight_version', { new_version: label });
        const left = Math.max(1000, deadlineMs - (Date.now() - started));
        const reported = await reportedWeights(server.baseUrl, left);
        if (reported.label !== label)
          throw new InfrastructureError(
            `weight sync to ${server.root}: the server reports weight version ${reported.label} after loading ${label}`,
          );
        await server.call('POST', '/resume');
        const seconds = (Date.now() - started) / 1000;
        const boot = reported.bootId ? { bootId: reported.bootId } : {};
        return { baseUrl: server.baseUrl, label, seconds, transport, fallback, ...boot };
      } catch (err) {
        await server.call.resume();
        throw err;
      }
    }),
  );
}

type ServerCall = (method: 'GET' | 'POST', route: string, body?: unknown) => Promise<Record<string, unknown>>;

interface Server extends SyncTarget {
  root: string;
  call: ServerCall & { resume: () => Promise<void> };
}

/** A server's dev-mode routes under the sync's deadline; every failure an InfrastructureError naming the route. */
function serverCall(target: SyncTarget, signal: AbortSignal): ServerCall & { resume: () => Promise<void> } {
  const root = target.baseUrl.replace(/\/v1\/?$/, '');
  const headers = {
    'content-type': 'application/json',
    ...(target.token ? { authorization: `Bearer ${target.token}` } : {}),
  };
  const call = async (method: 'GET' | 'POST', route: string, body?: unknown): Promise<Record<string, unknown>> => {
    let response: Response;
    try {
      response = await fetch(`${root}${route}`, {
        method,
        headers,
        body: method === 'POST' ? JSON.stringify(body ?? {}) : undefined,
        signal,
        dispatcher: longRequestDispatcher, // loading a large model's weights can pass 5 minutes
      } as RequestInit);
    } catch (err) {
      const why = signal.aborted ? 'the sync deadline passed' : errorMessage(err);
      throw new InfrastructureError(`weight sync to ${root}: ${route}: ${why}`, { cause: err });
    }
    const text = await response.text();
    if (!response.ok)
      throw new InfrastructureError(
        `weight sync to ${root}: ${route}: HTTP ${response.status}: ${text.slice(0, 300)}` +
          (response.status === 404 ? ' (a vLLM server needs VLLM_SERVER_DEV_MODE=1 for weight sync)' : ''),
      );
    try {
      return JSON.parse(text) as Record<string, unknown>;
    } catch {
      return {};
    }
  };
  // Best effort, outside the deadline: a server a failed sync left paused must not stay paused.
  const resume = () =>
    fetch(`${root}/resume`, { method: 'POST', headers, body: '{}', signal: AbortSignal.timeout(5000) }).then(
      () => undefined,
      () => undefined,
    );
  return Object.assign(call, { resume });
}

type Load = PromiseSettledResult<{ transport: WeightTransport; fallback?: string }>;

/**
 * Into the paused servers, concurrently: the adapter in `weightsPath`, or full weights pushed by the learner, and
 * for every server the push did not reach, from the folder.
 */
async function loadWeights(
  servers: Server[],
  weightsPath: string,
  collective: CollectivePush | undefined,
): Promise<Map<Server, Load>> {
  if (isAdapterFolder(weightsPath)) {
    // The served adapter replaced in place: its name, and so every request, stays the same (infra/policy-lora.ts).
    const body = { lora_name: LORA_ADAPTER_NAME, lora_path: weightsPath, load_inplace: true };
    const loaded = await Promise.allSettled(
      servers.map((s) => s.call('POST', '/v1/load_lora_adapter', body).then(() => ({ transport: 'lora' as const }))),
    );
    return new Map(servers.map((s, i) => [s, loaded[i]!]));
  }
  const fallbacks = collective ? await receiveCollective(servers, collective) : new Map<Server, string>();
  const loaded = await Promise.allSettled(
    servers.map(async (s) => {
      if (collective && !fallbacks.has(s)) return { transport: 'collective' as const };
      await s.call('POST', '/collective_rpc', { method: 'reload_weights', kwargs: { weights_path: weightsPath } });
      return { transport: 'disk' as const, fallback: fallbacks.get(s) };
    }),
  );
  return new Map(servers.map((s, i) => [s, loaded[i]!]));
}

/** A server's receiving workers, from the probe's per-worker answers: their count, or why it has no receiver. */
export function receiverWorkers(answer: Record<string, unknown>): number | string {
  const results = answer.results;
  if (!Array.isArray(results) || results.length === 0) return 'the probe returned no worker';
  const workers = results.map((r) => r as { protocol?: unknown; worker?: unknown; workers?: unknown });
  const other = workers.find((w) => w.protocol !== RECEIVER_PROTOCOL);
  if (other) return `a worker speaks receiver protocol ${String(other.protocol)}, not ${RECEIVER_PROTOCOL}`;
  const indices = workers.map((w) => w.worker).sort((a, b) => Number(a) - Number(b));
  if (!indices.every((w, i) => w === i) || workers.some((w) => w.workers !== results.length))
    return `the workers' indices ${JSON.stringify(indices)} are not 0..${results.length - 1}`;
  return results.length;
}

/** The tbt_gpu.vllm_weight_receiver protocol this side speaks: per-worker ranks (protocol 2). */
export const RECEIVER_PROTOCOL = 2;

/**
 * The paused servers join one group with the learner and receive the weights while it broadcasts them: each
 * server's workers get consecutive ranks after learner rank 0 (world = 1 + every worker). Returns, per server the
 * push did not reach, why: the caller loads the disk export there, which also repairs a load that failed half way.
 * A server without the receiver (the built-in one, vLLM without the worker extension, an older receiver) is found by
 * a cheap probe, so the learner never waits for a peer that cannot come; a failed push fails every member.
 * Every rank proves a secret drawn for this sync alone (tbt_gpu.weight_transport), so a process that joins in a
 * member's place gets no weights and the sync falls back to the export. It travels only in the push's and the
 * receives' HTTP bodies: never in a result, an error, a log or a Temporal payload.
 */
async function receiveCollective(servers: Server[], collective: CollectivePush): Promise<Map<Server, string>> {
  const why = new Map<Server, string>();
  const probes = await Promise.allSettled(
    servers.map((s) => s.call('POST', '/collective_rpc', { method: 'tbt_weight_transport' })),
  );
  const members: { server: Server; baseRank: number }[] = [];
  let world = 1;
  servers.forEach((server, i) => {
    const probe = probes[i]!;
    const workers = probe.status === 'fulfilled' ? receiverWorkers(probe.value) : errorMessage(probe.reason);
    if (typeof workers === 'string') why.set(server, `the server has no collective receiver (${workers})`);
    else {
      members.push({ server, baseRank: world });
      world += workers;
    }
  });
  if (members.length === 0) return why;
  // The learner hosts the group's store on it and binds it at once.
  const port = await freePort(collective.host);
  const { host, timeoutS, backend } = collective;
  const secret = randomBytes(32).toString('hex');
  const [sent, ...received] = await Promise.allSettled([
    collective.push(host, port, timeoutS, world, secret),
    ...members.map(({ server, baseRank }) =>
      server.call('POST', '/collective_rpc', {
        method: 'receive_tbt_weights',
        kwargs: { host, port, timeout_s: timeoutS, backend, base_rank: baseRank, world_size: world, secret },
      }),
    ),
  ]);
  members.forEach(({ server }, i) => {
    const answer = received[i]!;
    const failed = answer.status === 'rejected' ? errorMessage(answer.reason) : workerErrors(answer.value);
    if (sent.status === 'rejected') why.set(server, `the learner's push failed: ${errorMessage(sent.reason)}`);
    else if (failed) why.set(server, `the server's receive failed: ${failed}`);
  });
  return why;
}

/** The errors a receive's per-worker answers report (a failed join, transport or load), or undefined. */
function workerErrors(answer: Record<string, unknown>): string | undefined {
  const results = Array.isArray(answer.results) ? answer.results : [];
  const errors = results
    .map((r) => r as { rank?: unknown; error?: unknown } | null)
    .filter((r) => r && typeof r.error === 'string')
    .map((r) => `rank ${String(r!.rank)}: ${String(r!.error)}`);
  if (results.length === 0) return 'no worker answered';
  return errors.length ? errors.join('; ') : undefined;
}

/** The weight-version label a server reports (`GET /weight_info`); null when none was ever set. */
export async function reportedWeightLabel(baseUrl: string, timeoutMs = 10_000): Promise<string | null> {
  return (await reportedWeights(baseUrl, timeoutMs)).label;
}

/** The label and boot id a server reports (`GET /weight_info`; the boot id from its body or header, if any). */
export async function reportedWeights(
  baseUrl: string,
  timeoutMs = 10_000,
): Promise<{ label: string | null; bootId?: string }> {
  const root = baseUrl.replace(/\/v1\/?$/, '');
  try {
    const response = await fetch(`${root}/weight_info`, { signal: AbortSignal.timeout(timeoutMs) });
    if (!response.ok) throw new Error(`HTTP ${response.status}: ${(await response.text()).slice(0, 200)}`);
    const body = (await response.json()) as { weight_version?: string | number | null; boot_id?: string };
    const version = body.weight_version;
    const label = version === null || version === undefined ? null : String(version);
    const bootId = body.boot_id ?? response.headers.get(BOOT_ID_HEADER) ?? undefined;
    return { label, ...(bootId ? { bootId } : {}) };
  } catch (err) {
    throw new InfrastructureError(`weight version of ${root}: ${errorMessage(err)}`, { cause: err });
  }
}
