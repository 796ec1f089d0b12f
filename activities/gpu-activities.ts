import fs from 'node:fs';
import path from 'node:path';
import { ApplicationFailure, Context } from '@temporalio/activity';
import { heartbeating } from './activity-heartbeat.ts';
import type { CampaignConfig } from '../config/campaign-config.ts';
import type { Environment } from '../config/environment.ts';
import { InfrastructureError, errorMessage } from '../core/errors.ts';
import { withClient } from '../infra/control-database.ts';
import { readPid, stopPid } from '../infra/daemon.ts';
import { startPolicyServer, writeRunToken } from '../infra/embedded-policy-server.ts';
import { smallModelDir } from '../infra/python-env.ts';
import type { Trajectory } from './policy-driver.ts';
import {
  ensureLearner,
  learnerFiles,
  learnerRequest,
  LearnerHttpError,
  stopLearner,
  type LearnerEndpoint,
} from './learner-process.ts';

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
}
export interface TrainStepResult {
  stepId: number;
  repeated: boolean;
  checkpoint: string;
  metrics: Record<string, unknown>;
}

export function learnerConfigJson(learner: CampaignConfig['learner'], seed: number): Record<string, unknown> {
  const modelPath = learner.model_path === 'embedded' ? smallModelDir() : learner.model_path;
  const cuda = learner.device === 'cuda';
  return {
    model: { path: modelPath, dtype: cuda ? 'bfloat16' : 'float32', export_dtype: cuda ? 'bfloat16' : 'float32' },
    checkpoint: { dir: '', keep_last: learner.keep_checkpoints },
    distributed: {
      device: learner.device,
      backend: cuda ? 'nccl' : 'gloo',
      world_size: learner.nodes * learner.gpus_per_node,
    },
    fsdp: { cpu_offload: learner.cpu_offload, activation_checkpointing: learner.activation_checkpointing },
    optimizer: { lr: learner.lr, betas: learner.betas, eps: learner.eps, weight_decay: learner.weight_decay },
    loss: { eps_low: learner.eps_low, eps_high: learner.eps_high, dual_clip_c: learner.dual_clip_c },
    train: { grad_clip: learner.grad_clip, micro_batch_tokens: learner.micro_batch_tokens, seed },
  };
}

function nonRetryable(err: unknown): never {
  if (err instanceof LearnerHttpError && err.status >= 400 && err.status < 500 && err.code !== 'not_ready') {
    throw ApplicationFailure.nonRetryable(err.message, 'BadInput');
  }
  throw err;
}

