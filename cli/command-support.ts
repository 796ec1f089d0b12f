import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { isScalar, isSeq, LineCounter, parseDocument } from 'yaml';
import type { CommandDefinition } from './command-definition.ts';
import { helpText, usageErrorText } from './command-help.ts';

/**
 * What every `tbt` command shares: output streams, the error kinds and their exit codes, flag parsing, and
 * the input files commands read (JSONL result rows with dotted field lookup, uid lists) and write atomically.
 */

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

/** `--help` or `-h` was given: the command's help is printed and it exits 0, having done nothing else. */
export class HelpRequest extends Error {
  override readonly name = 'HelpRequest';
  constructor(readonly command: CommandDefinition) {
    super(`help for tbt ${command.path}`);
  }
}

// ---------------------------------------------------------------------------------------------------
// JSONL input shared with `tbt eval`

/** A uid list file (YAML list or one per line) and its input record (path + sha256) for manifests. */
export function readUidListInput(file: string): { uids: string[]; input: { path: string; sha256: string } } {
  const bytes = readInputFile(file);
  return { uids: parseUidList(file, bytes.toString('utf8')), input: { path: file, sha256: sha256(bytes) } };
}

/**
 * A command's error as its exit code: help 0 (the help on stdout), bad flags 2 (with the usage line), bad input 1;
 * anything else is rethrown.
 */
export function commandErrorExit(err: unknown, command: CommandDefinition, io: CommandIo): number {
  if (err instanceof HelpRequest) {
    io.out(helpText(err.command));
    return 0;
  }
  if (err instanceof UsageError) {
    io.err(usageErrorText(command, err.message));
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
        `${file}:${line}: field ${where ? `${where}[${i}]` : `[${i}]`}: expected a non-empty uid string, got ` +
          `${isScalar(item) ? show(value) : 'a collection'}`,
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
