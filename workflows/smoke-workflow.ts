import { proxyActivities } from '@temporalio/workflow';
import type { SmokeActivities } from '../activities/smoke-activities.ts';

const { recordSmokeCheck } = proxyActivities<SmokeActivities>({
  startToCloseTimeout: '30 seconds',
  retry: { maximumAttempts: 3 },
});

/** Proves the stack end to end: a workflow on the Temporal server runs an activity that writes to Postgres. */
export async function smokeWorkflow(id: string): Promise<number> {
  return recordSmokeCheck(id, `smoke check ${id}`);
}
