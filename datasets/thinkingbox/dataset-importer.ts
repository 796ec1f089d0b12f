import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import type { z } from 'zod';
import { repoRoot } from '../../config/environment.ts';
import {
  agentFileSchema,
  scenarioFileSchema,
  serversFileSchema,
  testCaseYamlSchema,
  testListSchema,
  testMetaFileSchema,
  datasetServerSchema,
  type ImportedScenario,
  type ImportedSuite,
  type ImportedTask,
  type NativeTestPattern,
  type ServerSpec,
} from '../../config/thinkingbox-schema.ts';
import { parseYamlFile, parseYamlText, validateParsed, type TaskFileProblem } from '../../config/yaml-file.ts';
import { goldenCallsOf, mergeWorldState } from '../../core/world-state-merge.ts';
import { datasetPython } from './dataset-python.ts';

type DatasetServer = z.infer<typeof datasetServerSchema>;

/**
 * `tbt tasks import-thinkingbox`: reads a ThinkingBox-format dataset (docs/thinkingbox-datasets.md) into an
 * imported suite. Test files are read by Python's own parser (thinkingbox/tbt_thinkingbox/parse_test_files.py); their
 * `!` YAML is parsed here with line numbers mapped back into the .py file. Every file or task that cannot be
 * imported is reported with file and line, and the rest still import.
 */

