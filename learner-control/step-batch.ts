import fs from 'node:fs';
import path from 'node:path';
import { BadInputError } from '../core/errors.ts';
import { withClient } from '../infra/control-database.ts';
import type { Trajectory } from '../rollout/policy-driver.ts';
import { batchRow } from './batch-row.ts';

/**
 * A training step's batch file, built from episode rows in the control database and handed to the learner as a
 * path inside its folder: token arrays never travel in Temporal payloads.
 */

/** One episode of a step's batch, by reference, with its advantage. */
export interface BatchItem {
  episodeId: string;
  advantage: number;
}

/**
 * Writes `<learner dir>/batches/step-<stepId>.jsonl`, one `batchRow` per item (its token trajectory and advantage;
 * the format is `learner-control/batch-row.ts`, the learner's `batch_row.schema.json`), and
 * returns its path. Written through a temporary file, so the learner never reads half a batch.
 */
export async function writeStepBatch(
  controlUrl: string,
  learnerDir: string,
  stepId: number,
  items: BatchItem[],
): Promise<string> {
  const dir = path.join(learnerDir, 'batches');
  fs.mkdirSync(dir, { recursive: true });
  const file = path.join(dir, `step-${stepId}.jsonl`);
  const ids = items.map((i) => i.episodeId);
  const rows = await withClient(controlUrl, (c) =>
    c.query<{ id: string; trajectory: Trajectory | null }>(
      `SELECT id, record->'trajectory' AS trajectory FROM episodes WHERE id = ANY($1)`,
      [ids],
    ),
  );
  const byId = new Map(rows.rows.map((r) => [r.id, r.trajectory]));
  const lines = items.map((item) => {
    const t = byId.get(item.episodeId);
    if (!t) throw new BadInputError(`episode ${item.episodeId} has no token trajectory (was it run in token mode?)`);
    return JSON.stringify(batchRow(item, t));
  });
  fs.writeFileSync(`${file}.tmp`, `${lines.join('\n')}\n`);
  fs.renameSync(`${file}.tmp`, file);
  return file;
}
