import { campaignPool } from './pool-selection.ts';
import { latestStepRecord } from './step-records.ts';

export interface LatestCheckpoint {
  step: number;
  exportPath: string | null;
  pool: string[];
}

/** The newest exported checkpoint of a campaign and, when `needPool`, its task pool (for scheduled re-evaluation). */
export async function latestCheckpoint(
  deps: { controlUrl: string; stateDir: string },
  input: { campaignId: string; needPool: boolean },
): Promise<LatestCheckpoint> {
  const latest = await latestStepRecord(deps.controlUrl, input.campaignId);
  const step = latest?.step ?? 0;
  const exportPath = latest?.record.exportPath ?? null;
  if (!input.needPool) return { step, exportPath, pool: [] };
  return { step, exportPath, pool: await campaignPool(deps, input.campaignId) };
}
