import type { z } from 'zod';
import {
  historyMessageSchema,
  testCaseYamlSchema,
  type ImportedScenario,
  type ImportedTask,
  type ServerSpec,
} from '../../config/thinkingbox-schema.ts';
import { parseYamlText, validateParsed, type TaskFileProblem } from '../../config/yaml-file.ts';
import { goldenCallsOf, mergeWorldState } from '../../core/world-state-merge.ts';
import type { ParsedDefaults, ParsedTestFunction, ParsedYaml } from './test-file-parser.ts';
import { parseHistoryRef, sliceHistory, type TestMeta } from './test-meta-file.ts';

/**
 * One test function of a ThinkingBox test file converted into an imported task: its `!` YAML over the module's
 * defaults, validated, with the scenario's world_state merged with its `init`, the golden calls found there and
 * the earlier turns its `history` names. Every problem names the file, the line and the field it comes from;
 * a task with a problem is left out.
 */

export interface TaskImport {
  uid: string;
  file: string;
  fn: ParsedTestFunction;
  /** The module `!` strings before the function, in file order: each updates the defaults key by key. */
  defaults: ParsedDefaults[];
  meta: TestMeta;
  scenarios: Record<string, ImportedScenario>;
  servers: Record<string, ServerSpec>;
  evaluationOnly: Set<string>;
  problems: TaskFileProblem[];
  warnings: TaskFileProblem[];
}

type TaskYaml = z.infer<typeof testCaseYamlSchema>;
/** The line a field path of the task's YAML is at, in the test file. */
type Locate = (p: PropertyKey[]) => number;

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

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

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

type Located = ReturnType<typeof yamlOf>;

/** The module defaults in force for a function: each `!` string updates the keys of those before it. */
function moduleDefaults(
  input: TaskImport,
): { fields: Record<string, unknown>; from: Map<string, Located> } | undefined {
  const { file, defaults, problems } = input;
  const fields: Record<string, unknown> = {};
  const from = new Map<string, Located>();
  for (const d of defaults) {
    const read = yamlOf(d.yaml, d.line, d, file);
    if (read.problems.length) return void problems.push(...read.problems);
    if (read.value == null) continue;
    if (!isObject(read.value))
      return void problems.push({
        file,
        line: d.line,
        field: '',
        message: `the module '!' YAML defaults must be a mapping`,
      });
    for (const [key, value] of Object.entries(read.value)) {
      fields[key] = value;
      from.set(key, read);
    }
  }
  return { fields, from };
}

/** The task's fields: the function's YAML over the module defaults, validated; unknown fields are warnings. */
function taskFields(input: TaskImport): { t: TaskYaml; locate: Locate } | undefined {
  const { uid, file, fn, problems, warnings } = input;
  const own = yamlOf(fn.yaml, fn.yaml_line, fn, file);
  if (own.problems.length) return void problems.push(...own.problems);
  const base = moduleDefaults(input);
  if (!base) return undefined;
  if (!isObject(own.value))
    return void problems.push({
      file,
      line: fn.yaml_line,
      field: '',
      message: `task ${uid}: the '!' YAML must be a mapping`,
    });
  // Task fields replace the module defaults; a field is located in whichever YAML it came from.
  const ownFields = own.value;
  const baseFields = base.fields;
  const merged: Record<string, unknown> = { ...baseFields, ...ownFields };
  // Tags concatenate (module tags first); every other key of the function replaces the module's.
  if (Array.isArray(baseFields.tags) && Array.isArray(ownFields.tags))
    merged.tags = [...baseFields.tags, ...ownFields.tags];
  const locate: Locate = (p) => {
    const source = p.length && typeof p[0] === 'string' && !(p[0] in ownFields) ? base.from.get(p[0]) : undefined;
    return (source ?? own).lineOf(p);
  };
  const checked = validateParsed(merged, testCaseYamlSchema, file, locate);
  problems.push(...checked.problems.map((p) => ({ ...p, message: `task ${uid}: ${p.message}` })));
  if (!checked.value) return undefined;
  for (const key of Object.keys(merged).filter((k) => !KNOWN_TASK_FIELDS.has(k)))
    warnings.push({
      file,
      line: locate([key]),
      field: key,
      message: `task ${uid}: unknown field kept out of the import`,
    });
  return { t: checked.value, locate };
}

