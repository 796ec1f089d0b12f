import { InfrastructureError, errorMessage } from '../core/errors.ts';
import { longRequestDispatcher } from '../infra/long-request-dispatcher.ts';

/**
 * Full-weight sync into one policy server from an exported safetensors folder, in vLLM's dev-mode protocol
 * (the built-in server speaks the same routes): pause (waiting for in-flight requests), reload the weights
 * from the folder, reset the prefix cache (entries computed with the old weights must not be reused), record
 * the weight version, resume. The whole sequence runs under one deadline; any failure, or a server that then
 * reports another version, is an InfrastructureError. A server left paused by a failed sync is resumed on a
 * best-effort basis (the caller restarts or re-syncs it). The folder must be readable by the server's host.
 */

export interface WeightSyncResult {
  baseUrl: string;
  label: string;
  seconds: number;
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
    await call('POST', '/collective_rpc', { method: 'reload_weights', kwargs: { weights_path: weightsPath } });
    await call('POST', '/reset_prefix_cache');
    await call('POST', '/update_weight_version', { new_version: label });
    await call('POST', '/resume');
    paused = false;
    const reported = await reportedWeightLabel(baseUrl, Math.max(1000, deadlineMs - (Date.now() - started)));
    if (reported !== label)
      throw new InfrastructureError(
        `weight sync to ${root}: the server reports weight version ${reported} after loading ${label}`,
      );
    return { baseUrl, label, seconds: (Date.now() - started) / 1000 };
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
