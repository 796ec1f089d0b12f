import { condition, log, setCurrentDetails, setHandler, upsertSearchAttributes } from '@temporalio/workflow';
import type { CampaignConfig } from '../config/campaign-config.ts';
import { pausedStageRetryMs } from './activity-options.ts';
import { resumeUpdate } from './campaign-workflow.ts';
import { infrastructureCause } from './failure-class.ts';
import { pausedKey } from './search-attribute-keys.ts';
import { waitInWords } from './ui-text.ts';

/**
 * An evaluation outside a campaign (`tbt eval run`, a schedule) pauses as a campaign stage does instead of failing
 * when infrastructure is at fault (failure-class.ts: the coverage gate after its outage waits, Postgres down at
 * aggregation, a GPU queue without a poller): `TbtPaused` is set, the UI's details say why and what resumes it, and
 * the work runs again by itself after `recovery.paused_stage_retry_ms` (doubling up to the max), or at once on
 * `tbt campaign resume <evaluation workflow id>` (the campaign's resume Update, which this workflow also answers).
 * The same ids run again, so finished episodes are reused from the store. Bad input and bugs still fail it.
 */
export async function pausingEvaluation<T>(
  what: string,
  recovery: CampaignConfig['recovery'] | undefined,
  work: () => Promise<T>,
): Promise<T> {
  let paused = false;
  let resumed = false;
  setHandler(
    resumeUpdate,
    () => {
      resumed = true;
      return `resumed: ${what} runs again`;
    },
    {
      validator: () => {
        if (!paused) throw new Error(`${what} is not paused`);
      },
    },
  );
  for (let retry = 1; ; retry++) {
    try {
      return await work();
    } catch (err) {
      const cause = infrastructureCause(err);
      if (cause === undefined) throw err;
      const ms = pausedStageRetryMs(retry, recovery);
      paused = true;
      upsertSearchAttributes([{ key: pausedKey, value: true }]);
      setCurrentDetails(
        `paused: ${what} failed for an infrastructure reason: ${cause}. It runs again by itself in ` +
          `${waitInWords(ms)}, or now on \`tbt campaign resume <this workflow id>\``,
      );
      log.warn('evaluation paused by an infrastructure failure', { what, cause, retry, ms });
      await condition(() => resumed, ms);
      paused = false;
      resumed = false;
      upsertSearchAttributes([{ key: pausedKey, value: false }]);
      setCurrentDetails(`${what}: running again after a pause (retry ${retry})`);
    }
  }
}
