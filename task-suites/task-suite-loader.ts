import fs from 'node:fs';
import path from 'node:path';
import { scenarioSchema, taskFileSchema, type Scenario, type Task } from '../config/task-schema.ts';
import { formatProblem, parseYamlFile, type TaskFileProblem } from '../config/yaml-file.ts';
import {
  isImportedSuiteDir,
  loadImportedSuite,
  type ThinkingBoxSuite,
} from '../datasets/thinkingbox/imported-suite.ts';

export { formatProblem, parseYamlFile, type TaskFileProblem, type ThinkingBoxSuite };

/**
 * Reads task suites from disk. A native suite is a folder with `scenarios/*.yaml` and `tasks/*.yaml`; an imported
 * ThinkingBox suite is a folder with `thinkingbox-suite.json` (written by `tbt tasks import-thinkingbox`). Every
 * problem is collected as a `TaskFileProblem` naming file, line and field; one bad file never hides the others.
 */

export interface LoadedTask extends Task {
  suite: string;
  file: string;
  line: number;
}
export interface Suite {
  kind: 'native';
  name: string;
  dir: string;
  scenarios: Record<string, Scenario>;
  tasks: LoadedTask[];
}
export type AnySuite = Suite | ThinkingBoxSuite;
export interface LoadResult {
  suites: AnySuite[];
  problems: TaskFileProblem[];
}

function yamlFiles(dir: string): string[] {
  if (!fs.existsSync(dir)) return [];
  return fs
    .readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .filter((f) => /\.ya?ml$/.test(f))
    .sort()
    .map((f) => path.join(dir, f));
}

export function loadSuite(dir: string): { suite: Suite; problems: TaskFileProblem[] } {
  const problems: TaskFileProblem[] = [];
  const suite: Suite = { kind: 'native', name: path.basename(dir), dir, scenarios: {}, tasks: [] };
  const scenarioFiles = yamlFiles(path.join(dir, 'scenarios'));
  if (scenarioFiles.length === 0)
    problems.push({
      file: path.join(dir, 'scenarios'),
      line: 1,
      field: '',
      message: 'a suite needs at least one scenario file',
    });
  for (const file of scenarioFiles) {
    const r = parseYamlFile(file, scenarioSchema);
    problems.push(...r.problems);
    if (!r.value) continue;
    if (suite.scenarios[r.value.name]) {
      problems.push({
        file,
        line: r.lineOf(['name']),
        field: 'name',
        message: `scenario '${r.value.name}' is defined twice in suite ${suite.name}`,
      });
      continue;
    }
    suite.scenarios[r.value.name] = r.value;
  }
  const uids = new Map<string, string>();
  for (const file of yamlFiles(path.join(dir, 'tasks'))) {
    const r = parseYamlFile(file, taskFileSchema);
    problems.push(...r.problems);
    if (!r.value) continue;
    for (const [i, task] of r.value.tasks.entries()) {
      const at = (field: string) => ({
        file,
        line: r.lineOf(['tasks', i, ...field.split('.')]),
        field: `tasks[${i}].${field}`,
      });
      const scenario = suite.scenarios[task.scenario];
      const before = problems.length;
      if (uids.has(task.uid))
        problems.push({ ...at('uid'), message: `duplicate uid '${task.uid}' (first in ${uids.get(task.uid)})` });
      if (!scenario) {
        problems.push({
          ...at('scenario'),
          message: `unknown scenario '${task.scenario}' (known: ${Object.keys(suite.scenarios).join(', ') || 'none'})`,
        });
      } else {
        for (const [j, call] of task.golden.entries()) {
          const tool = scenario.tools.find((t) => t.name === call.tool);
          if (!tool)
            problems.push({
              ...at(`golden.${j}.tool`),
              field: `tasks[${i}].golden[${j}].tool`,
              message: `unknown tool '${call.tool}' in scenario ${scenario.name}`,
            });
        }
      }
      if (problems.length > before) continue;
      uids.set(task.uid, file);
      suite.tasks.push({ ...task, suite: suite.name, file, line: r.lineOf(['tasks', i]) });
    }
  }
  return { suite, problems };
}

/** A native suite (scenarios/) or an imported one (its suite file). */
export const isSuiteDir = (dir: string) => fs.existsSync(path.join(dir, 'scenarios')) || isImportedSuiteDir(dir);

/** Loads every suite under `root`: `root` itself if it is a suite, else each sub-folder that is. */
export function loadSuites(root: string): LoadResult {
  if (!fs.existsSync(root))
    return { suites: [], problems: [{ file: root, line: 1, field: '', message: 'no such folder' }] };
  const dirs = isSuiteDir(root)
    ? [root]
    : fs
        .readdirSync(root, { withFileTypes: true })
        .filter((d) => d.isDirectory() && isSuiteDir(path.join(root, d.name)))
        .map((d) => path.join(root, d.name))
        .sort();
  if (dirs.length === 0)
    return {
      suites: [],
      problems: [
        {
          file: root,
          line: 1,
          field: '',
          message:
            'no task suite found (a suite is a folder with scenarios/ and tasks/, or an imported ' +
            'thinkingbox-suite.json)',
        },
      ],
    };
  const result: LoadResult = { suites: [], problems: [] };
  for (const dir of dirs) {
    const { suite, problems } = isImportedSuiteDir(dir) ? loadImportedSuite(dir) : loadSuite(dir);
    if (suite) result.suites.push(suite);
    result.problems.push(...problems);
  }
  return result;
}

/** Loads the native suites under `root`; an imported suite there is a problem (for native-only tools). */
export function loadNativeSuites(root: string): { suites: Suite[]; problems: TaskFileProblem[] } {
  const { suites, problems } = loadSuites(root);
  const native = suites.filter((s): s is Suite => s.kind === 'native');
  for (const s of suites)
    if (s.kind !== 'native')
      problems.push({
        file: s.dir,
        line: 1,
        field: '',
        message: 'an imported ThinkingBox suite is not supported here',
      });
  return { suites: native, problems };
}

/** Domain of a task for per-domain reports. */
export function taskDomain(suite: AnySuite, scenarioName: string): string {
  return suite.kind === 'native' ? (suite.scenarios[scenarioName]?.domain ?? scenarioName) : scenarioName;
}
