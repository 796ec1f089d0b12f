import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { isScalar, isSeq, LineCounter, parseDocument, stringify } from 'yaml';
import { canonicalJson } from '../../core/canonical-json.ts';
import {
  aggregateOutcomes,
  BAND_NAMES,
  BANDS,
  CREDIBLE_LEVEL,
  DEFAULT_MIN_CLEAN_RUNS,
  DEFAULT_RETAINED_BANDS,
  DEFAULT_SEED,
  DEFAULT_TEST_FRACTION,
  isBandName,
  PRIOR,
  selectTasks,
  stratifiedSplit,
  type AssessedRow,
  type BandName,
  type ProbeOutcome,
} from '../../core/difficulty.ts';

/**
 * `tbt prepare`: select training tasks by offline, policy-relative difficulty (docs/reference-rules.md §1), with
 * the reference tool's flags. File reading and writing live here; the statistics live in core/difficulty.ts.
 */

const USAGE = `usage: tbt prepare --policy FILE [--policy FILE ...] --output-dir DIR [options]

Reads probe results (JSONL, one attempt per line; several files add up), estimates each task's success
probability with a Jeffreys posterior, assigns difficulty bands and writes the selected task list.

  --policy FILE             probe results (JSONL); repeatable
  --exclude-uids FILE       uids dropped before anything else (the benchmark list): a YAML list
                            (.yaml/.yml/.json, or text starting with '-'), {uids: [...]}, or one uid per line
  --output-dir DIR          where selected.yaml (or train.yaml + test.yaml), aggregates.jsonl and
                            manifest.json are written
  --uid-field PATH          dotted path of the task uid (default uid)
  --success-field PATH      dotted path of the success boolean (default test_result.result)
  --system-error-field PATH dotted path of a boolean; a true row counts as a system error and its success
                            field is not read (default: none)
  --min-clean-runs N        reject uids with fewer clean runs (default ${DEFAULT_MIN_CLEAN_RUNS})
  --retain-band NAME        band to keep; repeatable (default ${DEFAULT_RETAINED_BANDS.join(', ')}; bands: ${BAND_NAMES.join(', ')})
  --mode selection|split    one selected list, or a train/test split (default selection)
  --test-fraction F         split mode: fraction of each dataset file sent to test (default ${DEFAULT_TEST_FRACTION})
  --seed N                  split mode: seed of the deterministic ranking (default ${DEFAULT_SEED})`;

export const SCHEMA_VERSION = 1;

export interface CommandIo {
  out: (text: string) => void;
  err: (text: string) => void;
}

export const consoleIo: CommandIo = {
  out: (text) => console.log(text),
  err: (text) => console.error(text),
};

/** Bad input, reported as one message that names file, line and field; the command exits 1. */
export class InputError extends Error {
  override readonly name = 'InputError';
}

/** Bad flags; the command prints usage and exits 2. */
export class UsageError extends Error {
  override readonly name = 'UsageError';
}

// ---------------------------------------------------------------------------------------------------
// JSONL input shared with `tbt eval`