export interface ImportRequest {
  /** The dataset folder (holding agent/, scenario/, test_case/). */
  dataDir: string;
  listFile: string;
  /** Default: servers/servers.yaml beside the dataset folder, else servers.yaml inside it. */
  serversFile?: string;
  /** agent/<name>.yaml to use (default: the only one, else `think`). */
  agent?: string;
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

/** A `!` YAML string as Python's parser read it: `value` by PyYAML (as the reference reads it), or `error`. */
interface ParsedYaml {
  value?: unknown;
  error?: { line: number; message: string };
}
interface ParsedTestFunction extends ParsedYaml {
  function: string;
  line: number;
  yaml: string;
  yaml_line: number;
  params: string[];
  native: NativeTestPattern | null;
}
interface ParsedTestFile {
  file: string;
  defaults: ({ yaml: string; line: number } & ParsedYaml) | null;
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

function serverSpec(value: DatasetServer, serversDir: string): ServerSpec {
  if (value.type === 'mcp-remote') return { transport: 'remote', url: value.url };
  const [command, ...args] = value.command;
  return {
    transport: 'stdio',
    command: command!,
    args,
    env: value.env ?? {},
    cwd: path.resolve(serversDir, value.cwd ?? '.'),
  };
}

/** Server package folders beside servers.yaml: each sub-folder holding a pyproject.toml. */
function serverPackagesIn(serversDir: string): string[] {
  if (!fs.existsSync(serversDir)) return [];
  return fs
    .readdirSync(serversDir, { withFileTypes: true })
    .filter((d) => d.isDirectory() && fs.existsSync(path.join(serversDir, d.name, 'pyproject.toml')))
    .map((d) => path.join(serversDir, d.name))
    .sort();
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

  const besideData = path.join(dataDir, '..', 'servers', 'servers.yaml');
  const serversFile = path.resolve(
    request.serversFile ?? (fs.existsSync(besideData) ? besideData : path.join(dataDir, 'servers.yaml')),
  );
  const serversDir = path.dirname(serversFile);
  const servers: Record<string, ServerSpec> = {};
  const serversYaml = parseYamlFile(serversFile, serversFileSchema);
  problems.push(...serversYaml.problems);
  for (const [name, value] of Object.entries(serversYaml.value?.servers ?? {})) {
    const checked = validateParsed(value, datasetServerSchema, serversFile, (p) =>
      serversYaml.lineOf(['servers', name, ...p]),
    );
    problems.push(...checked.problems.map((p) => ({ ...p, field: `servers.${name}${p.field ? `.${p.field}` : ''}` })));
    if (checked.value) servers[name] = serverSpec(checked.value, serversDir);
  }

  const agents = new Map<string, { file: string; value: z.infer<typeof agentFileSchema> }>();
  for (const file of yamlFilesIn(path.join(dataDir, 'agent'))) {
    const r = parseYamlFile(file, agentFileSchema);
    problems.push(...r.problems);
    if (r.value) agents.set(stem(file), { file, value: r.value });
  }
  const agentName = request.agent ?? (agents.size === 1 ? [...agents.keys()][0]! : 'think');
  const agent = agents.get(agentName);
  if (!agent)
    problem(
      path.join(dataDir, 'agent'),
      1,
      `no agent/${agentName}.yaml with system_instructions (found: ${[...agents.keys()].join(', ') || 'none'}; ` +
        `choose one with --agent)`,
    );

  const scenarios: Record<string, ImportedScenario> = {};
  for (const file of yamlFilesIn(path.join(dataDir, 'scenario'))) {
    const r = parseYamlFile(file, scenarioFileSchema);
    problems.push(...r.problems);
    if (!r.value || !agent) continue;
    const s = r.value;
    const missing = Object.keys(s.world_state).filter((server) => !servers[server]);
    if (missing.length) {
      problem(
        file,
        r.lineOf(['world_state', missing[0]!]),
        `server '${missing[0]}' is not defined in ${serversFile}`,
        `world_state.${missing[0]}`,
      );
      continue;
    }
    const builtin = new Set(agent.value.builtin_tools.map((t) => t.name));
    const clash = s.tools.findIndex((t) => builtin.has(t.name));
    if (clash >= 0) {
      problem(
        file,
        r.lineOf(['tools', clash, 'name']),
        `tool '${s.tools[clash]!.name}' is also a builtin tool of agent ${agentName} (a duplicate name is an error)`,
        `tools[${clash}].name`,
      );
      continue;
    }
    scenarios[stem(file)] = {
      name: stem(file),
      agent: agentName,
      agent_prompt: agent.value.system_instructions,
      builtin_tools: agent.value.builtin_tools.map((t) => ({
        name: t.name,
        description: t.description,
        input_schema: t.input_schema,
        is_end_turn: t.is_end_turn,
      })),
      parallel_tool_calls: agent.value.parallel_tool_calls,
      bot_instructions: s.bot_instructions ?? '',
      world_state: s.world_state,
      tools: s.tools.map((t) => ({
        name: t.name,
        ...(t.override_description != null ? { description: t.override_description } : {}),
        ...(t.override_arg_description ? { arg_descriptions: t.override_arg_description } : {}),
        ...(t.direct_response != null ? { direct_response: t.direct_response } : {}),
        ...(t.is_end_turn ? { is_end_turn: true } : {}),
      })),
      tags: s.tags ?? [],
      file,
    };
  }

  // Which functions of which files the list selects, in list order; the files are parsed once each.
  const testRoot = path.join(dataDir, 'test_case');
  const wanted = (list.value ?? []).map((uid, i) => {
    const [rel, fn] = [uid.slice(0, uid.lastIndexOf(':')), uid.slice(uid.lastIndexOf(':') + 1)];
    const found = findTestFile(testRoot, rel);
    return { uid, file: found.file, tried: found.tried, fn, listLine: list.lineOf([i]) };
  });
  for (const w of wanted)
    if (!w.file)
      problem(
        request.listFile,
        w.listLine,
        `${w.uid}: no such test file (looked for ${w.tried.map((t) => path.relative(dataDir, t)).join(', ')})`,
      );
  const files = [...new Set(wanted.flatMap((w) => (w.file ? [w.file] : [])))];
  const parsed = new Map(parseTestFiles(files).map((f) => [f.file, f]));
  for (const f of parsed.values()) for (const p of f.problems) problem(p.file, p.line, p.message);
  const metas = new Map<string, ReturnType<typeof readMeta>>();

  const tasks: ImportedTask[] = [];
  const seen = new Set<string>();
  for (const w of wanted) {
    const file = w.file ? parsed.get(w.file) : undefined;
    if (!file || !w.file) continue;
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
          `${w.uid}: ${path.relative(dataDir, w.file)} has no test function '${w.fn}' (a function whose first ` +
            `statement is a string starting with '!')`,
        );
      continue;
    }
    if (!metas.has(w.file)) metas.set(w.file, readMeta(w.file));
    const task = importTask({
      uid: w.uid,
      file: w.file,
      fn,
      defaults: file.defaults,
      meta: metas.get(w.file)!,
      scenarios,
      servers,
      evaluationOnly: request.evaluationOnly ?? new Set(),
      problems,
      warnings,
    });
    if (task) tasks.push(task);
  }
  for (const meta of metas.values()) if (meta.problems.length) problems.push(...meta.problems);

  // The suite keeps what its tasks use (a dataset's other scenarios and servers were still checked above).
  const usedScenarios = new Set(tasks.map((t) => t.scenario));
  const usedServers = new Set(tasks.flatMap((t) => Object.keys(t.world_state)));
  return {
    suite: {
      format: 'thinkingbox-import/2',
      name:
        request.name ??
        path.basename(dataDir === path.join(path.dirname(dataDir), 'dataset') ? path.dirname(dataDir) : dataDir),
      dataset_dir: dataDir,
      server_packages: serverPackagesIn(serversDir),
      servers: Object.fromEntries(Object.entries(servers).filter(([name]) => usedServers.has(name))),
      scenarios: Object.fromEntries(Object.entries(scenarios).filter(([name]) => usedScenarios.has(name))),
      tasks,
    },
    problems,
    warnings,
    listed: wanted.length,
  };
}

