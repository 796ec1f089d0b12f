import { BadInputError, InfrastructureError, errorMessage } from '../core/errors.ts';
import type { PolicyEngine } from '../infra/embedded-policy-server.ts';
import { metrics } from '../infra/metrics.ts';
import type { PolicyLora } from '../config/lora-serving.ts';
import { isAdapterFolder } from '../infra/policy-lora.ts';
import { smallModelDir } from '../infra/python-env.ts';
import { ensureEmbeddedPolicyServer, loraZeroAdapterDir, type PolicyServerAddress } from './campaign-policy-server.ts';
import { learnerFiles } from './learner-process.ts';
import { policySyncToken } from './policy-sync-token.ts';
import { learnerWeightPush } from './learner-weight-push.ts';
import { parseWeightLabel } from '../rollout/served-weights.ts';
import {
  reportedWeightLabel,
  syncPolicyServers,
  syncPolicyWeights,
  weightLabel,
  type CollectivePush,
  type WeightSyncResult,
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
  /** The embedded server serves the sampled distribution's log-probabilities (`learner.sampler_logprobs`). */
  logprobs?: 'processed';
  /**
   * An evaluation of an older step: refuse servers that hold a newer version of this campaign (loading the older
   * export would move the campaign's servers back under its episodes) instead of syncing them.
   */
  refuseOlder?: boolean;
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
  const server = await ensureEmbeddedPolicyServer(files, want.engine, false, want.lora, want.logprobs);
  try {
    await bringToVersion(server.baseUrl, want, files.dir);
    return server;
  } catch (err) {
    // A server that cannot take the weights is restarted on them (an infrastructure fault, not the model's).
    const fresh = await ensureEmbeddedPolicyServer(files, want.engine, true, want.lora, want.logprobs);
    await bringToVersion(fresh.baseUrl, want, files.dir, errorMessage(err));
    return fresh;
  }
}

/**
 * External policy servers: each one brought to the campaign's current weights (synced only if it differs), all at
 * once.
 */
export async function externalServersOnWeights(
  stateDir: string,
  want: PolicyWeights,
  servers: string[],
): Promise<void> {
  const dir = learnerFiles(stateDir, want.campaignId).dir;
  if (want.refuseOlder) await refuseOlderExport(want, servers);
  const settled = await Promise.allSettled(servers.map((baseUrl) => bringToVersion(baseUrl, want, dir)));
  const failed = settled.find((r) => r.status === 'rejected');
  if (failed) throw failed.reason;
}

/**
 * After a step: every listed server loads the step's export as version `weightVersion`, all at once under one
 * deadline (with `transport: collective`, one broadcast from the learner into every server's workers). A failed
 * sync of the embedded server (`engine` given) restarts it on this (the newest) export and warns; a failed sync of
 * an external one throws (an infrastructure error, which Temporal retries).
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
      collective = await learnerWeightPush(
        stateDir,
        input.campaignId,
        input.weightVersion,
        undefined,
        input.transportHost,
      );
    } catch (err) {
      warn('collective weight sync fell back to the disk export', { why: `no learner to push: ${errorMessage(err)}` });
    }
  }
  const recorded = (r: WeightSyncResult): SyncedServer => {
    if (r.fallback)
      warn('collective weight sync fell back to the disk export', { baseUrl: r.baseUrl, why: r.fallback });
    metrics.weightSynced(r.seconds, 'step', r.transport);
    return { baseUrl: r.baseUrl, seconds: r.seconds, transport: r.transport };
  };
  const targets = input.servers.map((baseUrl) => ({ baseUrl, token: policySyncToken(files.dir, baseUrl) }));
  const pauseMode = input.interrupt ? 'abort' : 'wait';
  const settled = await syncPolicyServers(targets, input.weightsPath, label, input.deadlineMs, collective, pauseMode);
  const done: SyncedServer[] = [];
  for (const [i, r] of settled.entries()) {
    if (r.status === 'fulfilled') {
      done.push(recorded(r.value));
      continue;
    }
    if (!input.engine) throw r.reason;
    const baseUrl = input.servers[i]!;
    warn('weight sync failed: restarting the embedded policy server', { baseUrl, error: errorMessage(r.reason) });
    const fresh = await ensureEmbeddedPolicyServer(files, input.engine, true, input.lora, input.logprobs);
    const token = policySyncToken(files.dir, fresh.baseUrl);
    done.push(
      recorded(await syncPolicyWeights(fresh.baseUrl, input.weightsPath, label, input.deadlineMs, token, collective)),
    );
  }
  return { weightVersion: input.weightVersion, servers: done };
}

export interface StepWeightSync extends PolicyWeights {
  servers: string[];
  engine?: PolicyEngine;
  weightsPath: string;
  /** `collective`: the learner pushes the weights (disk stays the fallback); absent: every server loads the export. */
  transport?: WeightTransport;
  /** Where the servers reach learner rank 0 for a collective push (`learner.weight_transport_host`). */
  transportHost?: string;
  /** `training.partial_rollouts`: cut generations in flight short (`/pause?mode=abort`) instead of waiting. */
  interrupt?: boolean;
}

export interface SyncedServer {
  baseUrl: string;
  seconds: number;
  transport?: WeightTransport;
}

/** A server that holds a newer version of the campaign than `want` is refused (bad input: not retried). */
async function refuseOlderExport(want: PolicyWeights, servers: string[]): Promise<void> {
  for (const baseUrl of servers) {
    const held = parseWeightLabel(await reportedWeightLabel(baseUrl));
    if (held && held.owner === want.campaignId && held.version > want.weightVersion)
      throw new BadInputError(
        `policy server ${baseUrl} holds campaign ${want.campaignId}'s weight version ${held.version}: evaluating ` +
          `step ${want.weightVersion} would load an older export into the campaign's server. Evaluate with ` +
          'episode.policy.base_url: embedded (a server of its own), or after the campaign ended',
      );
  }
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
