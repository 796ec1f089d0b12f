import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { repoRoot } from '../../config/environment.ts';
import type { NativeTestPattern } from '../../config/thinkingbox-schema.ts';
import { datasetPython } from './dataset-python.ts';

/**
 * ThinkingBox test files as Python's own parser reads them (thinkingbox/tbt_thinkingbox/parse_test_files.py,
 * static: nothing is executed): each file's `!` YAML defaults, its task functions and its problems.
 */

/** A `!` YAML string as Python's parser read it: `value` by PyYAML (as the reference reads it), or `error`. */
export interface ParsedYaml {
  value?: unknown;
  error?: { line: number; message: string };
}
export interface ParsedTestFunction extends ParsedYaml {
  function: string;
  line: number;
  yaml: string;
  yaml_line: number;
  params: string[];
  native: NativeTestPattern | null;
  /** How many of the file's module defaults precede the function (they apply to it, in order). */
  defaults_before: number;
}
export type ParsedDefaults = { yaml: string; line: number } & ParsedYaml;
export interface ParsedTestFile {
  file: string;
  /** The module-level `!` strings, in file order. */
  defaults: ParsedDefaults[];
  tasks: ParsedTestFunction[];
  problems: { file: string; line: number; message: string }[];
}

export function parseTestFiles(files: string[]): ParsedTestFile[] {
  if (files.length === 0) return [];
  const run = spawnSync(datasetPython(), ['-m', 'tbt_thinkingbox.parse_test_files'], {
    cwd: path.join(repoRoot, 'thinkingbox'),
    input: JSON.stringify(files),
    encoding: 'utf8',
    timeout: 600_000,
    maxBuffer: 256 * 1024 * 1024,
  });
  if (run.status !== 0)
    throw new Error(
      `the test-file parser failed (exit ${run.status ?? run.signal}): ` +
        `${(run.stderr || run.error?.message || '').trim().slice(-2000)}`,
    );
  return (JSON.parse(run.stdout) as { files: ParsedTestFile[] }).files;
}
