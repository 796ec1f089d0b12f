import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, test } from 'node:test';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import type { Worker } from '@temporalio/worker';
import type { EpisodeActivityInput } from '../../activities/episode-activities.ts';
import { withFailureMapping } from '../../activities/temporal-failure.ts';
import { loadCampaignConfig, type CampaignConfig } from '../../config/campaign-config.ts';
import type { JudgeMode } from '../../config/episode-config.ts';
import { repoRoot } from '../../config/environment.ts';
import type { EpisodeSummary } from '../../rollout/episode-store.ts';
import { campaignWorkflow } from '../../workflows/campaign-workflow.ts';
import { scheduledEvaluationWorkflow } from '../../workflows/scheduled-evaluation-workflow.ts';
import { mockedWorker, startWorkflowTestEnv } from '../helpers/workflow-test-env.ts';

/**
 * Each stage's judge mode reaches its episodes: a campaign's probe, training and evaluation episodes carry
 * `probe`, `training` and `evaluation.judge_mode` in their episode config (the run manifest records all three with
 * the config), and so do the episodes of `tbt eval run` / `tbt eval schedule` (scheduledEvaluationWorkflow). A config
 * recorded before the fields existed runs its episodes with the episode config unchanged, as its history has it.
 */

const queue = 'unit-judge-mode-stages';
const local = loadCampaignConfig(path.join(repoRoot, 'config', 'local.yaml'));

/** Per campaign: each episode's purpose and judge mode ('none': the config has no judge_mode), and the manifest. */
const episodes = new Map<string, { purpose: string; mode: JudgeMode | 'none' }[]>();
const manifests = new Map<string, { config: CampaignConfig }>();
const ofCampaign = (id: string) => {
  if (!episodes.has(id)) episodes.set(id, []);
  return episodes.get(id)!;
};

const activities = withFailureMapping({
  async runEpisode(input: EpisodeActivityInput): Promise<EpisodeSummary> {
    const mode = 'judge_mode' in input.config ? input.config.judge_mode! : 'none';
    ofCampaign(input.episodeId.split('/')[0]!).push({ purpose: input.purpose, mode });
    return { id: input.episodeId, outcome: 'success', reward: 1, finishReason: 'done', policyTokens: 0 };
  },
  async ingestCandidates() {
    return { uids: ['t1', 't2'], excluded: 0, evaluationUids: ['t1', 't2'] };
  },
  async selectPool() {
    return { pool: ['t1', 't2'], bands: { medium: 2 }, aggregates: 'aggregates.jsonl' };
  },
  async startLearner() {
    return { controlUrl: 'http://learner', manifest: {} };
  },
  async writeManifest(input: { campaignId: string; manifest: { config: CampaignConfig } }) {
    manifests.set(input.campaignId, input.manifest);
    return '/manifest.json';
  },
  async ensurePolicyServer() {
    return { baseUrl: 'http://policy/v1', model: 'm' };
  },
  async policySystemMessages() {
    return { system_messages: 'separate' };
  },
  async ensurePolicyWeights() {},
  async releaseLearner() {
    return { released: true };
  },
  async stopLearner() {},
  async trainStep(input: { stepId: number }) {
    return { stepId: input.stepId, repeated: false, checkpoint: 'ckpt', metrics: { loss: 0.5 } };
  },
  async exportWeights(input: { campaignId: string; stepId: number }) {
    return { path: `/weights/${input.campaignId}/${input.stepId}` };
  },
  async syncWeights(input: { weightVersion: number }) {
    return { weightVersion: input.weightVersion, servers: [] };
  },
  async recordStep() {},
  async aggregateEvaluation(input: { label: string }) {
    return { aggregate: `eval-${input.label}.json`, summary: 'ok' };
  },
  async writeReport() {
    return { html: '/report.html', markdown: '/report.md' };
  },
  async latestCheckpoint() {
    return { step: 3, exportPath: '/weights/step-3', pool: ['t1', 't2'] };
  },
});

let env: TestWorkflowEnvironment;
let worker: Worker;
let running: Promise<unknown>;
before(async () => {
  env = await startWorkflowTestEnv();
  worker = await mockedWorker(env, queue, activities);
  running = worker.run();
});
after(async () => {
  worker?.shutdown();
  await running;
  await env?.teardown();
});

