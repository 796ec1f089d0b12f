import fs from 'node:fs';
import path from 'node:path';
import { Context } from '@temporalio/activity';
import { heartbeating } from './activity-heartbeat.ts';
import type { CampaignConfig } from '../config/campaign-config.ts';
import type { Environment } from '../config/environment.ts';
import { BadInputError, InfrastructureError, errorMessage } from '../core/errors.ts';
import { withFailureMapping } from './temporal-failure.ts';
import { defaultRetention, pruneLearnerFolder } from '../infra/retention.ts';
import { withClient } from '../infra/control-database.ts';
import { readPid, stopPid } from '../infra/daemon.ts';
import { startPolicyServer, writeRunToken, type PolicyEngine } from '../infra/embedded-policy-server.ts';
import { smallModelDir } from '../infra/python-env.ts';
import type { Trajectory } from '../rollout/policy-driver.ts';
import { learnerConfigJson } from '../learner-control/learner-config.ts';
import { policyServerUrlFile, policySyncToken, policyTokenFile } from '../learner-control/policy-sync-token.ts';
import { reportedWeightLabel, syncPolicyWeights, weightLabel } from '../learner-control/policy-weight-sync.ts';
import {
  ensureLearner,
  ensureLearnerNode,
  launchFile,
  learnerFiles,
  learnerRequest,
  LearnerHttpError,
  stopLearner,
  type LearnerEndpoint,
} from '../learner-control/learner-process.ts';
import { learnerLaunch, type LearnerLaunch } from '../learner-control/learner-launch.ts';

/**
 * Activities of the GPU worker (one per GPU host, on its own task queue): start the campaign's learner,
 * apply a training step (heartbeating; cancellation reaches the learner), export and sync weights, and run
 * the embedded policy server for the local default. Batches are built here from episode rows in the
 * control database and handed to the learner as a file path: token arrays never travel in payloads.
 */

export interface BatchItem {
  episodeId: string;
  advantage: number;
}
export interface TrainStepInput {
  campaignId: string;
  stepId: number;
  items: BatchItem[];
  learner: CampaignConfig['learner'];
  samplingTemperature?: number;
}
export interface TrainStepResult {
  stepId: number;
  repeated: boolean;
  checkpoint: string;
  metrics: Record<string, unknown>;
}

function nonRetryable(err: unknown): never {
  if (err instanceof LearnerHttpError && err.status >= 400 && err.status < 500 && err.code !== 'not_ready') {
    throw new BadInputError(err.message);
  }
  throw err;
}

