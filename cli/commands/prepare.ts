import fs from 'node:fs';
import path from 'node:path';
import { stringify } from 'yaml';
import { canonicalJson } from '../../core/canonical-json.ts';
import {
  aggregateOutcomes,
  BAND_NAMES,
  BANDS,
  CREDIBLE_LEVEL,
  DEFAULT_RETAINED_BANDS,
  isBandName,
  PRIOR,
  selectTasks,
  type AssessedRow,
  type BandName,
  type ProbeOutcome,
  type SelectionResult,
  type UidCounts,
} from '../../core/difficulty.ts';
import { referenceSplit } from '../../core/reference-split.ts';
import {
  commandErrorExit,
  consoleIo,
  InputError,
  jsonlRows,
  readInputFile,
  readUidListInput,
  sha256,
  UsageError,
  writeFileAtomic,
  type CommandIo,
} from '../command-support.ts';
import { integerFlag } from '../flag-values.ts';
import { prepareCommand } from '../command-definitions.ts';
import { parseCommandLine } from '../command-line.ts';

/**
 * `tbt prepare`: select training tasks by offline, policy-relative difficulty (docs/reference-rules.md §1), with
 * the reference tool's flags. File reading and writing live here; the statistics live in core/difficulty.ts.
 */

export const SCHEMA_VERSION = 1;

export interface PrepareConfig {
  policyFiles: string[];
  excludeUidsFile: string | null;
  outputDir: string;
  uidField: string;
  successField: string;
  systemErrorField: string | null;
  minCleanRuns: number;
  retainedBands: BandName[];
  mode: 'selection' | 'split';
  testFraction: number;
  seed: number;
}

function parsePrepareArgs(args: string[]): PrepareConfig {
  const { values } = parseCommandLine(prepareCommand, args);
  const policyFiles = values.policy;
  for (const flag of ['uid-field', 'success-field', 'system-error-field'] as const) {
    if (values[flag] !== undefined && values[flag].trim() === '')
      throw new UsageError(`--${flag}: expected a dotted field path`);
  }
  const retained = values['retain-band'] ?? [...DEFAULT_RETAINED_BANDS];
  for (const band of retained) {
    if (!isBandName(band))
      throw new UsageError(`--retain-band: unknown band '${band}' (bands: ${BAND_NAMES.join(', ')})`);
  }
  const mode = values.mode;
  if (mode !== 'selection' && mode !== 'split')
    throw new UsageError(`--mode: expected selection or split, got '${mode}'`);
  const testFraction = Number(values['test-fraction']);
  if (!/^\s*[0-9.eE+-]+\s*$/.test(values['test-fraction']) || !(testFraction > 0 && testFraction < 1)) {
    throw new UsageError(
      `--test-fraction: expected a number strictly between 0 and 1, got '${values['test-fraction']}'`,
    );
  }
  return {
    policyFiles,
    excludeUidsFile: values['exclude-uids'] ?? null,
    outputDir: values['output-dir'],
    uidField: values['uid-field'],
    successField: values['success-field'],
    systemErrorField: values['system-error-field'] ?? null,
    minCleanRuns: integerFlag('--min-clean-runs', values['min-clean-runs'], { min: 1 }),
    retainedBands: BAND_NAMES.filter((b) => retained.includes(b)),
    mode,
    testFraction,
    seed: integerFlag('--seed', values.seed, { min: 0 }),
  };
}

/** Probe outcomes of one JSONL file. */
export function readProbeOutcomes(
  file: string,
  text: string,
  config: Pick<PrepareConfig, 'uidField' | 'successField' | 'systemErrorField'>,
): ProbeOutcome[] {
  return jsonlRows(file, text).map((r): ProbeOutcome => {
    const uid = r.getUid(config.uidField);
    if (config.systemErrorField && r.getBoolean(config.systemErrorField)) return { uid, systemError: true };
    return { uid, systemError: false, success: r.getBoolean(config.successField) };
  });
}

