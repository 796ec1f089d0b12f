import fs from 'node:fs';
import {
  compareOutputs,
  evaluationPath,
  trainingPath,
  type InterpretationPath,
  type ParityDifference,
  type RecordedOutput,
} from '../../core/parity.ts';
import type { ToolSpecForTyping } from '../../core/interpret/index.ts';
import { databaseUrl, readEnvironment } from '../../config/environment.ts';
import { withClient } from '../../infra/control-database.ts';
import { parityCommand } from '../command-definitions.ts';
import { commandLineOrExit } from '../command-line.ts';
import { BadInputError } from '../../core/errors.ts';

/** `tbt parity <episodes.jsonl | campaign id>`: exit 1 if training and evaluation interpret any output differently. */

interface StoredEpisode {
  id: string;
  record: { completions?: RecordedOutput[]; tools?: ToolSpecForTyping[] };
}

function readEpisodesFile(file: string): StoredEpisode[] {
  return fs
    .readFileSync(file, 'utf8')
    .split('\n')
    .flatMap((line, i) => {
      if (!line.trim()) return [];
      let value: unknown;
      try {
        value = JSON.parse(line);
      } catch (err) {
        throw new BadInputError(`${file}:${i + 1}: not JSON: ${(err as Error).message}`);
      }
      const e = value as Partial<StoredEpisode>;
      if (typeof e.id !== 'string') throw new BadInputError(`${file}:${i + 1}: field id: expected a string`);
      if (!e.record || !Array.isArray(e.record.completions))
        throw new BadInputError(`${file}:${i + 1}: field record.completions: expected a list`);
      if (!Array.isArray(e.record.tools))
        throw new BadInputError(`${file}:${i + 1}: field record.tools: expected a list`);
      return [e as StoredEpisode];
    });
}

async function readCampaignEpisodes(campaign: string): Promise<StoredEpisode[]> {
  const rows = await withClient(databaseUrl(readEnvironment()), (c) =>
    c.query<StoredEpisode>(`SELECT id, record FROM episodes WHERE campaign = $1 AND record IS NOT NULL ORDER BY id`, [
      campaign,
    ]),
  );
  if (rows.rowCount === 0) throw new BadInputError(`no recorded episodes for campaign '${campaign}'`);
  return rows.rows;
}

export async function parity(
  args: string[],
  paths: { training: InterpretationPath; evaluation: InterpretationPath } = {
    training: trainingPath,
    evaluation: evaluationPath,
  },
): Promise<number> {
  const line = commandLineOrExit(parityCommand, args);
  if (typeof line === 'number') return line;
  const source = line.positionals[0]!;
  const episodes = fs.existsSync(source) ? readEpisodesFile(source) : await readCampaignEpisodes(source);
  const diffs: ParityDifference[] = [];
  let outputs = 0;
  for (const e of episodes) {
    outputs += e.record.completions!.length;
    diffs.push(...compareOutputs(e.id, e.record.completions!, e.record.tools!, paths));
  }
  for (const d of diffs.slice(0, 50))
    console.log(
      `DIFF episode ${d.episode} completion ${d.completion} ${d.field} (${d.between}): ${JSON.stringify(d.a)} != ` +
        `${JSON.stringify(d.b)}`,
    );
  console.log(`episodes=${episodes.length} outputs=${outputs} differences=${diffs.length}`);
  return diffs.length === 0 ? 0 : 1;
}
