import type { ActivityOptions } from '@temporalio/workflow';

/**
 * Options of the orchestrator's bookkeeping activities (ingest, prepare, record, aggregate, report). They
 * heartbeat every 10 s (activities/campaign-activities.ts), so a worker killed mid-activity is noticed within a
 * minute and the activity retried elsewhere, instead of after the start-to-close limit. Bad input never retries.
 */
export function bookkeepingOptions(
  startToCloseTimeout: ActivityOptions['startToCloseTimeout'],
  maximumAttempts: number,
): ActivityOptions {
  return {
    startToCloseTimeout,
    heartbeatTimeout: '1 minute',
    retry: { maximumAttempts, nonRetryableErrorTypes: ['BadInput'] },
  };
}