/** A short campaign: a probe of one repeat, one step of one group of 2, the evaluation before and after. */
function shortCampaign(modes: { probe?: JudgeMode; training?: JudgeMode; evaluation?: JudgeMode }): CampaignConfig {
  return {
    ...local,
    probe: { ...local.probe, repeats: 1, min_clean_runs: 1, ...(modes.probe ? { judge_mode: modes.probe } : {}) },
    training: {
      ...local.training,
      steps: 1,
      groups_per_step: 1,
      group_size: 2,
      max_replacements: 0,
      ...(modes.training ? { judge_mode: modes.training } : {}),
    },
    evaluation: { ...local.evaluation, repeats: 1, ...(modes.evaluation ? { judge_mode: modes.evaluation } : {}) },
  };
}

/** The config as a history recorded before the judge modes existed has it. */
function withoutJudgeModes(config: CampaignConfig): CampaignConfig {
  const strip = <T extends object>(section: T) => {
    const { judge_mode: _, ...rest } = section as T & { judge_mode?: unknown };
    return rest as T;
  };
  return {
    ...config,
    probe: strip(config.probe),
    training: strip(config.training),
    evaluation: strip(config.evaluation),
  };
}

async function runCampaign(campaignId: string, config: CampaignConfig) {
  await env.client.workflow.execute(campaignWorkflow, {
    taskQueue: queue,
    workflowId: campaignId,
    args: [{ campaignId, config, suiteDir: '/suite', queues: { rollout: queue, gpu: queue } }],
  });
  const byPurpose: Record<string, Set<string>> = {};
  for (const e of ofCampaign(campaignId)) (byPurpose[e.purpose] ??= new Set()).add(e.mode);
  return Object.fromEntries(Object.entries(byPurpose).map(([purpose, modes]) => [purpose, [...modes]]));
}

test("probe, training and evaluation episodes get their stage's judge mode; the manifest has them", async () => {
  assert.deepEqual(await runCampaign('jm-defaults', shortCampaign({})), {
    probe: ['legacy'],
    train: ['motivation'],
    eval: ['legacy'],
  });
  const recorded = manifests.get('jm-defaults')!.config;
  assert.deepEqual(
    [recorded.probe.judge_mode, recorded.training.judge_mode, recorded.evaluation.judge_mode],
    ['legacy', 'motivation', 'legacy'],
  );
  const swapped = { probe: 'motivation', training: 'legacy', evaluation: 'motivation' } as const;
  assert.deepEqual(await runCampaign('jm-swapped', shortCampaign(swapped)), {
    probe: ['motivation'],
    train: ['legacy'],
    eval: ['motivation'],
  });
});

test('a campaign recorded before judge modes existed runs episodes with the episode config as recorded', async () => {
  assert.deepEqual(await runCampaign('jm-recorded', withoutJudgeModes(shortCampaign({}))), {
    probe: ['none'],
    train: ['none'],
    eval: ['none'],
  });
});

test('tbt eval run / schedule: episodes get evaluation.judge_mode; another mode is another evaluation', async () => {
  const evaluate = async (campaignId: string, config: CampaignConfig) => {
    const result = await env.client.workflow.execute(scheduledEvaluationWorkflow, {
      taskQueue: queue,
      workflowId: `${campaignId}-run-${ofCampaign(campaignId).length}`,
      args: [{ campaignId, config, suiteDir: '/suite', queues: { rollout: queue, gpu: queue }, repeats: 1 }],
    });
    return result.label;
  };
  const legacy = await evaluate('jm-eval', shortCampaign({}));
  assert.deepEqual(new Set(ofCampaign('jm-eval').map((e) => e.mode)), new Set(['legacy']));
  const motivated = await evaluate('jm-eval-motivation', shortCampaign({ evaluation: 'motivation' }));
  assert.deepEqual(new Set(ofCampaign('jm-eval-motivation').map((e) => e.mode)), new Set(['motivation']));
  assert.notEqual(motivated.split('-').at(-1), legacy.split('-').at(-1), 'the mode is part of the label');
  // The legacy label is the one evaluations had before the mode existed: they resume under the same ids.
  assert.equal(await evaluate('jm-eval', withoutJudgeModes(shortCampaign({}))), legacy);
});