/** `<file>.meta.yaml` beside a test file (either `x.meta.yaml` or `x.py.meta.yaml`): the `$history` conversations. */
function readMeta(testFile: string): {
  file?: string;
  history: Record<string, { role: 'user' | 'assistant'; content: string }[]>;
  problems: TaskFileProblem[];
} {
  const candidates = [testFile.replace(/\.py$/, '.meta.yaml'), `${testFile}.meta.yaml`];
  const file = candidates.find((c) => fs.existsSync(c));
  if (!file) return { history: {}, problems: [] };
  const r = parseYamlFile(file, testMetaFileSchema);
  return {
    file,
    history: (r.value?.$history ?? {}) as Record<string, { role: 'user' | 'assistant'; content: string }[]>,
    problems: r.problems,
  };
}

/** Python slice semantics for `key:start:end` (negative indices count from the end; empty = open). */
function sliceHistory<T>(items: T[], start: string | undefined, end: string | undefined): T[] {
  const at = (v: string | undefined, dflt: number) => {
    if (v === undefined || v === '') return dflt;
    const n = Number(v);
    return n < 0 ? Math.max(0, items.length + n) : Math.min(n, items.length);
  };
  return items.slice(at(start, 0), at(end, items.length));
}

/**
 * The value PyYAML read (what the reference framework sees), located with our YAML parser's line map when that
 * parser also accepts the text (it is stricter about quoted scalars spanning lines); otherwise every field is
 * located at the string's first line.
 */
function yamlOf(text: string, firstLine: number, parsed: ParsedYaml, file: string) {
  if (parsed.error)
    return {
      value: undefined,
      problems: [{ file, line: parsed.error.line, field: '', message: parsed.error.message }],
      lineOf: () => firstLine,
    };
  const located = parseYamlText(text, file, firstLine);
  return {
    value: parsed.value,
    problems: [] as TaskFileProblem[],
    lineOf: located.problems.length ? () => firstLine : located.lineOf,
  };
}

interface TaskImport {
  uid: string;
  file: string;
  fn: ParsedTestFunction;
  defaults: ParsedTestFile['defaults'];
  meta: ReturnType<typeof readMeta>;
  scenarios: Record<string, ImportedScenario>;
  servers: Record<string, ServerSpec>;
  evaluationOnly: Set<string>;
  problems: TaskFileProblem[];
  warnings: TaskFileProblem[];
}

function importTask(input: TaskImport): ImportedTask | undefined {
  const { uid, file, fn, defaults, meta, scenarios, servers, evaluationOnly, problems, warnings } = input;
  const before = problems.length;
  const own = yamlOf(fn.yaml, fn.yaml_line, fn, file);
  const base = defaults ? yamlOf(defaults.yaml, defaults.line, defaults, file) : undefined;
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
  const baseFields = isObject(base?.value) ? base.value : {};
  const merged: Record<string, unknown> = { ...baseFields, ...ownFields };
  // Tags concatenate (module tags first); every other key of the function replaces the module's.
  if (Array.isArray(baseFields.tags) && Array.isArray(ownFields.tags))
    merged.tags = [...baseFields.tags, ...ownFields.tags];
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
  const scenario = scenarios[t.scenario];
  if (!scenario)
    return void problems.push({
      file,
      line: locate(['scenario']),
      field: 'scenario',
      message: `task ${uid}: unknown scenario '${t.scenario}' (known: ${Object.keys(scenarios).join(', ') || 'none'})`,
    });
  const init = t.init ?? {};
  const world = mergeWorldState(scenario.world_state, init) as Record<string, Record<string, unknown> | null>;
  const unknownServer = Object.keys(init).find((s) => !servers[s]);
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
      field: `init.${hidden.server}.golden_test_case`,
      message: `task ${uid}: golden call to '${hidden.tool}', which scenario ${scenario.name} does not make visible`,
    });

  let history: ImportedTask['history'] = [];
  if (t.history) {
    const [key, start, end] = t.history.split(':');
    const conversation = meta.history[key!];
    if (!conversation)
      return void problems.push({
        file,
        line: locate(['history']),
        field: 'history',
        message:
          `task ${uid}: no conversation '${key}' under $history in ` +
          `${meta.file ?? `${file.replace(/\.py$/, '.meta.yaml')} (no such file)`}`,
      });
    history = sliceHistory(conversation, start, end).map((m) => ({ role: m.role, content: m.content }));
  }

  return {
    uid,
    scenario: scenario.name,
    query: t.query,
    ...(t.user_context != null ? { user_context: t.user_context } : {}),
    limits: { max_user_turns: t.max_user_sim_turns ?? 10, max_agent_turns: t.max_agent_sim_turns ?? null },
    ...(t.bot_instructions != null ? { bot_instructions: t.bot_instructions } : {}),
    world_state: world,
    format_query: t.format_query ?? false,
    history,
    tags: [...(scenario.tags ?? []), ...(t.tags ?? [])],
    evaluation_only: evaluationOnly.has(uid),
    test: { file, function: fn.function, line: fn.line, params: fn.params, native: fn.native },
    golden: golden.calls,
  };
}