/** The scenario's world_state merged with the task's `init`, and the golden calls found there. */
function worldState(input: TaskImport, t: TaskYaml, scenario: ImportedScenario, locate: Locate) {
  const { uid, file, servers, problems } = input;
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
  return { world, golden: golden.calls };
}

/**
 * The earlier turns `history: key:start:end` names in the meta file, typed; a call without an id gets one (the
 * reference makes a random one), so that its response can follow it in the conversation the agent sees.
 */
function taskHistory(input: TaskImport, spec: string, locate: Locate): ImportedTask['history'] | undefined {
  const { uid, file, meta, problems } = input;
  const at = { file, line: locate(['history']), field: 'history' };
  const metaFile = meta.file ?? `${file.replace(/\.py$/, '.meta.yaml')} (no such file)`;
  let ref: ReturnType<typeof parseHistoryRef>;
  try {
    ref = parseHistoryRef(spec);
  } catch (err) {
    return void problems.push({ ...at, message: `task ${uid}: ${(err as Error).message}` });
  }
  const conversation = meta.history[ref.key];
  if (!conversation)
    return void problems.push({
      ...at,
      message: `task ${uid}: no conversation '${ref.key}' under $history in ${metaFile}`,
    });
  let slice: typeof conversation;
  try {
    slice = sliceHistory(conversation, ref.start, ref.end);
  } catch (err) {
    return void problems.push({
      ...at,
      message: `task ${uid}: history '${spec}' in ${metaFile}: ${(err as Error).message}`,
    });
  }
  const history: ImportedTask['history'] = [];
  for (const [i, raw] of slice.entries()) {
    const checked = historyMessageSchema.safeParse(raw.value);
    if (!checked.success) {
      const issue = checked.error.issues[0]!;
      return void problems.push({
        file: meta.file!,
        line: raw.line,
        field: `$history.${ref.key}`,
        message: `task ${uid}: ${issue.path.join('.') || 'message'}: ${issue.message}`,
      });
    }
    const m = checked.data;
    const id = (j: number | string) => `call_${ref.key.replace(/[^A-Za-z0-9_-]/g, '_')}_${i}_${j}`;
    if (m.T === 'ToolCall') history.push({ ...m, id: m.id ?? id(0) });
    else if (m.T === 'ParallelToolCall')
      history.push({ ...m, tool_calls: m.tool_calls.map((c, j) => ({ ...c, id: c.id ?? id(j) })) });
    else history.push(m);
  }
  return history;
}

export function importTask(input: TaskImport): ImportedTask | undefined {
  const { uid, file, fn, scenarios, evaluationOnly, problems } = input;
  const fields = taskFields(input);
  if (!fields) return undefined;
  const { t, locate } = fields;
  const scenario = scenarios[t.scenario];
  if (!scenario)
    return void problems.push({
      file,
      line: locate(['scenario']),
      field: 'scenario',
      message: `task ${uid}: unknown scenario '${t.scenario}' (known: ${Object.keys(scenarios).join(', ') || 'none'})`,
    });
  const state = worldState(input, t, scenario, locate);
  if (!state) return undefined;
  const history = t.history ? taskHistory(input, t.history, locate) : [];
  if (!history) return undefined;

  return {
    uid,
    scenario: scenario.name,
    query: t.query,
    ...(t.user_context != null ? { user_context: t.user_context } : {}),
    limits: { max_user_turns: t.max_user_sim_turns ?? 10, max_agent_turns: t.max_agent_sim_turns ?? null },
    ...(t.bot_instructions != null ? { bot_instructions: t.bot_instructions } : {}),
    world_state: state.world,
    format_query: t.format_query ?? false,
    history,
    tags: [...(scenario.tags ?? []), ...(t.tags ?? [])],
    evaluation_only: evaluationOnly.has(uid),
    test: { file, function: fn.function, line: fn.line, params: fn.params, native: fn.native },
    golden: state.golden,
  };
}
