import { withClient } from '../infra/control-database.ts';
import type { StepRecord } from './step-record.ts';

/** Stores a step's record; a retried step replaces the record it left before. */
export async function saveStepRecord(controlUrl: string, record: StepRecord): Promise<void> {
  await withClient(controlUrl, (c) =>
    c.query(
      `INSERT INTO campaign_steps (campaign, step, record) VALUES ($1, $2, $3) ON CONFLICT (campaign, step) DO ` +
        `UPDATE SET record = EXCLUDED.record`,
      [record.campaignId, record.step, JSON.stringify(record)],
    ),
  );
}

/** Every step record of a campaign, in step order. */
export async function stepRecordsInOrder(controlUrl: string, campaignId: string): Promise<StepRecord[]> {
  const rows = await withClient(controlUrl, (c) =>
    c.query<{ record: StepRecord }>(`SELECT record FROM campaign_steps WHERE campaign = $1 ORDER BY step`, [
      campaignId,
    ]),
  );
  return rows.rows.map((r) => r.record);
}

/** The campaign's newest step record, if it has one. */
export async function latestStepRecord(
  controlUrl: string,
  campaignId: string,
): Promise<{ step: number; record: StepRecord } | undefined> {
  const rows = await withClient(controlUrl, (c) =>
    c.query<{ step: number; record: StepRecord }>(
      `SELECT step, record FROM campaign_steps WHERE campaign = $1 ORDER BY step DESC LIMIT 1`,
      [campaignId],
    ),
  );
  return rows.rows[0];
}

/** Seconds the learner's updates took over all of a campaign's steps (one learner process's time). */
export async function learnerSeconds(controlUrl: string, campaignId: string): Promise<number> {
  const steps = await withClient(controlUrl, (c) =>
    c.query<{ record: StepRecord }>(`SELECT record FROM campaign_steps WHERE campaign = $1`, [campaignId]),
  );
  return steps.rows.reduce((a, r) => a + Number(r.record.update.time_s ?? 0), 0);
}
