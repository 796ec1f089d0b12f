import { proxyActivities } from '@temporalio/workflow';
import { withMissingPollerNamed } from '../../workflows/missing-poller.ts';

/**
 * Test-only workflow (temporal-ui-metadata.test.ts bundles it on its own): one activity on a queue nobody
 * polls, with a schedule-to-start limit of 2 s, through the same wrapper the GPU activities use.
 */
export async function unpolledQueueWorkflow(queue: string): Promise<void> {
  const acts = proxyActivities<{ startLearner(): Promise<void> }>({
    taskQueue: queue,
    scheduleToStartTimeout: '2 seconds',
    startToCloseTimeout: '1 minute',
  });
  await withMissingPollerNamed(acts, queue).startLearner();
}