function aggregateLine(row: AssessedRow): string {
  return canonicalJson({
    uid: row.uid,
    total_rows: row.total_rows,
    clean_runs: row.clean_runs,
    successes: row.successes,
    failures: row.failures,
    system_errors: row.system_errors,
    pass_rate: row.pass_rate,
    standard_error: row.standard_error,
    posterior_alpha: row.posterior_alpha,
    posterior_beta: row.posterior_beta,
    posterior_band_masses: row.posterior_band_masses,
    credible_interval: row.credible_interval,
    difficulty: row.difficulty,
    difficulty_mass: row.difficulty_mass,
    eligible: row.eligible,
    rejection_reasons: row.rejection_reasons,
  });
}

function uidListYaml(uids: string[]): string {
  return stringify([...uids].sort());
}

/** Runs `tbt prepare`; returns the exit code (0 ok, 1 bad input, 2 bad flags). */
export async function prepare(args: string[], io: CommandIo = consoleIo): Promise<number> {
  try {
    runPrepare(parsePrepareArgs(args), io);
    return 0;
  } catch (err) {
    return commandErrorExit(err, prepareCommand, io);
  }
}

interface PrepareInputs {
  exclusions: string[];
  outcomes: ProbeOutcome[];
  policyInputs: { path: string; sha256: string; rows: number }[];
  exclusionInput: { path: string; sha256: string } | null;
}

/** Reads the exclusion list and every probe file, with the hashes the manifest records. */
function readPrepareInputs(config: PrepareConfig): PrepareInputs {
  let exclusions: string[] = [];
  let exclusionInput: { path: string; sha256: string } | null = null;
  if (config.excludeUidsFile) ({ uids: exclusions, input: exclusionInput } = readUidListInput(config.excludeUidsFile));

  const outcomes: ProbeOutcome[] = [];
  const policyInputs: { path: string; sha256: string; rows: number }[] = [];
  for (const file of config.policyFiles) {
    const bytes = readInputFile(file);
    const fileOutcomes = readProbeOutcomes(file, bytes.toString('utf8'), config);
    outcomes.push(...fileOutcomes);
    policyInputs.push({ path: file, sha256: sha256(bytes), rows: fileOutcomes.length });
  }
  if (outcomes.length === 0) throw new InputError(`${config.policyFiles.join(', ')}: no probe rows`);
  return { exclusions, outcomes, policyInputs, exclusionInput };
}

/** Selects the tasks; an empty assessment or an empty selection is an input error that says why. */
function selectOrFail(counts: UidCounts[], exclusions: string[], config: PrepareConfig): SelectionResult {
  const selection = selectTasks(counts, {
    exclusions,
    minCleanRuns: config.minCleanRuns,
    retainedBands: config.retainedBands,
  });
  if (selection.rows.length === 0) {
    throw new InputError(
      `nothing to assess: of ${counts.length} uids, ${selection.excludedPresent.length} are excluded and ` +
        `${selection.systemErrorOnly.length} have only system errors`,
    );
  }
  if (selection.selected.length === 0) {
    const reasons = Object.entries(selection.rejections)
      .map(([r, n]) => `${r}: ${n}`)
      .join(', ');
    throw new InputError(
      `empty selection: none of ${selection.rows.length} assessed uids is eligible (${reasons}; min clean runs ` +
        `${config.minCleanRuns}, retained bands ${config.retainedBands.join(', ')})`,
    );
  }
  return selection;
}

type Split = { train: string[]; test: string[] };

/** The output files by name (without the manifest), and the train/test split in split mode. */
function prepareOutputs(
  selection: SelectionResult,
  config: PrepareConfig,
): { outputs: Record<string, string>; split: Split | null } {
  const outputs: Record<string, string> = {};
  let split: Split | null = null;
  if (config.mode === 'split') {
    split = referenceSplit(
      selection.rows.filter((r) => r.eligible),
      { testFraction: config.testFraction, seed: config.seed },
    );
    if (split.test.length === 0) {
      throw new InputError(
        `split mode: the test set is empty (${selection.selected.length} selected uids, and every dataset file group ` +
          `holds one uid; a group of one always goes to train)`,
      );
    }
    outputs['train.yaml'] = uidListYaml(split.train);
    outputs['test.yaml'] = uidListYaml(split.test);
  } else {
    outputs['selected.yaml'] = uidListYaml(selection.selected);
  }
  outputs['aggregates.jsonl'] = selection.rows.map((r) => `${aggregateLine(r)}\n`).join('');
  return { outputs, split };
}

