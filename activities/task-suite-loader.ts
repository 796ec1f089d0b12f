import fs from 'node:fs';
import path from 'node:path';
import { isNode, LineCounter, parseDocument, type Document } from 'yaml';
import type { z } from 'zod';
import { scenarioSchema, taskFileSchema, type Scenario, type Task } from '../config/task-schema.ts';

/**
 * Reads task suites from disk. A suite is a folder with `scenarios/*.yaml` and `tasks/*.yaml`. Every problem
 * is collected as a `TaskFileProblem` naming file, line and field; one bad file never hides the others.
 */

export interface TaskFileProblem { file: string; line: number; field: string; message: string }

export function formatProblem(p: TaskFileProblem): string {
  return `${p.file}:${p.line}: ${p.field ? `${p.field}: ` : ''}${p.message}`;
}

export class TaskFileError extends Error {
  constructor(readonly problems: TaskFileProblem[]) {
    super(problems.map(formatProblem).join('\n'));
  }
}

export interface LoadedTask extends Task { suite: string; file: string; line: number }
export interface Suite { name: string; dir: string; scenarios: Record<string, Scenario>; tasks: LoadedTask[] }
export interface LoadResult { suites: Suite[]; problems: TaskFileProblem[] }

function lineOf(doc: Document, counter: LineCounter, pathParts: PropertyKey[]): number {
  for (let n = pathParts.length; n >= 0; n--) {
    const node = n === 0 ? doc.contents : doc.getIn(pathParts.slice(0, n) as (string | number)[], true);
    if (isNode(node) && node.range) return counter.linePos(node.range[0]).line;
  }
  return 1;
}

function fieldName(parts: PropertyKey[]): string {
  return parts.map((p, i) => (typeof p === 'number' ? `[${p}]` : `${i ? '.' : ''}${String(p)}`)).join('');
}

/** Parses one YAML file against a schema; returns the value or the problems (with line numbers). */
export function parseYamlFile<S extends z.ZodType>(file: string, schema: S): { value?: z.infer<S>; problems: TaskFileProblem[]; lineOf: (p: PropertyKey[]) => number } {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (err) {
    return { problems: [{ file, line: 1, field: '', message: `cannot read file: ${(err as Error).message}` }], lineOf: () => 1 };
  }
  const counter = new LineCounter();
  const doc = parseDocument(text, { lineCounter: counter, uniqueKeys: true, prettyErrors: false });
  const locate = (p: PropertyKey[]) => lineOf(doc, counter, p);
  if (doc.errors.length > 0) {
    return {
      problems: doc.errors.map((e) => ({ file, line: e.linePos?.[0]?.line ?? 1, field: '', message: `YAML syntax: ${e.message.split('\n')[0]}` })),
      lineOf: locate,
    };
  }
  const parsed = schema.safeParse(doc.toJS());
  if (!parsed.success) {
    return {
      problems: parsed.error.issues.flatMap((i) => {
        // An unknown key is reported on its parent object; name (and locate) the key itself.
        const paths = i.code === 'unrecognized_keys' ? i.keys.map((k) => [...i.path, k]) : [i.path];
        return paths.map((p) => ({ file, line: locate(p), field: fieldName(p), message: i.code === 'unrecognized_keys' ? 'unknown field' : i.message }));
      }),
      lineOf: locate,
    };
  }
  return { value: parsed.data, problems: [], lineOf: locate };
}

function yamlFiles(dir: string): string[] {
  if (!fs.existsSync(dir)) return [];
  return fs.readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .filter((f) => /\.ya?ml$/.test(f))
    .sort()
    .map((f) => path.join(dir, f));
}

export function loadSuite(dir: string): { suite: Suite; problems: TaskFileProblem[] } {
  const problems: TaskFileProblem[] = [];
  const suite: Suite = { name: path.basename(dir), dir, scenarios: {}, tasks: [] };
  const scenarioFiles = yamlFiles(path.join(dir, 'scenarios'));
  if (scenarioFiles.length === 0) problems.push({ file: path.join(dir, 'scenarios'), line: 1, field: '', message: 'a suite needs at least one scenario file' });
  for (const file of scenarioFiles) {
    const r = parseYamlFile(file, scenarioSchema);
    problems.push(...r.problems);
    if (!r.value) continue;
    if (suite.scenarios[r.value.name]) {
      problems.push({ file, line: r.lineOf(['name']), field: 'name', message: `scenario '${r.value.name}' is defined twice in suite ${suite.name}` });
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
      const at = (field: string) => ({ file, line: r.lineOf(['tasks', i, ...field.split('.')]), field: `tasks[${i}].${field}` });
      const scenario = suite.scenarios[task.scenario];
      const before = problems.length;
      if (uids.has(task.uid)) problems.push({ ...at('uid'), message: `duplicate uid '${task.uid}' (first in ${uids.get(task.uid)})` });
      if (!scenario) {
        problems.push({ ...at('scenario'), message: `unknown scenario '${task.scenario}' (known: ${Object.keys(suite.scenarios).join(', ') || 'none'})` });
      } else {
        for (const [j, call] of task.golden.entries()) {
          const tool = scenario.tools.find((t) => t.name === call.tool);
          if (!tool) problems.push({ ...at(`golden.${j}.tool`), field: `tasks[${i}].golden[${j}].tool`, message: `unknown tool '${call.tool}' in scenario ${scenario.name}` });
        }
      }
      if (problems.length > before) continue;
      uids.set(task.uid, file);
      suite.tasks.push({ ...task, suite: suite.name, file, line: r.lineOf(['tasks', i]) });
    }
  }
  return { suite, problems };
}

/** Loads every suite under `root`: `root` itself if it has scenarios/, else each sub-folder that does. */
export function loadSuites(root: string): LoadResult {
  if (!fs.existsSync(root)) return { suites: [], problems: [{ file: root, line: 1, field: '', message: 'no such folder' }] };
  const dirs = fs.existsSync(path.join(root, 'scenarios'))
    ? [root]
    : fs.readdirSync(root, { withFileTypes: true }).filter((d) => d.isDirectory() && fs.existsSync(path.join(root, d.name, 'scenarios'))).map((d) => path.join(root, d.name)).sort();
  if (dirs.length === 0) return { suites: [], problems: [{ file: root, line: 1, field: '', message: 'no task suite found (a suite is a folder with scenarios/ and tasks/)' }] };
  const result: LoadResult = { suites: [], problems: [] };
  for (const dir of dirs) {
    const { suite, problems } = loadSuite(dir);
    result.suites.push(suite);
    result.problems.push(...problems);
  }
  return result;
}
