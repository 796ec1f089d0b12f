import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { repoRoot } from '../../config/environment.ts';
import {
  agentFileSchema,
  scenarioFileSchema,
  serversFileSchema,
  testCaseYamlSchema,
  testListSchema,
  type ImportedScenario,
  type ImportedSuite,
  type ImportedTask,
  type NativeTestPattern,
  type ServerSpec,
} from '../../config/thinkingbox-schema.ts';
import { parseYamlFile, parseYamlText, validateParsed, type TaskFileProblem } from '../../config/yaml-file.ts';
import { goldenCallsOf, mergeWorldState } from '../../core/world-state-merge.ts';
import { datasetPython } from './dataset-python.ts';

/**
 * `tbt tasks import-thinkingbox`: reads a ThinkingBox-format dataset (REFERENCE.md section 6) into an imported
 * suite. Test files are read by Python's own parser (thinkingbox/tbt_thinkingbox/parse_test_files.py); their
 * `!` YAML is parsed here with line numbers mapped back into the .py file. Every file or task that cannot be
 * imported is reported with file and line, and the rest still import.
 */

export interface ImportRequest {
  dataDir: string;
  listFile: string;
  serversFile?: string;
  /** uids that may be evaluated but never trained on (an evaluation-only benchmark). */
  evaluationOnly?: Set<string>;
  name?: string;
}

export interface ImportResult {
  suite: ImportedSuite;
  problems: TaskFileProblem[];
  /** Fields kept but not used, and similar notes (file and line). */
  warnings: TaskFileProblem[];
  listed: number;
}

interface ParsedTestFunction {
  function: string;
  line: number;
  yaml: string;
  yaml_line: number;
  params: string[];
  native: NativeTestPattern | null;
}
interface ParsedTestFile {
  file: string;
  defaults: { yaml: string; line: number } | null;
  tasks: ParsedTestFunction[];
  problems: { file: string; line: number; message: string }[];
}

const KNOWN_TASK_FIELDS = new Set([
  'scenario',
  'query',
  'user_context',
  'max_user_sim_turns',
  'max_agent_sim_turns',
  'bot_instructions',
  'init',
  'format_query',
  'tags',
  'history',
]);

function parseTestFiles(files: string[]): ParsedTestFile[] {
  if (files.length === 0) return [];
  const run = spawnSync(datasetPython(), ['-m', 'tbt_thinkingbox.parse_test_files'], {
    cwd: path.join(repoRoot, 'thinkingbox'),
    input: JSON.stringify(files),
    encoding: 'utf8',
    timeout: 120_000,
    maxBuffer: 256 * 1024 * 1024,
  });
  if (run.status !== 0)
    throw new Error(
      `the test-file parser failed (exit ${run.status ?? run.signal}): ${(run.stderr || run.error?.message || '').trim().slice(-2000)}`,
    );
  return (JSON.parse(run.stdout) as { files: ParsedTestFile[] }).files;
}

function serverSpec(
  value: string | { command: string; args: string[]; env: Record<string, string>; cwd?: string },
  dataDir: string,
): ServerSpec {
  if (typeof value === 'string') {
    const [command, ...args] = value.trim().split(/\s+/);
    return { command: command!, args, env: {}, cwd: dataDir };
  }
  return { command: value.command, args: value.args, env: value.env, cwd: path.resolve(dataDir, value.cwd ?? '.') };
}

function yamlFilesIn(dir: string): string[] {
  if (!fs.existsSync(dir)) return [];
  return fs
    .readdirSync(dir)
    .filter((f) => /\.ya?ml$/.test(f))
    .sort()
    .map((f) => path.join(dir, f));
}

const stem = (file: string) => path.basename(file).replace(/\.ya?ml$/, '');

