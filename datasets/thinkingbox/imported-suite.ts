import fs from 'node:fs';
import path from 'node:path';
import {
  IMPORTED_SUITE_FILE,
  importedSuiteSchema,
  type ImportedScenario,
  type ImportedSuite,
  type ImportedTask,
} from '../../config/thinkingbox-schema.ts';
import type { TaskFileProblem } from '../../config/yaml-file.ts';

/** A suite written by `tbt tasks import-thinkingbox`: one JSON file beside nothing else. */

export interface ThinkingBoxSuite {
  kind: 'thinkingbox';
  name: string;
  dir: string;
  imported: ImportedSuite;
  scenarios: Record<string, ImportedScenario>;
  tasks: (ImportedTask & { file: string; line: number })[];
}

export function isImportedSuiteDir(dir: string): boolean {
  return fs.existsSync(path.join(dir, IMPORTED_SUITE_FILE));
}

export function loadImportedSuite(dir: string): { suite?: ThinkingBoxSuite; problems: TaskFileProblem[] } {
  const file = path.join(dir, IMPORTED_SUITE_FILE);
  let raw: unknown;
  try {
    raw = JSON.parse(fs.readFileSync(file, 'utf8'));
  } catch (err) {
    return {
      problems: [{ file, line: 1, field: '', message: `cannot read the imported suite: ${(err as Error).message}` }],
    };
  }
  const parsed = importedSuiteSchema.safeParse(raw);
  if (!parsed.success) {
    return {
      problems: parsed.error.issues.map((i) => ({
        file,
        line: 1,
        field: i.path.join('.'),
        message: `${i.message} (re-run tbt tasks import-thinkingbox)`,
      })),
    };
  }
  const imported = parsed.data;
  const orphans = imported.tasks.filter((t) => !imported.scenarios[t.scenario]);
  if (orphans.length)
    return {
      problems: orphans.map((t) => ({
        file,
        line: 1,
        field: `tasks.${t.uid}.scenario`,
        message: `unknown scenario '${t.scenario}' (re-run tbt tasks import-thinkingbox)`,
      })),
    };
  return {
    suite: {
      kind: 'thinkingbox',
      name: imported.name,
      dir,
      imported,
      scenarios: imported.scenarios,
      tasks: imported.tasks.map((t) => ({ ...t, file: t.test.file, line: t.test.line })),
    },
    problems: [],
  };
}
