import { InfrastructureError, errorMessage } from '../core/errors.ts';
import type { PolicyEngine } from '../infra/embedded-policy-server.ts';
import { metrics } from '../infra/metrics.ts';
import type { PolicyLora } from '../config/lora-serving.ts';
import { isAdapterFolder } from '../infra/policy-lora.ts';
import { smallModelDir } from '../infra/python-env.ts';
import { ensureEmbeddedPolicyServer, loraZeroAdapterDir, type PolicyServerAddress } from './campaign-policy-server.ts';
import { learnerFiles } from './learner-process.ts';
import { policySyncToken } from './policy-sync-token.ts';
import { learnerWeightPush } from './learner-weight-push.ts';
import {
  reportedWeightLabel,
  syncPolicyWeights,
  weightLabel,
  type CollectivePush,
  type WeightTransport,
} from './policy-weight-sync.ts';

/**
 * Bringing a campaign's policy servers to its current weights: the embedded server (restarted on the weights
 * when it cannot take them) and external ones, checked cheaply by the label they report and synced only when it
 * differs; after a step, every server loads the new export.
 */

/** Which weights a campaign's policy servers must hold: the newest export as `weightVersion`, or the base model. */
export interface PolicyWeights {
  campaignId: string;
  weightVersion: number;
  /** The newest export; absent before the first step (then the base model's folder is loaded as version 0). */
  weightsPath?: string;
  basePath: string;
  deadlineMs: number;
  /** LoRA mode (`learner.lora`): the embedded server serves adapters; exports are adapters. */
  lora?: PolicyLora;
}

/**
 * The embedded policy server for this campaign, started if needed and brought to the campaign's current
 * weights: `weightsPath` (the newest export) as `weightVersion`, or the base model.
 */
export async function embeddedServerOnWeights(
  stateDir: string,
  want: PolicyWeights & { engine: PolicyEngine },
): Promise<PolicyServerAddress> {
  const files = learnerFiles(stateDir, want.campaignId);
  const server = await ensureEmbeddedPolicyServer(files, want.engine, false, want.lora);
  try {
    await bringToVersion(server.baseUrl, want, files.dir);
    return server;
  } catch (err) {
    // A server that cannot take the weights is restarted on them (an infrastructure fault, not the model's).
    const fresh = await ensureEmbeddedPolicyServer(files, want.engine, true, want.lora);
    await bringToVersion(fresh.baseUrl, want, files.dir, errorMessage(err));
    return fresh;
  }
}

/** External policy servers: each one brought to the campaign's current weights (synced only if it differs). */
export async function externalServersOnWeights(
  stateDir: string,
  want: PolicyWeights,
  servers: string[],
): Promise<void> {
  const dir = learnerFiles(stateDir, want.campaignId).dir;
  for (const baseUrl of servers) await bringToVersion(baseUrl, want, dir);
}

/**
 * After a step: every listed server loads the step's export as version `weightVersion`, each sync under its
 * deadline. A failed sync of the embedded server (`engine` given) restarts it on this (the newest) export and
 * warns; a failed sync of an external one throws (an infrastructure error, which Temporal retries).
 */
export async function syncStepWeights(
  stateDir: string,
  input: StepWeightSync,
  warn: (message: string, meta: Record<string, unknown>) => void,
): Promise<{ weightVersion: number; servers: SyncedServer[] }> {
  const files = learnerFiles(stateDir, input.campaignId);
  const label = weightLabel(input.campaignId, input.weightVersion);
  // An adapter export is hot-loaded as it is: the collective transport carries full weights only.
  let collective: CollectivePush | undefined;
  if (input.transport === 'collective' && !isAdapterFolder(input.weightsPath)) {
    try {
      collective = await learnerWeightPush(stateDir, input.campaignId, input.weightVersion);
    } catch (err) {
      warn('collective weight sync fell back to the disk export', { why: `no learner to push: ${errorMessage(err)}` });
    }
  }
  const sync = async (baseUrl: string): Promise<SyncedServer> => {
    const token = policySyncToken(files.dir, baseUrl);
    const r = await syncPolicyWeights(baseUrl, input.weightsPath, label, input.deadlineMs, token, collective);
    if (r.fallback) warn('collective weight sync fell back to the disk export', { baseUrl, why: r.fallback });
    metrics.weightSynced(r.seconds, 'step', r.transport);
    return { baseUrl: r.baseUrl, seconds: r.seconds, transport: r.transport };
  };
  const done: SyncedServer[] = [];
  for (const baseUrl of input.servers) {
    try {
      done.push(await sync(baseUrl));
    } catch (err) {
      if (!input.engine) throw err;
      warn('weight sync failed: restarting the embedded policy server', { baseUrl, error: errorMessage(err) });
      const fresh = await ensureEmbeddedPolicyServer(files, input.engine, true, input.lora);
      done.push(await sync(fresh.baseUrl));
    }
  }
  return { weightVersion: input.weightVersion, servers: done };
}

export interface StepWeightSync extends PolicyWeights {
  servers: string[];
  engine?: PolicyEngine;
  weightsPath: string;
  /** `collective`: the learner pushes the weights (disk stays the fallback); absent: every server loads the export. */
  transport?: WeightTransport;
}

export interface SyncedServer {
  baseUrl: string;
  seconds: number;
  transport?: WeightTransport;
}

/** Syncs a server only when it reports another label than the campaign's current version (cheap to call). */
async function bringToVersion(
  baseUrl: string,
  want: PolicyWeights,
  campaignDir: string,
  after?: string,
): Promise<void> {
  const label = weightLabel(want.campaignId, want.weightVersion);
  if ((await reportedWeightLabel(baseUrl)) === label) return;
  // Version 0 in LoRA mode is the zero adapter: loading the base weights would leave a trained adapter in place.
  const zero = want.lora ? loraZeroAdapterDir(campaignDir) : undefined;
  const base = zero && isAdapterFolder(zero) ? zero : want.basePath === 'embedded' ? smallModelDir() : want.basePath;
  const folder = want.weightsPath ?? base;
  try {
    const r = await syncPolicyWeights(baseUrl, folder, label, want.deadlineMs, policySyncToken(campaignDir, baseUrl));
    metrics.weightSynced(r.seconds, 'catch_up', r.transport);
  } catch (err) {
    if (after) throw new InfrastructureError(`${errorMessage(err)} (after a restart; first failure: ${after})`);
    throw err;
  }
}