export function importThinkingboxDataset(request: ImportRequest): ImportResult {
  const dataDir = path.resolve(request.dataDir);
  const problems: TaskFileProblem[] = [];
  const warnings: TaskFileProblem[] = [];
  const problem = (file: string, line: number, message: string, field = '') =>
    problems.push({ file, line, field, message });

  const list = parseYamlFile(request.listFile, testListSchema);
  problems.push(...list.problems);

  const serversFile = request.serversFile ?? path.join(dataDir, 'servers.yaml');
  const servers: Record<string, ServerSpec> = {};
  const serversYaml = parseYamlFile(serversFile, serversFileSchema);
  problems.push(...serversYaml.problems);
  for (const [name, value] of Object.entries(serversYaml.value?.servers ?? {}))
    servers[name] = serverSpec(value, dataDir);

  const agents = new Map<string, string>();
  for (const file of yamlFilesIn(path.join(dataDir, 'agent'))) {
    const r = parseYamlFile(file, agentFileSchema);
    problems.push(...r.problems);
    if (r.value) agents.set(stem(file), r.value.system_prompt);
  }
  if (agents.size === 0) problem(path.join(dataDir, 'agent'), 1, 'no agent/<name>.yaml with a system_prompt');

  const scenarios: Record<string, ImportedScenario> = {};
  for (const file of yamlFilesIn(path.join(dataDir, 'scenario'))) {
    const r = parseYamlFile(file, scenarioFileSchema);
    problems.push(...r.problems);
    if (!r.value) continue;
    const s = r.value;
    const agentName = s.agent ?? (agents.size === 1 ? [...agents.keys()][0]! : 'default');
    if (!agents.has(agentName)) {
      problem(
        file,
        r.lineOf(['agent']),
        `unknown agent '${agentName}' (known: ${[...agents.keys()].join(', ') || 'none'})`,
        'agent',
      );
      continue;
    }
    const missing = Object.keys(s.world_state).filter((server) => !servers[server]);
    if (missing.length) {
      problem(
        file,
        r.lineOf(['world_state', missing[0]!]),
        `server '${missing[0]}' is not defined in ${path.relative(dataDir, serversFile) || serversFile}`,
        `world_state.${missing[0]}`,
      );
      continue;
    }
    scenarios[stem(file)] = {
      name: stem(file),
      agent_prompt: agents.get(agentName)!,
      bot_instructions: s.bot_instructions,
      world_state: s.world_state,
      tools: s.tools.map((t) =>
        typeof t === 'string'
          ? { name: t }
          : {
              name: t.name,
              ...(t.description ? { description: t.description } : {}),
              ...(t.input_schema ? { input_schema: t.input_schema } : {}),
            },
      ),
      file,
    };
  }

  // Which functions of which files the list selects, in list order; the files are parsed once each.
  const testRoot = path.join(dataDir, 'test_case');
  const wanted = (list.value ?? []).map((uid, i) => {
    const [rel, fn] = [uid.slice(0, uid.lastIndexOf(':')), uid.slice(uid.lastIndexOf(':') + 1)];
    return { uid, file: path.join(testRoot, rel), fn, listLine: list.lineOf([i]) };
  });
  const files = [...new Set(wanted.map((w) => w.file))].filter((f) => {
    if (fs.existsSync(f)) return true;
    for (const w of wanted.filter((x) => x.file === f))
      problem(request.listFile, w.listLine, `${w.uid}: no such test file ${f}`);
    return false;
  });
  const parsed = new Map(parseTestFiles(files).map((f) => [f.file, f]));
  for (const f of parsed.values()) for (const p of f.problems) problem(p.file, p.line, p.message);

  const tasks: ImportedTask[] = [];
  const seen = new Set<string>();
  for (const w of wanted) {
    const file = parsed.get(w.file);
    if (!file) continue;
    if (seen.has(w.uid)) {
      problem(request.listFile, w.listLine, `${w.uid} is listed twice`);
      continue;
    }
    seen.add(w.uid);
    const fn = file.tasks.find((t) => t.function === w.fn);
    if (!fn) {
      // A file that did not parse at all has its own problem; otherwise a missing function is this entry's.
      if (file.tasks.length > 0 || file.problems.length === 0)
        problem(
          request.listFile,
          w.listLine,
          `${w.uid}: ${path.relative(dataDir, w.file)} has no test function '${w.fn}' (a function whose first statement is a string starting with '!')`,
        );
      continue;
    }
    const task = importTask(
      w.uid,
      w.file,
      fn,
      file.defaults,
      scenarios,
      servers,
      request.evaluationOnly ?? new Set(),
      problems,
      warnings,
    );
    if (task) tasks.push(task);
  }

  return {
    suite: {
      format: 'thinkingbox-import/1',
      name: request.name ?? path.basename(dataDir),
      dataset_dir: dataDir,
      servers,
      scenarios,
      tasks,
    },
    problems,
    warnings,
    listed: wanted.length,
  };
}