/** Strict flag parsing (no positionals); a bad flag is a UsageError (exit 2 with the usage). */
export function parseFlags<const O extends NonNullable<ParseArgsConfig['options']>>(args: string[], options: O) {
  try {
    return parseArgs({ args, options, strict: true, allowPositionals: false }).values;
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
}

/** A uid list file (YAML list or one per line) and its input record (path + sha256) for manifests. */
export function readUidListInput(file: string): { uids: string[]; input: { path: string; sha256: string } } {
  const bytes = readInputFile(file);
  return { uids: parseUidList(file, bytes.toString('utf8')), input: { path: file, sha256: sha256(bytes) } };
}

/** A command's error as its exit code: bad flags 2 (with the usage), bad input 1; anything else is rethrown. */
export function commandErrorExit(err: unknown, command: string, usage: string, io: CommandIo): number {
  if (err instanceof UsageError) {
    io.err(`tbt ${command}: ${err.message}\n\n${usage}`);
    return 2;
  }
  if (err instanceof InputError) {
    io.err(err.message);
    return 1;
  }
  throw err;
}

export type DottedLookup = { found: true; value: unknown } | { found: false; reason: string };

function describeKind(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  return typeof value === 'object' ? 'an object' : `a ${typeof value}`;
}

/** Reads a dotted path (`test_result.result`, `usage.0.output_tokens`); numeric parts index arrays. */
export function readDotted(row: unknown, fieldPath: string): DottedLookup {
  let value = row;
  let walked = '';
  for (const part of fieldPath.split('.')) {
    const where = walked ? ` in ${walked}` : '';
    if (Array.isArray(value)) {
      const index = /^\d+$/.test(part) ? Number(part) : Number.NaN;
      if (!(index < value.length)) return { found: false, reason: `no element ${part}${where}` };
      value = value[index];
    } else if (value !== null && typeof value === 'object') {
      if (!Object.hasOwn(value, part)) return { found: false, reason: `no key "${part}"${where}` };
      value = (value as Record<string, unknown>)[part];
    } else {
      return { found: false, reason: `${walked || 'the row'} is ${describeKind(value)}, not an object` };
    }
    walked = walked ? `${walked}.${part}` : part;
  }
  return { found: true, value };
}

/** A short JSON rendering of a value for error messages. */
export function show(value: unknown): string {
  const text = JSON.stringify(value) ?? String(value);
  return text.length > 60 ? `${text.slice(0, 57)}...` : text;
}

/** One non-blank JSONL line, parsed, with its position for error messages. */
export interface JsonlRow {
  file: string;
  line: number;
  row: Record<string, unknown>;
  fieldError: (field: string, message: string) => InputError;
  /** The value at a dotted path; throws an InputError naming file, line and field when it is absent. */
  get: (field: string) => unknown;
  getBoolean: (field: string) => boolean;
  getUid: (field: string) => string;
}

export function jsonlRows(file: string, text: string): JsonlRow[] {
  const rows: JsonlRow[] = [];
  const lines = text.split('\n');
  lines.forEach((raw, i) => {
    const line = i + 1;
    const trimmed = raw.trim();
    if (!trimmed) return;
    let parsed: unknown;
    try {
      parsed = JSON.parse(trimmed);
    } catch (err) {
      throw new InputError(`${file}:${line}: invalid JSON: ${(err as Error).message}`);
    }
    if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
      throw new InputError(`${file}:${line}: expected a JSON object, got ${describeKind(parsed)}`);
    }
    const row = parsed as Record<string, unknown>;
    const fieldError = (field: string, message: string) =>
      new InputError(`${file}:${line}: field ${field}: ${message}`);
    const get = (field: string): unknown => {
      const lookup = readDotted(row, field);
      if (!lookup.found) throw fieldError(field, `missing (${lookup.reason})`);
      return lookup.value;
    };
    rows.push({
      file,
      line,
      row,
      fieldError,
      get,
      getBoolean: (field) => {
        const value = get(field);
        if (typeof value !== 'boolean') throw fieldError(field, `expected a boolean, got ${show(value)}`);
        return value;
      },
      getUid: (field) => {
        const value = get(field);
        if (typeof value !== 'string' || value === '')
          throw fieldError(field, `expected a non-empty string, got ${show(value)}`);
        return value;
      },
    });
  });
  return rows;
}

export function readInputFile(file: string): Buffer {
  try {
    return fs.readFileSync(file);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new InputError(`${file}: cannot read (${code === 'ENOENT' ? 'no such file' : (err as Error).message})`);
  }
}

export function sha256(bytes: Buffer | string): string {
  return createHash('sha256').update(bytes).digest('hex');
}

/**
 * A list of uids: a YAML list (or `{uids: [...]}`) when the file is .yaml/.yml/.json or its first
 * meaningful line starts with '-', '[' or '{'; otherwise one uid per line ('#' starts a comment line).
 */
