import fs from 'node:fs';
import path from 'node:path';
import { readYamlValue } from '../config/yaml-file.ts';
import { BadInputError } from '../core/errors.ts';
import { loadSuites } from '../task-suites/task-suite-loader.ts';
import { benchmarkLeaks, refuseBenchmarkLeaks } from './benchmark-leak.ts';
import { campaignRunDir } from './campaign-run-folder.ts';

export interface CandidateIngestInput {
  campaignId: string;
  suiteDir: string;
  excludeUidsFile?: string;
  maxCandidates?: number;
  /** With held_out, an empty held-out set or an excluded uid the suite lacks is an error, not a silent skip. */
  evaluationTasks?: 'pool' | 'all' | 'held_out';
}

export interface CandidateIngestResult {
  uids: string[];
  excluded: number;
  evaluationUids: string[];
  heldOutUids: string[];
}

/**
 * Training candidates (never an excluded or evaluation-only uid, nor another uid of such a task), every suite task
 * (`evaluation.tasks: all`) and the held-out ones, those kept out of training (`evaluation.tasks: held_out`). Reads
 * the suite only: the dry run shows what a start would select.
 */
export function selectCandidates(input: CandidateIngestInput): CandidateIngestResult {
  const { suites, problems } = loadSuites(input.suiteDir);
  if (problems.length || !suites[0])
    throw new BadInputError(
      `suite ${input.suiteDir} has problems: ${problems
        .slice(0, 5)
        .map((p) => `${p.file}:${p.line}: ${p.field} ${p.message}`)
        .join('; ')}`,
    );
  const excluded = readExcludedUids(input.excludeUidsFile);
  // Imported tasks marked evaluation-only (an evaluation-only benchmark) never enter a training pool either.
  for (const t of suites[0].tasks) if ('evaluation_only' in t && t.evaluation_only) excluded.add(t.uid);
  const all = suites[0].tasks.map((t) => t.uid).sort();
  const heldOutUids = all.filter((u) => excluded.has(u));
  if (input.evaluationTasks === 'held_out') checkHeldOut(input, all, excluded, heldOutUids);
  const uids = all.filter((u) => !excluded.has(u)).slice(0, input.maxCandidates ?? Infinity);
  refuseBenchmarkLeaks(benchmarkLeaks(suites[0], uids, excluded), input);
  return { uids, excluded: heldOutUids.length, evaluationUids: all, heldOutUids };
}

/** The selection, its candidates written to `candidates.yaml` in the campaign's run folder. */
export function ingestCandidates(stateDir: string, input: CandidateIngestInput): CandidateIngestResult {
  const result = selectCandidates(input);
  fs.writeFileSync(
    path.join(campaignRunDir(stateDir, input.campaignId), 'candidates.yaml'),
    result.uids.map((u) => `- ${JSON.stringify(u)}`).join('\n') + '\n',
  );
  return result;
}

/** The uids of the exclude file (a YAML list), none without one. */
function readExcludedUids(excludeUidsFile: string | undefined): Set<string> {
  if (!excludeUidsFile) return new Set<string>();
  const list = readYamlValue(excludeUidsFile);
  if (!Array.isArray(list)) throw new BadInputError(`${excludeUidsFile}: expected a YAML list of uids`);
  return new Set(list.map(String));
}

/** Evaluating on held-out tasks needs some, and every excluded uid must be one of the suite's. */
function checkHeldOut(input: CandidateIngestInput, all: string[], excluded: Set<string>, heldOutUids: string[]): void {
  const unknown = [...excluded].filter((u) => !all.includes(u)).sort();
  if (unknown.length)
    throw new BadInputError(
      `${input.excludeUidsFile}: ${unknown.length} held-out uid(s) not in suite ${input.suiteDir} ` +
        `(evaluation.tasks: held_out evaluates them): ${unknown.slice(0, 5).join(', ')}`,
    );
  if (!heldOutUids.length)
    throw new BadInputError(
      `evaluation.tasks is held_out but suite ${input.suiteDir} holds no task out of training: ` +
        'set exclude_uids to a YAML list of the uids to evaluate on',
    );
}