function importTask(
  uid: string,
  file: string,
  fn: ParsedTestFunction,
  defaults: ParsedTestFile['defaults'],
  scenarios: Record<string, ImportedScenario>,
  servers: Record<string, ServerSpec>,
  evaluationOnly: Set<string>,
  problems: TaskFileProblem[],
  warnings: TaskFileProblem[],
): ImportedTask | undefined {
  const before = problems.length;
  const own = parseYamlText(fn.yaml, file, fn.yaml_line);
  const base = defaults ? parseYamlText(defaults.yaml, file, defaults.line) : undefined;
  problems.push(...own.problems, ...(base?.problems ?? []));
  if (problems.length > before) return undefined;
  const isObject = (v: unknown): v is Record<string, unknown> =>
    typeof v === 'object' && v !== null && !Array.isArray(v);
  if (!isObject(own.value))
    return void problems.push({
      file,
      line: fn.yaml_line,
      field: '',
      message: `task ${uid}: the '!' YAML must be a mapping`,
    });
  if (base && base.value != null && !isObject(base.value))
    return void problems.push({
      file,
      line: defaults!.line,
      field: '',
      message: `the module '!' YAML defaults must be a mapping`,
    });
  // Task fields replace the module defaults; a field is located in whichever YAML it came from.
  const ownFields = own.value;
  const merged = { ...(isObject(base?.value) ? base.value : {}), ...ownFields };
  const locate = (p: PropertyKey[]) =>
    p.length && typeof p[0] === 'string' && !(p[0] in ownFields) && base ? base.lineOf(p) : own.lineOf(p);
  const checked = validateParsed(merged, testCaseYamlSchema, file, locate);
  problems.push(...checked.problems.map((p) => ({ ...p, message: `task ${uid}: ${p.message}` })));
  if (!checked.value) return undefined;
  const t = checked.value;
  for (const key of Object.keys(merged).filter((k) => !KNOWN_TASK_FIELDS.has(k)))
    warnings.push({
      file,
      line: locate([key]),
      field: key,
      message: `task ${uid}: unknown field kept out of the import`,
    });
  if (t.format_query !== undefined)
    warnings.push({
      file,
      line: locate(['format_query']),
      field: 'format_query',
      message: `task ${uid}: format_query is not applied (its semantics are not specified in REFERENCE.md); the query is used as written`,
    });

  const scenario = scenarios[t.scenario];
  if (!scenario)
    return void problems.push({
      file,
      line: locate(['scenario']),
      field: 'scenario',
      message: `task ${uid}: unknown scenario '${t.scenario}' (known: ${Object.keys(scenarios).join(', ') || 'none'})`,
    });
  const world = mergeWorldState(scenario.world_state, t.init) as Record<string, Record<string, unknown>>;
  const unknownServer = Object.keys(t.init).find((s) => !servers[s]);
  if (unknownServer)
    return void problems.push({
      file,
      line: locate(['init', unknownServer]),
      field: `init.${unknownServer}`,
      message: `task ${uid}: server '${unknownServer}' is not defined in servers.yaml`,
    });
  const golden = goldenCallsOf(world);
  if (golden.problems.length)
    return void problems.push(
      ...golden.problems.map((m) => ({ file, line: locate(['init']), field: 'init', message: `task ${uid}: ${m}` })),
    );
  const visible = new Set(scenario.tools.map((x) => x.name));
  const hidden = golden.calls.find((c) => !visible.has(c.tool));
  if (hidden)
    return void problems.push({
      file,
      line: locate(['init', hidden.server]),
      field: `init.${hidden.server}.golden`,
      message: `task ${uid}: golden call to '${hidden.tool}', which scenario ${scenario.name} does not make visible`,
    });

  return {
    uid,
    scenario: scenario.name,
    query: t.query,
    ...(t.user_context !== undefined ? { user_context: t.user_context } : {}),
    limits: { max_user_turns: t.max_user_sim_turns ?? 10, max_agent_turns: t.max_agent_sim_turns ?? null },
    ...(t.bot_instructions !== undefined ? { bot_instructions: t.bot_instructions } : {}),
    world_state: world,
    history: t.history,
    tags: t.tags,
    evaluation_only: evaluationOnly.has(uid),
    test: { file, function: fn.function, line: fn.line, params: fn.params, native: fn.native },
    golden: golden.calls,
  };
}
