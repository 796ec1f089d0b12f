import type { Client } from '@temporalio/client';
import type { Environment } from '../../config/environment.ts';
import { taskQueues } from '../../config/environment.ts';
import { campaignWorkflow, resumeUpdate, type CampaignInput } from '../../workflows/campaign-workflow.ts';

/**
 * `tbt campaign resume ID`: a running campaign that is paused goes on (the resume Update answers what runs now);
 * a failed, terminated, cancelled or timed-out one starts again under the same id from the input of its latest
 * run. The campaign continues as new after every committed training step, so that input holds the state at its
 * last committed step: the stage and step it was in run again (the learner restores that step's checkpoint,
 * stored episodes are reused by id, a step the learner already applied is answered from its store), so no step is
 * trained twice and no episode counted twice. A running evaluation paused by an infrastructure failure
 * (workflows/evaluation-pauses.ts) is resumed by the same Update.
 */

/** Where a campaign whose workflow has closed starts again: the input of its latest run, pause and stop cleared. */
export function resumedInput(last: CampaignInput): CampaignInput {
  if (!last.state) return last;
  const { pauseReason: _reason, pausedAt: _at, retryPausedStepInMs: _retry, ...state } = last.state;
  return { ...last, state: { ...state, paused: false, stopAfterStep: false } };
}

/** The input the campaign's latest run started with (its first history event). */
async function latestRunInput(client: Client, id: string): Promise<CampaignInput> {
  const history = await client.workflow.getHandle(id).fetchHistory();
  const payload = history.events?.[0]?.workflowExecutionStartedEventAttributes?.input?.payloads?.[0];
  if (!payload) throw new Error(`campaign ${id}: its latest run's history has no recorded input to resume from`);
  return client.options.loadedDataConverter.payloadConverter.fromPayload<CampaignInput>(payload);
}

export async function resumeCampaign(client: Client, env: Environment, id: string): Promise<number> {
  const handle = client.workflow.getHandle(id);
  const description = await handle.describe();
  const status = description.status.name;
  if (status === 'RUNNING') {
    console.log(`${id}: ${await handle.executeUpdate(resumeUpdate)}`);
    return 0;
  }
  // A paused evaluation (`tbt eval run`, a schedule) answers the same Update; a closed one is run again by its CLI.
  if (description.type !== campaignWorkflow.name) {
    console.error(
      `${id} is a ${description.type} and ${status.toLowerCase()}: run the same \`tbt eval run\` again ` +
        '(its finished episodes are reused)',
    );
    return 1;
  }
  if (status === 'COMPLETED') {
    console.error(`campaign ${id} completed (its report is written): nothing to resume`);
    return 1;
  }
  const input = resumedInput(await latestRunInput(client, id));
  const started = await client.workflow.start(campaignWorkflow, {
    workflowId: id,
    taskQueue: taskQueues(env).orchestrator,
    args: [input],
    memo: { config: input.config },
    // Only a campaign that did not complete may start again under its id.
    workflowIdReusePolicy: 'ALLOW_DUPLICATE_FAILED_ONLY',
  });
  const where = input.state
    ? `stage ${input.state.stage}, after ${input.state.step} committed training steps`
    : 'the ingest (no step had been committed)';
  console.log(`campaign ${id} was ${status.toLowerCase()}: resumed from ${where} (run ${started.firstExecutionRunId})`);
  return 0;
}
