import { InfrastructureError, errorMessage } from '../core/errors.ts';
import { freePort } from '../infra/embedded-policy-server.ts';
import { longRequestDispatcher } from '../infra/long-request-dispatcher.ts';
import { isAdapterFolder, LORA_ADAPTER_NAME } from '../infra/policy-lora.ts';

/**
 * Full-weight sync into one policy server from an exported safetensors folder, in vLLM's dev-mode protocol
 * (the built-in server speaks the same routes): pause (waiting for in-flight requests), reload the weights
 * from the folder (or receive them from the learner over the collective transport), reset the prefix cache
 * (entries computed with the old weights must not be reused), record the weight version, resume. The whole
 * sequence runs under one deadline; any failure, or a server that then reports another version, is an
 * InfrastructureError. A server left paused by a failed sync is resumed on a
 * best-effort basis (the caller restarts or re-syncs it). The folder must be readable by the server's host.
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
}

/**
 * The learner's end of a collective push: sends the step's weights into whoever joins `host:port` as rank 1,
 * within `timeoutS` (learner-control/learner-weight-push.ts).
 */
export interface CollectivePush {
  host: string;
  timeoutS: number;
  /** Both ends must use the same: NCCL when the learner runs on CUDA, gloo otherwise. */
  backend: 'gloo' | 'nccl';
  push: (host: string, port: number, timeoutS: number) => Promise<unknown>;
}

/**
 * The label a server holds for a campaign's weight version: the campaign id is part of it, so a server reused
 * from another campaign (or restarted on other weights) never passes for holding this campaign's version.
 */
export function weightLabel(campaignId: string, weightVersion: number): string {
  return `${campaignId}@${weightVersion}`;
}

export async function syncPolicyWeights(
  baseUrl: string,
  weightsPath: string,
  label: string,
  deadlineMs: number,
  /** Bearer token of the built-in server's weight-sync routes (vLLM's dev-mode routes take none). */
  token?: string,
  /** Push the weights from the learner instead of loading the folder; the folder stays the fallback. */
  collective?: CollectivePush,
): Promise<WeightSyncResult> {
  const root = baseUrl.replace(/\/v1\/?$/, '');
  const started = Date.now();
  const signal = AbortSignal.timeout(deadlineMs);
  const call = async (method: 'GET' | 'POST', route: string, body?: unknown): Promise<Record<string, unknown>> => {
    let response: Response;
    try {
      response = await fetch(`${root}${route}`, {
        method,
        headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
        body: method === 'POST' ? JSON.stringify(body ?? {}) : undefined,
        signal,
        dispatcher: longRequestDispatcher, // loading a large model's weights can pass 5 minutes
      } as RequestInit);
    } catch (err) {
      const why = signal.aborted ? `deadline of ${deadlineMs} ms passed` : errorMessage(err);
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
  let paused = false;
  try {
    await call('POST', '/pause?mode=wait');
    paused = true;
    const { transport, fallback } = await loadWeights(call, weightsPath, collective);
    await call('POST', '/reset_prefix_cache');
    await call('POST', '/update_weight_version', { new_version: label });
    await call('POST', '/resume');
    paused = false;
    const reported = await reportedWeightLabel(baseUrl, Math.max(1000, deadlineMs - (Date.now() - started)));
    if (reported !== label)
      throw new InfrastructureError(
        `weight sync to ${root}: the server reports weight version ${reported} after loading ${label}`,
      );
    return { baseUrl, label, seconds: (Date.now() - started) / 1000, transport, fallback };
  } finally {
    if (paused) {
      await fetch(`${root}/resume`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
        body: '{}',
        signal: AbortSignal.timeout(5000),
      }).catch(() => undefined);
    }
  }
}

type ServerCall = (method: 'GET' | 'POST', route: string, body?: unknown) => Promise<Record<string, unknown>>;

/** Into the paused server: the adapter in `weightsPath`, or full weights pushed by the learner or from the folder. */
async function loadWeights(
  call: ServerCall,
  weightsPath: string,
  collective: CollectivePush | undefined,
): Promise<{ transport: WeightTransport; fallback?: string }> {
  if (isAdapterFolder(weightsPath)) {
    // The served adapter replaced in place: its name, and so every request, stays the same (infra/policy-lora.ts).
    await call('POST', '/v1/load_lora_adapter', {
      lora_name: LORA_ADAPTER_NAME,
      lora_path: weightsPath,
      load_inplace: true,
    });
    return { transport: 'lora' };
  }
  const fallback = collective ? await receiveCollective(call, collective) : undefined;
  if (collective && fallback === undefined) return { transport: 'collective' };
  await call('POST', '/collective_rpc', { method: 'reload_weights', kwargs: { weights_path: weightsPath } });
  return { transport: 'disk', fallback };
}

/**
 * The server (paused) joins the learner's group and receives the weights while the learner sends them. Returns
 * undefined on success, or why it failed: the caller then loads the disk export, which also repairs a load that
 * failed half way. A server without the receiver (the built-in one, or vLLM started without the worker extension)
 * is found by a cheap probe, so the learner never waits for a peer that cannot come.
 */
async function receiveCollective(call: ServerCall, collective: CollectivePush): Promise<string | undefined> {
  try {
    await call('POST', '/collective_rpc', { method: 'tbt_weight_transport' });
  } catch (err) {
    return `the server has no collective receiver (${errorMessage(err)})`;
  }
  // The learner hosts the group's store on it and binds it at once.
  const port = await freePort(collective.host);
  const { host, timeoutS, backend } = collective;
  const kwargs = { host, port, timeout_s: timeoutS, backend };
  const [sent, received] = await Promise.allSettled([
    collective.push(host, port, timeoutS),
    call('POST', '/collective_rpc', { method: 'receive_tbt_weights', kwargs }),
  ]);
  if (sent.status === 'rejected') return `the learner's push failed: ${errorMessage(sent.reason)}`;
  if (received.status === 'rejected') return `the server's receive failed: ${errorMessage(received.reason)}`;
  return undefined;
}

/** The weight-version label a server reports (`GET /weight_info`); null when none was ever set. */
export async function reportedWeightLabel(baseUrl: string, timeoutMs = 10_000): Promise<string | null> {
  const root = baseUrl.replace(/\/v1\/?$/, '');
  try {
    const response = await fetch(`${root}/weight_info`, { signal: AbortSignal.timeout(timeoutMs) });
    if (!response.ok) throw new Error(`HTTP ${response.status}: ${(await response.text()).slice(0, 200)}`);
    const body = (await response.json()) as { weight_version?: string | number | null };
    return body.weight_version === null || body.weight_version === undefined ? null : String(body.weight_version);
  } catch (err) {
    throw new InfrastructureError(`weight version of ${root}: ${errorMessage(err)}`, { cause: err });
  }
}
