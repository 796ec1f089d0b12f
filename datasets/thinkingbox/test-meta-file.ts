import fs from 'node:fs';
import path from 'node:path';
import { rawHistoryMessageSchema, testMetaFileSchema } from '../../config/thinkingbox-schema.ts';
import { parseYamlFile, type TaskFileProblem } from '../../config/yaml-file.ts';
import { containedPath } from './dataset-paths.ts';

/**
 * `<stem>.meta.yaml` beside a test file: the `$history` conversations that a task's `history: key:start:end` takes
 * its earlier turns from, as the reference framework reads and slices them (its history and metadata documentation).
 */

/** A message as written, with the line it starts at (its type is checked when a task takes it). */
export interface RawHistoryMessage {
  value: Record<string, unknown>;
  line: number;
}

export interface TestMeta {
  /** The meta file found, if any. */
  file?: string;
  history: Record<string, RawHistoryMessage[]>;
  problems: TaskFileProblem[];
}

/**
 * The one meta file the reference loads for a test file: Python's `Path(f).with_suffix('').with_suffix('.meta.yaml')`
 * (`x.py` -> `x.meta.yaml`). Nothing else (`x.py.meta.yaml`, `x_history.meta.yaml`) is read.
 */
export function metaFileFor(testFile: string): string {
  const stem = testFile.replace(/\.py$/, '');
  const base = path.basename(stem);
  const dot = base.lastIndexOf('.');
  const name = dot > 0 ? base.slice(0, dot) : base;
  return path.join(path.dirname(stem), `${name}.meta.yaml`);
}

/** The meta file of `testFile`; one that resolves (links followed) outside `dataDir` is a problem, not read. */
export function readMeta(testFile: string, dataDir: string): TestMeta {
  const file = metaFileFor(testFile);
  if (!fs.existsSync(file)) return { history: {}, problems: [] };
  const contained = containedPath(dataDir, file, { file, line: 1, field: '' });
  if (contained.problem) return { file, history: {}, problems: [contained.problem] };
  const r = parseYamlFile(file, testMetaFileSchema);
  const history: Record<string, RawHistoryMessage[]> = {};
  const problems = [...r.problems];
  for (const [key, messages] of Object.entries(r.value?.$history ?? {})) {
    // The reference skips commented-out groups and empty ones.
    if (key.startsWith('#') || messages == null) continue;
    const at = (...p: PropertyKey[]) => ({ file, line: r.lineOf(['$history', key, ...p]), field: `$history.${key}` });
    if (!Array.isArray(messages)) {
      problems.push({ ...at(), message: `$history['${key}'] must be a list of messages` });
      continue;
    }
    const list: RawHistoryMessage[] = [];
    for (const [i, value] of messages.entries()) {
      const checked = rawHistoryMessageSchema.safeParse(value);
      if (checked.success) list.push({ value: checked.data, line: at(i).line });
      else problems.push({ ...at(i), message: `$history['${key}'][${i}] must be a message (a mapping with T)` });
    }
    history[key] = list;
  }
  return { file, history, problems };
}

/** `key:start:end` split from the right (a key may hold colons); start is an index or a message_id. */
export function parseHistoryRef(spec: string): { key: string; start: number | string; end: string } {
  const parts = spec.split(':');
  if (parts.length < 3) throw new Error(`history must be 'key:start:end', got '${spec}'`);
  const end = parts.pop()!;
  const startText = parts.pop()!;
  const key = parts.join(':');
  if (!key) throw new Error(`history key must not be empty: '${spec}'`);
  // Python's int(): optional sign and digits, surrounding whitespace allowed.
  const start = /^\s*[+-]?\d+\s*$/.test(startText) ? Number(startText) : startText;
  return { key, start, end };
}

function messageIdIndex(messages: RawHistoryMessage[], id: string): number {
  const i = messages.findIndex((m) => m.value.message_id === id);
  if (i >= 0) return i;
  const known = messages.flatMap((m) => (typeof m.value.message_id === 'string' ? [m.value.message_id] : []));
  throw new Error(`message_id '${id}' not found (ids: ${known.join(', ') || 'none'})`);
}

/**
 * The reference's slice: from index `start` (0..length) or the message with id `start`, up to (not including) the
 * message with id `end`, or to the end when `end` is empty. `end` is always a message_id, never an index.
 */
export function sliceHistory(messages: RawHistoryMessage[], start: number | string, end: string): RawHistoryMessage[] {
  let from: number;
  if (typeof start === 'number') {
    if (start < 0 || start > messages.length)
      throw new Error(`start index ${start} is out of range for ${messages.length} messages`);
    from = start;
  } else from = messageIdIndex(messages, start);
  const to = end === '' ? messages.length : messageIdIndex(messages, end);
  if (end !== '' && to <= from)
    throw new Error(`end message_id '${end}' (index ${to}) is not after the start (index ${from})`);
  return messages.slice(from, to);
}
