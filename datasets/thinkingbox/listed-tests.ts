import fs from 'node:fs';
import path from 'node:path';
import type { TaskFileProblem } from '../../config/yaml-file.ts';
import { containedPath } from './dataset-paths.ts';

/**
 * The test list of a dataset (`- file.py:function` entries) resolved to test files under test_case/. An entry
 * whose file is not found is a problem naming the list's line and every path tried.
 */

export interface ListedTest {
  uid: string;
  /** The test file found, if any. */
  file?: string;
  tried: string[];
  /** The test function's name. */
  fn: string;
  listLine: number;
}

/**
 * The test-file lookup rule for a list entry `x_y_z.py`: `test_case/x_y_z.py`, then one sub-folder named by a
 * `_`-prefix of the stem, longest first (`test_case/x_y/x_y_z.py`, then `test_case/x/x_y_z.py`). An entry that
 * already names a sub-folder is used as written.
 */
export function findTestFile(testRoot: string, entry: string): { file?: string; tried: string[] } {
  const direct = path.join(testRoot, entry);
  if (entry.includes('/')) return fs.existsSync(direct) ? { file: direct, tried: [direct] } : { tried: [direct] };
  const tried = [direct];
  if (fs.existsSync(direct)) return { file: direct, tried };
  const parts = entry.replace(/\.py$/, '').split('_');
  for (let n = parts.length - 1; n >= 1; n--) {
    const candidate = path.join(testRoot, parts.slice(0, n).join('_'), entry);
    tried.push(candidate);
    if (fs.existsSync(candidate)) return { file: candidate, tried };
  }
  return { tried };
}

/**
 * Which functions of which files the list selects, in list order. A test file must resolve (links followed)
 * inside the dataset folder: an entry with `..` or a test file linked outside is a problem at its list line.
 */
export function listedTests(
  list: { value?: string[]; lineOf: (p: PropertyKey[]) => number },
  listFile: string,
  dataDir: string,
  problems: TaskFileProblem[],
): ListedTest[] {
  const testRoot = path.join(dataDir, 'test_case');
  return (list.value ?? []).map((uid, i) => {
    const [rel, fn] = [uid.slice(0, uid.lastIndexOf(':')), uid.slice(uid.lastIndexOf(':') + 1)];
    const listed = { uid, tried: [] as string[], fn, listLine: list.lineOf([i]) };
    const where = { file: listFile, line: listed.listLine, field: `[${i}]` };
    const refuse = (problem: TaskFileProblem) => {
      problems.push({ ...problem, message: `${uid}: the test file ${problem.message}` });
      return listed;
    };
    // Checked before looking: nothing outside the dataset is even tested for existence.
    const entry = containedPath(dataDir, `test_case/${rel}`, where);
    if (entry.problem) return refuse(entry.problem);
    const found = findTestFile(testRoot, rel);
    if (!found.file) {
      const tried = found.tried.map((t) => path.relative(dataDir, t)).join(', ');
      problems.push({ ...where, field: '', message: `${uid}: no such test file (looked for ${tried})` });
      return { ...listed, tried: found.tried };
    }
    const file = containedPath(dataDir, path.relative(dataDir, found.file), where);
    if (file.problem) return refuse(file.problem);
    return { ...listed, file: file.path, tried: found.tried };
  });
}