export function parseUidList(file: string, text: string): string[] {
  const firstLine =
    text
      .split('\n')
      .map((l) => l.trim())
      .find((l) => l && !l.startsWith('#')) ?? '';
  const looksYaml = /\.(ya?ml|json)$/i.test(file) || /^[-[{]/.test(firstLine);
  if (!looksYaml) {
    return text
      .split('\n')
      .map((l) => l.trim())
      .filter((l) => l && !l.startsWith('#'));
  }
  const counter = new LineCounter();
  const doc = parseDocument(text, { lineCounter: counter, prettyErrors: false });
  const firstError = doc.errors[0];
  if (firstError)
    throw new InputError(
      `${file}:${firstError.linePos?.[0]?.line ?? 1}: YAML syntax: ${firstError.message.split('\n')[0]}`,
    );
  let seq = doc.contents;
  let where = '';
  if (seq && !isSeq(seq) && typeof doc.get('uids', true) === 'object') {
    seq = doc.get('uids', true) as typeof seq;
    where = 'uids';
  }
  if (seq === null) return [];
  if (!isSeq(seq)) throw new InputError(`${file}:1: expected a YAML list of uids (or an object with a 'uids' list)`);
  return seq.items.map((item, i) => {
    const line = isScalar(item) && item.range ? counter.linePos(item.range[0]).line : 1;
    const value = isScalar(item) ? item.value : undefined;
    if (typeof value !== 'string' || value === '') {
      throw new InputError(
        `${file}:${line}: field ${where ? `${where}[${i}]` : `[${i}]`}: expected a non-empty uid string, got ${isScalar(item) ? show(value) : 'a collection'}`,
      );
    }
    return value;
  });
}

/** Writes through a temporary file and a rename, so a reader never sees half a file. */
export function writeFileAtomic(file: string, content: string): void {
  const tmp = path.join(path.dirname(file), `.${path.basename(file)}.${process.pid}.tmp`);
  fs.writeFileSync(tmp, content);
  fs.renameSync(tmp, file);
}

// ---------------------------------------------------------------------------------------------------
// tbt prepare

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

export function parseInteger(flag: string, text: string, min: number): number {
  if (!/^-?\d+$/.test(text.trim()) || !Number.isSafeInteger(Number(text)) || Number(text) < min) {
    throw new UsageError(`${flag}: expected an integer >= ${min}, got '${text}'`);
  }
  return Number(text);
}

function parsePrepareArgs(args: string[]): PrepareConfig | 'help' {
  const values = parseFlags(args, {
    policy: { type: 'string', multiple: true },
    'exclude-uids': { type: 'string' },
    'output-dir': { type: 'string' },
    'uid-field': { type: 'string', default: 'uid' },
    'success-field': { type: 'string', default: 'test_result.result' },
    'system-error-field': { type: 'string' },
    'min-clean-runs': { type: 'string', default: String(DEFAULT_MIN_CLEAN_RUNS) },
    'retain-band': { type: 'string', multiple: true },
    mode: { type: 'string', default: 'selection' },
    'test-fraction': { type: 'string', default: String(DEFAULT_TEST_FRACTION) },
    seed: { type: 'string', default: String(DEFAULT_SEED) },
    help: { type: 'boolean', short: 'h' },
  });
  if (values.help) return 'help';
  const policyFiles = values.policy ?? [];
  if (policyFiles.length === 0) throw new UsageError('--policy FILE is required (repeatable)');
  if (!values['output-dir']) throw new UsageError('--output-dir DIR is required');
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
    minCleanRuns: parseInteger('--min-clean-runs', values['min-clean-runs'], 1),
    retainedBands: BAND_NAMES.filter((b) => retained.includes(b)),
    mode,
    testFraction,
    seed: parseInteger('--seed', values.seed, 0),
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
    const config = parsePrepareArgs(args);
    if (config === 'help') {
      io.out(USAGE);
      return 0;
    }
    runPrepare(config, io);
    return 0;
  } catch (err) {
    return commandErrorExit(err, 'prepare', USAGE, io);
  }
}

function runPrepare(config: PrepareConfig, io: CommandIo): void {
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

  const counts = aggregateOutcomes(outcomes);
  const selection = selectTasks(counts, {
    exclusions,
    minCleanRuns: config.minCleanRuns,
    retainedBands: config.retainedBands,
  });
  if (selection.rows.length === 0) {
    throw new InputError(
      `nothing to assess: of ${counts.length} uids, ${selection.excludedPresent.length} are excluded and ${selection.systemErrorOnly.length} have only system errors`,
    );
  }
  if (selection.selected.length === 0) {
    const reasons = Object.entries(selection.rejections)
      .map(([r, n]) => `${r}: ${n}`)
      .join(', ');
    throw new InputError(
      `empty selection: none of ${selection.rows.length} assessed uids is eligible (${reasons}; min clean runs ${config.minCleanRuns}, retained bands ${config.retainedBands.join(', ')})`,
    );
  }

  const outputs: Record<string, string> = {};
  let split: { train: string[]; test: string[] } | null = null;
  if (config.mode === 'split') {
    split = stratifiedSplit(
      selection.rows.filter((r) => r.eligible),
      { testFraction: config.testFraction, seed: config.seed },
    );
    if (split.test.length === 0) {
      throw new InputError(
        `split mode: the test set is empty (${selection.selected.length} selected uids, and every dataset file group holds one uid; a group of one always goes to train)`,
      );
    }
    outputs['train.yaml'] = uidListYaml(split.train);
    outputs['test.yaml'] = uidListYaml(split.test);
  } else {
    outputs['selected.yaml'] = uidListYaml(selection.selected);
  }
  outputs['aggregates.jsonl'] = selection.rows.map((r) => `${aggregateLine(r)}\n`).join('');

  const difficultyCounts = Object.fromEntries(
    BAND_NAMES.map((b) => [b, selection.rows.filter((r) => r.difficulty === b).length]),
  );
  const manifest = {
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
      input_rows: outcomes.length,
      uids_seen: counts.length,
      excluded_uids_present: selection.excludedPresent.length,
      system_error_only_uids: selection.systemErrorOnly.length,
      assessed_uids: selection.rows.length,
      selected_uids: selection.selected.length,
      train_uids: split ? split.train.length : null,
      test_uids: split ? split.test.length : null,
      rejections: selection.rejections,
      difficulty_counts: difficultyCounts,
    },
    inputs: { policy: policyInputs, exclude_uids: exclusionInput },
    outputs: Object.fromEntries(
      Object.keys(outputs)
        .sort()
        .map((name) => [name, { sha256: sha256(outputs[name]!) }]),
    ),
  };

  fs.mkdirSync(config.outputDir, { recursive: true });
  for (const [name, content] of Object.entries(outputs)) writeFileAtomic(path.join(config.outputDir, name), content);
  writeFileAtomic(
    path.join(config.outputDir, 'manifest.json'),
    `${JSON.stringify(JSON.parse(canonicalJson(manifest)), null, 2)}\n`,
  );

  const bandLine = BAND_NAMES.map((b) => `${b} ${difficultyCounts[b]}`).join(', ');
  io.out(
    [
      `read ${outcomes.length} probe rows for ${counts.length} uids (${selection.excludedPresent.length} excluded, ${selection.systemErrorOnly.length} with only system errors)`,
      `assessed ${selection.rows.length}: ${bandLine}`,
      split
        ? `selected ${selection.selected.length}: train ${split.train.length}, test ${split.test.length}`
        : `selected ${selection.selected.length}`,
      `wrote ${[...Object.keys(outputs), 'manifest.json'].join(', ')} to ${config.outputDir}`,
    ].join('\n'),
  );
}