export function createGpuActivities(deps: { stateDir: string; controlUrl: string }) {
  const files = (campaignId: string) => learnerFiles(deps.stateDir, campaignId);

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
      if (!t)
        throw ApplicationFailure.nonRetryable(
          `episode ${item.episodeId} has no token trajectory (was it run in token mode?)`,
          'BadInput',
        );
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

  return {
    async startLearner(input: {
      campaignId: string;
      learner: CampaignConfig['learner'];
      seed: number;
    }): Promise<{ controlUrl: string; manifest: Record<string, unknown> }> {
      return heartbeating(async () => {
        const learner = await ensureLearner(
          files(input.campaignId),
          learnerConfigJson(input.learner, input.seed),
          input.learner.gpus_per_node,
        );
        // The URL only: the token never enters an activity result (Temporal keeps those in its history).
        return { controlUrl: learner.url, manifest: await learnerRequest(learner, 'GET', '/manifest') };
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
      const learner = await ensureLearner(
        files(input.campaignId),
        learnerConfigJson(input.learner, input.seed),
        input.learner.gpus_per_node,
      ).catch((err: unknown) => {
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
          return { path: answer.path };
        } catch (err) {
          return nonRetryable(err);
        }
      });
    },

    /** The embedded CPU policy server for this campaign (local default), serving `weightsPath` if given. */
    async ensurePolicyServer(input: {
      campaignId: string;
      weightsPath?: string;
    }): Promise<{ baseUrl: string; model: string }> {
      return heartbeating(() => ensurePolicyServerNow(input));
    },

    async syncWeights(input: {
      baseUrl: string;
      path: string;
      campaignId?: string;
    }): Promise<{ weightVersion: number }> {
      const tokenFile = input.campaignId ? policyTokenFile(files(input.campaignId).dir) : undefined;
      return heartbeating(() => syncWeightsTo(input.baseUrl, input.path, tokenFile));
    },

    /** Stops the campaign's learner and its embedded policy server (when the campaign ends). */
    async stopLearner(input: { campaignId: string }): Promise<void> {
      await stopLearner(files(input.campaignId));
      const pid = readPid(path.join(files(input.campaignId).dir, 'policy-server.pid'));
      if (pid !== undefined) await stopPid(-pid, 20_000);
    },
  };

  async function ensurePolicyServerNow(input: {
    campaignId: string;
    weightsPath?: string;
  }): Promise<{ baseUrl: string; model: string }> {
    const dir = files(input.campaignId).dir;
    fs.mkdirSync(dir, { recursive: true });
    const pidFile = path.join(dir, 'policy-server.pid');
    const urlFile = path.join(dir, 'policy-server.json');
    let server: { baseUrl: string; model: string } | undefined;
    if (readPid(pidFile) !== undefined && fs.existsSync(urlFile)) {
      const known = JSON.parse(fs.readFileSync(urlFile, 'utf8')) as { baseUrl: string; model: string };
      const ok = await fetch(known.baseUrl.replace(/\/v1$/, '/health'), { signal: AbortSignal.timeout(3000) }).then(
        (r) => r.ok,
        () => false,
      );
      if (ok) server = known;
    }
    if (!server) {
      // An old server that is alive but not answering is replaced, not left running beside the new one.
      const stale = readPid(pidFile);
      if (stale !== undefined) await stopPid(-stale, 20_000);
      const handle = await startPolicyServer({
        logFile: path.join(dir, 'policy-server.log'),
        detached: true,
        reloadTokenFile: writeRunToken(policyTokenFile(dir)),
        weightsRoots: [dir],
      });
      server = { baseUrl: handle.baseUrl, model: handle.model };
      fs.writeFileSync(pidFile, String(handle.process.pid));
      fs.writeFileSync(urlFile, JSON.stringify(server));
    }
    if (input.weightsPath) await syncWeightsTo(server.baseUrl, input.weightsPath, policyTokenFile(dir));
    return server;
  }

  async function ensureLearnerRunning(f: ReturnType<typeof files>): Promise<LearnerEndpoint> {
    const config = JSON.parse(fs.readFileSync(f.config, 'utf8')) as Record<string, unknown> & {
      distributed: { world_size: number };
    };
    return ensureLearner(f, config, config.distributed.world_size);
  }
}

/** The embedded policy server's reload token for a campaign folder (written 0600 at each server start). */
export function policyTokenFile(campaignDir: string): string {
  return path.join(campaignDir, 'policy-server.token');
}

async function syncWeightsTo(
  baseUrl: string,
  weightsPath: string,
  tokenFile?: string,
): Promise<{ weightVersion: number }> {
  const root = baseUrl.replace(/\/v1\/?$/, '');
  const token = tokenFile && fs.existsSync(tokenFile) ? fs.readFileSync(tokenFile, 'utf8').trim() : undefined;
  let response: Response;
  try {
    response = await fetch(`${root}/reload_weights`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
      body: JSON.stringify({ path: weightsPath }),
      signal: AbortSignal.timeout(10 * 60_000),
    });
  } catch (err) {
    throw new InfrastructureError(`weight sync to ${root}: ${errorMessage(err)}`, { cause: err });
  }
  const body = (await response.json().catch(() => ({}))) as { weight_version?: number; error?: { message?: string } };
  if (!response.ok || typeof body.weight_version !== 'number')
    throw new InfrastructureError(
      `weight sync to ${root}: HTTP ${response.status}: ${body.error?.message ?? 'no weight_version'}`,
    );
  return { weightVersion: body.weight_version };
}

export type GpuActivities = ReturnType<typeof createGpuActivities>;
export const gpuHost = (env: Pick<Environment, 'TBT_GPU_HOST'>) => env.TBT_GPU_HOST;
