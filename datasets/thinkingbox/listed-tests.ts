import fs from 'node:fs';
import path from 'node:path';
import type { TaskFileProblem } from '../../config/yaml-file.ts';

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

/** Which functions of which files the list selects, in list order. */
export function listedTests(
  list: { value?: string[]; lineOf: (p: PropertyKey[]) => number },
  listFile: string,
  dataDir: string,
  problems: TaskFileProblem[],
): ListedTest[] {
  const testRoot = path.join(dataDir, 'test_case');
  const wanted = (list.value ?? []).map((uid, i) => {
    const [rel, fn] = [uid.slice(0, uid.lastIndexOf(':')), uid.slice(uid.lastIndexOf(':') + 1)];
    const found = findTestFile(testRoot, rel);
    return { uid, file: found.file, tried: found.tried, fn, listLine: list.lineOf([i]) };
  });
  for (const w of wanted)
    if (!w.file)
      problems.push({
        file: listFile,
        line: w.listLine,
        field: '',
        message: `${w.uid}: no such test file (looked for ${w.tried.map((t) => path.relative(dataDir, t)).join(', ')})`,
      });
  return wanted;
}
