import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import type { Worker } from '@temporalio/worker';
import type { EpisodeActivityInput } from '../../activities/episode-activities.ts';
import { episodeInfrastructureErrorType, episodeInfrastructureFailure } from '../../activities/temporal-failure.ts';
import type { EpisodeSummary } from '../../rollout/episode-store.ts';
import { episodeBatchWorkflow } from '../../workflows/episode-batch-workflow.ts';
import { evaluationWorkflow } from '../../workflows/evaluation-workflow.ts';
import { mockedWorker, startWorkflowTestEnv } from '../helpers/workflow-test-env.ts';

/**
 * An episode that ends in an infrastructure error fails its activity: a failed attempt in the Temporal UI (type
 * EpisodeInfrastructureError, the error's class first in the message, the stored summary in the details), never
 * retried by Temporal. The workflows read the stored summary back from the failure, so every caller sees what it saw
 * when the activity returned that summary: a batch returns it as is, keyed episodes re-run the key.
 */

const queue = 'unit-episode-failed-attempts';
const downCause = 'policy server chat completion failed: Connection error.';

/** Episodes whose id contains `down` (first run only, for keys re-run under `~retry-n`) hit the endpoint outage. */
const calls: string[] = [];
function summaryOf(input: EpisodeActivityInput, outcome: EpisodeSummary['outcome']): EpisodeSummary {
  return outcome === 'infrastructure_error'
    ? { id: input.episodeId, outcome, reward: 0, finishReason: outcome, cause: downCause, policyTokens: 3 }
    : { id: input.episodeId, outcome, reward: 1, finishReason: 'done', policyTokens: 5, worker: 'host:1' };
}
const activities = {
  async runEpisode(input: EpisodeActivityInput): Promise<EpisodeSummary> {
    calls.push(input.episodeId);
    const down = input.episodeId.includes('down') && !input.episodeId.includes('~retry-');
    if (down) throw episodeInfrastructureFailure(summaryOf(input, 'infrastructure_error'));
    return summaryOf(input, 'success');
  },
  async aggregateEvaluation() {
    return { aggregate: 'eval.json', summary: 'ok' };
  },
};

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

function episodeInput(episodeId: string): EpisodeActivityInput {
  return {
    episodeId,
    suiteDir: '/suite',
    taskUid: 'task-1',
    purpose: 'adhoc',
    config: { limits: { wall_clock_ms: 60_000 } } as never,
  };
}

test('a failed attempt: the batch returns the stored summary, the history shows the failure, no retry', async () => {
  const episodes = [episodeInput('fa-batch/ok'), episodeInput('fa-batch/down')];
  const handle = await env.client.workflow.start(episodeBatchWorkflow, {
    taskQueue: queue,
    workflowId: 'fa-batch',
    args: [{ rolloutQueue: queue, episodes, concurrency: 2 }],
  });
  const summaries = await handle.result();
  assert.deepEqual(summaries, [summaryOf(episodes[0]!, 'success'), summaryOf(episodes[1]!, 'infrastructure_error')]);
  assert.equal(calls.filter((id) => id === 'fa-batch/down').length, 1, 'Temporal did not retry the attempt');

  const events = (await handle.fetchHistory()).events ?? [];
  const failed = events.flatMap((e) => e.activityTaskFailedEventAttributes ?? []);
  assert.equal(failed.length, 1, 'one failed activity in the history');
  const failure = failed[0]!.failure!;
  assert.equal(failure.applicationFailureInfo?.type, episodeInfrastructureErrorType);
  assert.equal(failure.applicationFailureInfo?.nonRetryable, true);
  assert.equal(failure.message, `policy_server: ${downCause}`);
  const scheduled = events.find(
    (e) => e.eventId?.toString() === failed[0]!.scheduledEventId?.toString(),
  )?.activityTaskScheduledEventAttributes;
  assert.equal(scheduled?.activityId, 'fa-batch/down', 'the failed activity is the episode that hit the outage');
  assert.equal(events.filter((e) => e.activityTaskCompletedEventAttributes).length, 1, 'the other one completed');
});

test('keyed episodes re-run a key whose attempt failed with an infrastructure error under a new id', async () => {
  const result = await env.client.workflow.execute(evaluationWorkflow, {
    taskQueue: queue,
    workflowId: 'fa-eval/eval-x',
    args: [
      {
        label: 'x',
        uids: ['down-task', 'fine-task'],
        repeats: 1,
        concurrency: 2,
        shardSize: 10,
        suiteDir: '/suite',
        episode: { limits: { wall_clock_ms: 60_000 } } as never,
        campaignId: 'fa-eval',
        rolloutQueue: queue,
        maxReruns: 3,
        infraBackoff: { initialMs: 50, maxMs: 100 },
      },
    ],
  });
  assert.equal(result.episodes, 3);
  assert.equal(result.reruns, 1);
  assert.deepEqual(calls.filter((id) => id.startsWith('fa-eval/')).sort(), [
    'fa-eval/eval-x/down-task#0',
    'fa-eval/eval-x/down-task#0~retry-1',
    'fa-eval/eval-x/fine-task#0',
  ]);
});