interface PrepareResult {
  inputs: PrepareInputs;
  counts: UidCounts[];
  selection: SelectionResult;
  split: Split | null;
  outputs: Record<string, string>;
  difficultyCounts: Record<string, number>;
}

function prepareManifest(config: PrepareConfig, r: PrepareResult): Record<string, unknown> {
  const { selection, split } = r;
  return {
    schema_version: SCHEMA_VERSION,
    tool: 'tbt prepare',
    mode: config.mode,
    bands: BANDS.map((b) => ({ name: b.name, lower: b.lower, upper: b.upper, upper_inclusive: b.upper === 1 })),
    configuration: {
      uid_field: config.uidField,
      success_field: config.successField,
      system_error_field: config.systemErrorField,
      min_clean_runs: config.minCleanRuns,
      retained_bands: config.retainedBands,
      prior: PRIOR,
      credible_level: CREDIBLE_LEVEL,
      test_fraction: config.mode === 'split' ? config.testFraction : null,
      seed: config.mode === 'split' ? config.seed : null,
    },
    summary: {
      input_rows: r.inputs.outcomes.length,
      uids_seen: r.counts.length,
      excluded_uids_present: selection.excludedPresent.length,
      system_error_only_uids: selection.systemErrorOnly.length,
      assessed_uids: selection.rows.length,
      selected_uids: selection.selected.length,
      train_uids: split ? split.train.length : null,
      test_uids: split ? split.test.length : null,
      rejections: selection.rejections,
      difficulty_counts: r.difficultyCounts,
    },
    inputs: { policy: r.inputs.policyInputs, exclude_uids: r.inputs.exclusionInput },
    outputs: Object.fromEntries(
      Object.keys(r.outputs)
        .sort()
        .map((name) => [name, { sha256: sha256(r.outputs[name]!) }]),
    ),
  };
}

function prepareSummary(config: PrepareConfig, r: PrepareResult): string {
  const { selection, split } = r;
  const bandLine = BAND_NAMES.map((b) => `${b} ${r.difficultyCounts[b]}`).join(', ');
  return [
    `read ${r.inputs.outcomes.length} probe rows for ${r.counts.length} uids ` +
      `(${selection.excludedPresent.length} excluded, ` +
      `${selection.systemErrorOnly.length} with only system errors)`,
    `assessed ${selection.rows.length}: ${bandLine}`,
    split
      ? `selected ${selection.selected.length}: train ${split.train.length}, test ${split.test.length}`
      : `selected ${selection.selected.length}`,
    `wrote ${[...Object.keys(r.outputs), 'manifest.json'].join(', ')} to ${config.outputDir}`,
  ].join('\n');
}

function runPrepare(config: PrepareConfig, io: CommandIo): void {
  const inputs = readPrepareInputs(config);
  const counts = aggregateOutcomes(inputs.outcomes);
  const selection = selectOrFail(counts, inputs.exclusions, config);
  const { outputs, split } = prepareOutputs(selection, config);
  const difficultyCounts = Object.fromEntries(
    BAND_NAMES.map((b) => [b, selection.rows.filter((r) => r.difficulty === b).length]),
  );
  const result: PrepareResult = { inputs, counts, selection, split, outputs, difficultyCounts };
  const manifest = prepareManifest(config, result);

  fs.mkdirSync(config.outputDir, { recursive: true });
  for (const [name, content] of Object.entries(outputs)) writeFileAtomic(path.join(config.outputDir, name), content);
  writeFileAtomic(
    path.join(config.outputDir, 'manifest.json'),
    `${JSON.stringify(JSON.parse(canonicalJson(manifest)), null, 2)}\n`,
  );
  io.out(prepareSummary(config, result));
}
