import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, test } from 'node:test';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import type { Worker } from '@temporalio/worker';
import { withFailureMapping } from '../../activities/temporal-failure.ts';
import { BadInputError } from '../../core/errors.ts';
import { loadCampaignConfig } from '../../config/campaign-config.ts';
import { repoRoot } from '../../config/environment.ts';
import { scheduledEvaluationWorkflow } from '../../workflows/scheduled-evaluation-workflow.ts';
import { mockedWorker, startWorkflowTestEnv } from '../helpers/workflow-test-env.ts';

/**
 * `tbt eval run` / `tbt eval schedule` against an external policy server (a vLLM the operator runs): the result is
 * labelled with a checkpoint's step only when that checkpoint was loaded into the server. With a checkpoint, the
 * server is synced to it first (the campaign's own sync path) and every episode records its weight version; without
 * one, nothing is loaded and the label says `external`, never a step.
 */

const queue = 'unit-external-eval';
const externalUrl = 'http://vllm.test:8000/v1';

let checkpoint: { step: number; exportPath: string | null; pool: string[] };
const synced: Record<string, unknown>[] = [];
/** When set, the sync refuses as campaign-policy-weights.ts does for a server on a newer version. */
let refusal: string | undefined;
const episodeWeights: unknown[] = [];
const activities = withFailureMapping({
  async latestCheckpoint() {
    return checkpoint;
  },
  async ensurePolicyWeights(input: Record<string, unknown>) {
    synced.push(input);
    if (refusal && input.refuseOlder) throw new BadInputError(refusal);
  },
  async ensurePolicyServer() {
    throw new Error('an external policy needs no embedded server');
  },
  async runEpisode(input: { episodeId: string; config: { policy: { weight_version?: number } } }) {
    episodeWeights.push(input.config.policy.weight_version);
    return { id: input.episodeId, outcome: 'success', reward: 1, finishReason: 'done', policyTokens: 0 };
  },
  async aggregateEvaluation() {
    return { aggregate: 'eval.json', summary: 'ok' };
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

const local = loadCampaignConfig(path.join(repoRoot, 'config', 'local.yaml'));
const config = {
  ...local,
  episode: { ...local.episode, policy: { ...local.episode.policy, base_url: externalUrl } },
};

async function evaluate(campaignId: string) {
  synced.length = 0;
  episodeWeights.length = 0;
  const handle = await env.client.workflow.start(scheduledEvaluationWorkflow, {
    taskQueue: queue,
    workflowId: `${campaignId}/eval-run`,
    args: [
      {
        campaignId,
        config,
        suiteDir: '/suite',
        queues: { rollout: queue, gpu: queue },
        repeats: 1,
        labelPrefix: 'run',
      },
    ],
  });
  const result = await handle.result();
  const children = [];
  for await (const w of env.client.workflow.list({ query: `WorkflowType = 'evaluationWorkflow'` }))
    if (w.workflowId.startsWith(`${campaignId}/`)) children.push(w.workflowId);
  return { result, children };
}

test('external server with a checkpoint: synced to that step, then evaluated and labelled with it', async () => {
  checkpoint = { step: 7, exportPath: '/state/learners/c7/exports/step-7', pool: ['t1', 't2'] };
  const { result, children } = await evaluate('ext-c7');
  assert.equal(result.step, 7);
  assert.equal(synced.length, 1);
  assert.deepEqual(
    { ...synced[0], deadlineMs: undefined },
    {
      campaignId: 'ext-c7',
      weightVersion: 7,
      weightsPath: '/state/learners/c7/exports/step-7',
      basePath: config.learner.model_path,
      deadlineMs: undefined,
      servers: [externalUrl],
      // A server holding a newer version of the campaign is refused, not moved back (campaign-policy-weights.ts).
      refuseOlder: true,
    },
  );
  assert.deepEqual(episodeWeights, [7, 7], 'every episode records the weights it ran on');
  assert.match(children.join(' '), /^ext-c7\/eval-run-step7-/);
});

test('external server, no checkpoint: nothing loaded, labelled external, no step claimed', async () => {
  checkpoint = { step: 0, exportPath: null, pool: ['t1'] };
  const { children } = await evaluate('ext-c0');
  assert.equal(synced.length, 0, 'no sync: the server is evaluated as it serves');
  assert.match(children.join(' '), /^ext-c0\/eval-run-external-/);
  assert.doesNotMatch(children.join(' '), /step0/);
});

test('a server on a newer version refuses an older step: the evaluation fails as bad input, no episode', async () => {
  checkpoint = { step: 3, exportPath: '/state/learners/c3/exports/step-3', pool: ['t1', 't2'] };
  refusal = `policy server ${externalUrl} holds campaign ext-c3's weight version 5: evaluating step 3 would load`;
  try {
    await assert.rejects(evaluate('ext-c3'), (err: Error) => {
      const cause = (err as { cause?: { cause?: Error & { type?: string } } }).cause?.cause;
      assert.equal(cause?.type, 'BadInputError');
      assert.match(cause?.message ?? '', /holds campaign ext-c3's weight version 5: evaluating step 3/);
      return true;
    });
  } finally {
    refusal = undefined;
  }
  assert.equal(synced.length, 1, 'a bad input is not retried');
  assert.deepEqual(episodeWeights, [], 'no episode ran on the servers');
});
