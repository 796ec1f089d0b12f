import fs from 'node:fs';
import { testMetaFileSchema } from '../../config/thinkingbox-schema.ts';
import { parseYamlFile, type TaskFileProblem } from '../../config/yaml-file.ts';
import { containedPath } from './dataset-paths.ts';

/**
 * `<file>.meta.yaml` beside a test file (either `x.meta.yaml` or `x.py.meta.yaml`): the `$history` conversations
 * that a task's `history: key:start:end` takes its earlier turns from.
 */

export type HistoryMessage = { role: 'user' | 'assistant'; content: string };

export interface TestMeta {
  /** The meta file found, if any. */
  file?: string;
  history: Record<string, HistoryMessage[]>;
  problems: TaskFileProblem[];
}

/** The meta file of `testFile`; one that resolves (links followed) outside `dataDir` is a problem, not read. */
export function readMeta(testFile: string, dataDir: string): TestMeta {
  const candidates = [testFile.replace(/\.py$/, '.meta.yaml'), `${testFile}.meta.yaml`];
  const file = candidates.find((c) => fs.existsSync(c));
  if (!file) return { history: {}, problems: [] };
  const contained = containedPath(dataDir, file, { file, line: 1, field: '' });
  if (contained.problem) return { file, history: {}, problems: [contained.problem] };
  const r = parseYamlFile(file, testMetaFileSchema);
  return {
    file,
    history: (r.value?.$history ?? {}) as Record<string, HistoryMessage[]>,
    problems: r.problems,
  };
}

/** Python slice semantics for `key:start:end` (negative indices count from the end; empty = open). */
export function sliceHistory<T>(items: T[], start: string | undefined, end: string | undefined): T[] {
  const at = (v: string | undefined, dflt: number) => {
    if (v === undefined || v === '') return dflt;
    const n = Number(v);
    return n < 0 ? Math.max(0, items.length + n) : Math.min(n, items.length);
  };
  return items.slice(at(start, 0), at(end, items.length));
}