export function createGpuActivities(deps: { stateDir: string; controlUrl: string }) {
  const files = (campaignId: string) => learnerFiles(deps.stateDir, campaignId);

  /**
   * Node 0's learner: started here (one node: standalone; several: this node's share of the c10d rendezvous, the
   * other nodes' GPU workers starting theirs), or, with `attach_url`, one started outside, which must answer with
   * the campaign's world size.
   */
  async function learnerEndpoint(input: {
    campaignId: string;
    learner: CampaignConfig['learner'];
    seed: number;
    samplingTemperature?: number;
  }): Promise<LearnerEndpoint> {
    const { learner } = input;
    if (learner.attach_url !== undefined) {
      const endpoint = await attachedLearner(learner);
      const f = files(input.campaignId);
      fs.mkdirSync(f.dir, { recursive: true });
      const record = { url: endpoint.url, tokenFile: learner.attach_token_file };
      fs.writeFileSync(path.join(f.dir, 'attach.json'), JSON.stringify(record));
      return endpoint;
    }
    return ensureLearner(
      files(input.campaignId),
      learnerConfigJson(learner, input.seed, input.samplingTemperature),
      learnerLaunch(learner, input.campaignId, 0),
    );
  }

  async function writeBatch(input: TrainStepInput): Promise<string> {
    const dir = path.join(files(input.campaignId).dir, 'batches');
    fs.mkdirSync(dir, { recursive: true });
    const file = path.join(dir, `step-${input.stepId}.jsonl`);
    const ids = input.items.map((i) => i.episodeId);
    const rows = await withClient(deps.controlUrl, (c) =>
      c.query<{ id: string; trajectory: Trajectory | null }>(
        `SELECT id, record->'trajectory' AS trajectory FROM episodes WHERE id = ANY($1)`,
        [ids],
      ),
    );
    const byId = new Map(rows.rows.map((r) => [r.id, r.trajectory]));
    const lines = input.items.map((item) => {
      const t = byId.get(item.episodeId);
      if (!t) throw new BadInputError(`episode ${item.episodeId} has no token trajectory (was it run in token mode?)`);
      return JSON.stringify({
        trajectory_id: item.episodeId,
        input_ids: t.tokenIds,
        loss_mask: t.lossMask,
        old_logprobs: t.logprobs,
        advantage: item.advantage,
      });
    });
    fs.writeFileSync(`${file}.tmp`, `${lines.join('\n')}\n`);
    fs.renameSync(`${file}.tmp`, file);
    return file;
  }

  return withFailureMapping({
    async startLearner(input: {
      campaignId: string;
      learner: CampaignConfig['learner'];
      seed: number;
      samplingTemperature?: number;
    }): Promise<{ controlUrl: string; manifest: Record<string, unknown> }> {
      return heartbeating(async () => {
        const learner = await learnerEndpoint(input);
        // The URL only: the token never enters an activity result (Temporal keeps those in its history).
        return { controlUrl: learner.url, manifest: await learnerRequest(learner, 'GET', '/manifest') };
      });
    },

    /**
     * Node `nodeRank` (> 0) of a multi-node learner, on that node's GPU worker: starts its torchrun (its ranks
     * then wait in the rendezvous) or finds it running. Node 0's startLearner or trainStep sees every rank join.
     */
    async startLearnerNode(input: {
      campaignId: string;
      learner: CampaignConfig['learner'];
      seed: number;
      samplingTemperature?: number;
      nodeRank: number;
    }): Promise<{ nodeRank: number; pid: number; started: boolean }> {
      if (input.nodeRank < 1 || input.nodeRank >= input.learner.nodes)
        throw new BadInputError(`learner node rank ${input.nodeRank}: outside 1..${input.learner.nodes - 1}`);
      return heartbeating(async () => {
        const started = await ensureLearnerNode(
          learnerFiles(deps.stateDir, input.campaignId, input.nodeRank),
          learnerConfigJson(input.learner, input.seed, input.samplingTemperature),
          learnerLaunch(input.learner, input.campaignId, input.nodeRank),
        );
        return { nodeRank: input.nodeRank, ...started };
      });
    },

    async trainStep(input: TrainStepInput & { seed: number }): Promise<TrainStepResult> {
      const ctx = Context.current();
      const started = Date.now();
      const beat = setInterval(
        () => ctx.heartbeat({ stepId: input.stepId, seconds: Math.round((Date.now() - started) / 1000) }),
        5000,
      );
      const batchRef = await writeBatch(input).catch((err: unknown) => {
        clearInterval(beat);
        throw err;
      });
      // A learner that died (kill -9, OOM) is restarted from its last checkpoint; the step id makes the retry exact.
      const learner = await learnerEndpoint(input).catch((err: unknown) => {
        clearInterval(beat);
        throw err;
      });
      const cancelled = ctx.cancelled.catch(async (err: unknown) => {
        await learnerRequest(learner, 'POST', '/cancel', {}, 10_000).catch(() => undefined);
        throw err;
      });
      try {
        const answer = await Promise.race([
          learnerRequest<{ step_id: number; result: Record<string, unknown>; repeated: boolean; checkpoint: string }>(
            learner,
            'POST',
            '/train_step',
            { step_id: input.stepId, batch_ref: batchRef },
            3 * 3600_000,
          ),
          cancelled,
        ]);
        ctx.log.info('learner step done', {
          campaignId: input.campaignId,
          stepId: answer.step_id,
          repeated: answer.repeated,
          episodes: input.items.length,
          seconds: (Date.now() - started) / 1000,
        });
        // Retention: batches of committed steps and all but the last exports go (tbt gc does the same).
        pruneLearnerFolder(files(input.campaignId).dir, defaultRetention);
        return {
          stepId: answer.step_id,
          repeated: answer.repeated,
          checkpoint: answer.checkpoint,
          metrics: answer.result,
        };
      } catch (err) {
        return nonRetryable(err);
      } finally {
        clearInterval(beat);
      }
    },

    async exportWeights(input: { campaignId: string; stepId: number }): Promise<{ path: string }> {
      return heartbeating(async () => {
        const learner = await ensureLearnerRunning(files(input.campaignId));
        try {
          const answer = await learnerRequest<{ path: string }>(
            learner,
            'POST',
            '/export',
            { step_id: input.stepId },
            30 * 60_000,
          );
          pruneLearnerFolder(files(input.campaignId).dir, defaultRetention);
          return { path: answer.path };
        } catch (err) {
          return nonRetryable(err);
        }
      });
    },

    /**
     * The embedded policy server for this campaign (local default), started if needed and brought to the
     * campaign's current weights: `weightsPath` (the newest export) as `weightVersion`, or the base model.
     */
    async ensurePolicyServer(
      input: PolicyWeights & { engine: PolicyEngine },
    ): Promise<{ baseUrl: string; model: string }> {
      return heartbeating(async () => {
        const server = await ensurePolicyServerNow(input.campaignId, input.engine);
        try {
          await bringToVersion(server.baseUrl, input, files(input.campaignId).dir);
          return server;
        } catch (err) {
          // A server that cannot take the weights is restarted on them (an infrastructure fault, not the model's).
          const fresh = await ensurePolicyServerNow(input.campaignId, input.engine, true);
          await bringToVersion(fresh.baseUrl, input, files(input.campaignId).dir, errorMessage(err));
          return fresh;
        }
      });
    },

    /** External policy servers: each one brought to the campaign's current weights (synced only if it differs). */
    async ensurePolicyWeights(input: PolicyWeights & { servers: string[] }): Promise<void> {
      return heartbeating(async () => {
        for (const baseUrl of input.servers) await bringToVersion(baseUrl, input, files(input.campaignId).dir);
      });
    },

    /**
     * After a step: every listed server loads the step's export as version `weightVersion`, each sync under its
     * deadline. A failed sync of the embedded server restarts it on this (the newest) export; a failed sync of
     * an external one fails the activity, which Temporal retries (it is an infrastructure error).
     */
    async syncWeights(
      input: PolicyWeights & { servers: string[]; engine?: PolicyEngine; weightsPath: string },
    ): Promise<{ weightVersion: number; servers: { baseUrl: string; seconds: number }[] }> {
      return heartbeating(async () => {
        const label = weightLabel(input.campaignId, input.weightVersion);
        const done: { baseUrl: string; seconds: number }[] = [];
        for (const baseUrl of input.servers) {
          try {
            const r = await syncPolicyWeights(
              baseUrl,
              input.weightsPath,
              label,
              input.deadlineMs,
              policySyncToken(files(input.campaignId).dir, baseUrl),
            );
            done.push({ baseUrl, seconds: r.seconds });
          } catch (err) {
            if (!input.engine) throw err;
            Context.current().log.warn('weight sync failed: restarting the embedded policy server', {
              baseUrl,
              error: errorMessage(err),
            });
            const fresh = await ensurePolicyServerNow(input.campaignId, input.engine, true);
            const r = await syncPolicyWeights(
              fresh.baseUrl,
              input.weightsPath,
              label,
              input.deadlineMs,
              policySyncToken(files(input.campaignId).dir, fresh.baseUrl),
            );
            done.push({ baseUrl: fresh.baseUrl, seconds: r.seconds });
          }
        }
        return { weightVersion: input.weightVersion, servers: done };
      });
    },

    /** Stops the campaign's learner and its embedded policy server (when the campaign ends). */
    async stopLearner(input: { campaignId: string }): Promise<void> {
      await stopLearner(files(input.campaignId));
      const pid = readPid(files(input.campaignId).policyServerPid);
      if (pid !== undefined) await stopPid(-pid, 20_000);
    },
  });

  async function ensurePolicyServerNow(
    campaignId: string,
    engine: PolicyEngine,
    restart = false,
  ): Promise<{ baseUrl: string; model: string }> {
    const { dir, policyServerPid: pidFile } = files(campaignId);
    fs.mkdirSync(dir, { recursive: true });
    const urlFile = policyServerUrlFile(dir);
    if (!restart && readPid(pidFile) !== undefined && fs.existsSync(urlFile)) {
      const known = JSON.parse(fs.readFileSync(urlFile, 'utf8')) as { baseUrl: string; model: string; engine?: string };
      const ok = await fetch(known.baseUrl.replace(/\/v1$/, '/health'), { signal: AbortSignal.timeout(3000) }).then(
        (r) => r.ok,
        () => false,
      );
      if (ok && (known.engine ?? 'builtin') === engine) return { baseUrl: known.baseUrl, model: known.model };
    }
    // An old server that is alive but not answering is replaced, not left running beside the new one.
    const stale = readPid(pidFile);
    if (stale !== undefined) await stopPid(-stale, 20_000);
    const handle = await startPolicyServer({
      engine,
      logFile: path.join(dir, 'policy-server.log'),
      detached: true,
      // The built-in server's weight-sync routes need this run's token and load only from these folders.
      reloadTokenFile: writeRunToken(policyTokenFile(dir)),
      weightsRoots: [dir, smallModelDir()],
    });
    const server = { baseUrl: handle.baseUrl, model: handle.model };
    fs.writeFileSync(pidFile, String(handle.process.pid));
    fs.writeFileSync(urlFile, JSON.stringify({ ...server, engine }));
    return server;
  }

  /** The campaign's learner as last launched here (export follows a step, so it normally answers at once). */
  async function ensureLearnerRunning(f: ReturnType<typeof files>): Promise<LearnerEndpoint> {
    const attached = path.join(f.dir, 'attach.json');
    if (fs.existsSync(attached)) {
      const { url, tokenFile } = JSON.parse(fs.readFileSync(attached, 'utf8')) as { url: string; tokenFile: string };
      return { url, token: fs.readFileSync(tokenFile, 'utf8').trim() };
    }
    const config = JSON.parse(fs.readFileSync(f.config, 'utf8')) as Record<string, unknown>;
    const launch = JSON.parse(fs.readFileSync(launchFile(f), 'utf8')) as LearnerLaunch;
    return ensureLearner(f, config, launch);
  }

  /**
   * A learner started outside: healthy, with the world size the campaign states. Its token is read from
   * `attach_token_file` (the learner's control.token, 0600) on each start; only the file's path is recorded.
   */
  async function attachedLearner(learner: CampaignConfig['learner']): Promise<LearnerEndpoint> {
    const url = learner.attach_url!.replace(/\/$/, '');
    const endpoint = { url, token: fs.readFileSync(learner.attach_token_file!, 'utf8').trim() };
    const health = await learnerRequest<{ ready?: boolean; world_size?: number }>(
      endpoint,
      'GET',
      '/health',
      undefined,
      10_000,
    );
    if (health.ready !== true) throw new InfrastructureError(`learner at ${url} is not ready yet`);
    const want = learner.nodes * learner.gpus_per_node;
    if (health.world_size !== want)
      throw new BadInputError(
        `learner.attach_url: the learner at ${url} runs ${health.world_size} rank(s), the campaign states ` +
          `nodes x gpus_per_node = ${want}`,
      );
    return endpoint;
  }
}

/** Which weights a campaign's policy servers must hold: the newest export as `weightVersion`, or the base model. */
export interface PolicyWeights {
  campaignId: string;
  weightVersion: number;
  /** The newest export; absent before the first step (then the base model's folder is loaded as version 0). */
  weightsPath?: string;
  basePath: string;
  deadlineMs: number;
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
  const folder = want.weightsPath ?? (want.basePath === 'embedded' ? smallModelDir() : want.basePath);
  try {
    await syncPolicyWeights(baseUrl, folder, label, want.deadlineMs, policySyncToken(campaignDir, baseUrl));
  } catch (err) {
    if (after) throw new InfrastructureError(`${errorMessage(err)} (after a restart; first failure: ${after})`);
    throw err;
  }
}

export type GpuActivities = ReturnType<typeof createGpuActivities>;
export const gpuHost = (env: Pick<Environment, 'TBT_GPU_HOST'>) => env.TBT_GPU_HOST;
