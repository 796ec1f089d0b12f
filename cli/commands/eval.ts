import fs from 'node:fs';
import path from 'node:path';
import { z } from 'zod';
import { formatProblem, parseYamlFile } from '../../task-suites/task-suite-loader.ts';
import { priceTableSchema } from '../../config/price-table.ts';
import { canonicalJson } from '../../core/canonical-json.ts';
import { compareStrings, datasetGroup } from '../../core/difficulty.ts';
import {
  campaignCost,
  costFigures,
  COST_SCOPE_ORDER,
  COST_SCOPES,
  observedAllPass,
  pairedComparison,
  passAtK,
  passHatK,
  reportedKs,
  ROLES,
  summarize,
  summarizeByDomain,
  type Comparison,
  type CostBreakdown,
  type CostFigures,
  type CostScope,
  type PriceTable,
  type RoleUsage,
  type Summary,
  type TaskOutcome,
  type TokenUsage,
} from '../../core/metrics.ts';
import {
  consoleIo,
  InputError,
  jsonlRows,
  readInputFile,
  sha256,
  show,
  UsageError,
  writeFileAtomic,
  commandErrorExit,
  HelpRequest,
  readUidListInput,
  type CommandIo,
  type JsonlRow,
} from '../command-support.ts';
import { integerFlag } from '../flag-values.ts';
import { evalAggregateCommand, evalCommand, evalCompareCommand } from '../command-definitions.ts';
import { asksForHelp, parseCommandLine } from '../command-line.ts';
import { dollars, percent, plural } from '../../core/report/format.ts';
import { leftOutNote, withoutTaskErrorTasks } from '../../core/task-error-pairing.ts';

/**
 * `tbt eval`: metrics from result files (our episode records or ThinkingBox result lines), behind a
 * coverage gate: no score is printed or written unless every (task, repetition) key is present exactly
 * once and no row is an infrastructure error. A task with a key that ended in a task error (its own test code
 * raised the same exception twice) is counted apart: listed with the cause, left out of every score.
 */

const FORMAT_DEFAULTS = {
  episode: {
    uid: 'uid',
    repetition: 'repetition',
    success: 'success',
    systemError: ['infrastructure_error'],
    taskError: 'task_error',
    domain: 'domain',
    tokens: 'tokens',
  },
  thinkingbox: {
    uid: 'uid',
    // As the reference's validator: rows are keyed by uid and metadata.repetition.
    repetition: 'metadata.repetition',
    success: 'test_result.result',
    systemError: ['is_system_error', 'test_result.is_system_error'],
    // The reference has no task errors: its system errors are all re-run.
    taskError: '',
    domain: '',
    tokens: 'usage',
  },
} as const;

export async function evaluate(args: string[], io: CommandIo = consoleIo): Promise<number> {
  const [sub, ...rest] = args;
  try {
    switch (sub) {
      case 'aggregate':
        return aggregateCommand(rest, io);
      case 'compare':
        return compareCommand(rest, io);
      case 'run':
        return (await import('./campaign.ts')).runEvaluation(rest);
      case 'schedule':
        return (await import('./campaign.ts')).scheduleEvaluation(rest);
      default:
        if (asksForHelp(args)) throw new HelpRequest(evalCommand);
        throw new UsageError(sub ? `unknown subcommand '${sub}'` : 'a subcommand is required');
    }
  } catch (err) {
    const command = sub === 'aggregate' ? evalAggregateCommand : sub === 'compare' ? evalCompareCommand : evalCommand;
    return commandErrorExit(err, command, io);
  }
}

// ---------------------------------------------------------------------------------------------------
// aggregate

interface AggregateConfig {
  resultFiles: string[];
  format: keyof typeof FORMAT_DEFAULTS;
  uidField: string;
  repetitionField: string | null;
  successField: string;
  systemErrorFields: string[];
  /** Field that marks a task error (true); null when the format has none. */
  taskErrorField: string | null;
  domainField: string | null;
  tokensField: string;
  repeats: number;
  pricesFile: string | null;
  tasksFile: string | null;
  out: string;
  seed: number;
}

function parseAggregateArgs(args: string[]): AggregateConfig {
  const { values } = parseCommandLine(evalAggregateCommand, args);
  const format = values.format;
  if (format !== 'episode' && format !== 'thinkingbox')
    throw new UsageError(`--format: expected episode or thinkingbox, got '${format}'`);
  const defaults = FORMAT_DEFAULTS[format];
  const required = (flag: string, value: string | undefined, fallback: string): string => {
    const v = value ?? fallback;
    if (v.trim() === '') throw new UsageError(`${flag}: expected a dotted field path`);
    return v;
  };
  const systemErrorFields = values['system-error-field'] ?? [...defaults.systemError];
  if (systemErrorFields.some((f) => f.trim() === ''))
    throw new UsageError('--system-error-field: expected a dotted field path');
  return {
    resultFiles: values.results,
    format,
    uidField: required('--uid-field', values['uid-field'], defaults.uid),
    repetitionField: (values['repetition-field'] ?? defaults.repetition) || null,
    successField: required('--success-field', values['success-field'], defaults.success),
    systemErrorFields,
    taskErrorField: defaults.taskError || null,
    domainField: (values['domain-field'] ?? defaults.domain) || null,
    tokensField: required('--tokens-field', values['tokens-field'], defaults.tokens),
    repeats: integerFlag('--repeats', values.repeats, { min: 1 }),
    pricesFile: values.prices ?? null,
    tasksFile: values.tasks ?? null,
    out: values.out,
    seed: integerFlag('--seed', values.seed, { min: 0 }),
  };
}

interface ResultRow {
  file: string;
  line: number;
  uid: string;
  /** Canonical JSON of the repetition value, or the row's position among the uid's rows. */
  repetition: string;
  systemErrorField: string | null;
  /** The row's cause when it is a task error. */
  taskError: string | null;
  success: boolean | null;
  domain: string;
  tokens: RoleUsage | null;
}

const tokenCount = z.number().int().nonnegative();
const tokenUsageSchema = z
  .object({ input: tokenCount, output: tokenCount, cached_input: tokenCount.default(0) })
  .strict();
const roleUsageSchema = z
  .object({
    policy: tokenUsageSchema.optional(),
    user: tokenUsageSchema.optional(),
    judge: tokenUsageSchema.optional(),
  })
  .strict();
const openAiUsageSchema = z.object({
  input_tokens: tokenCount,
  output_tokens: tokenCount,
  input_tokens_details: z.object({ cached_tokens: tokenCount.default(0) }).nullish(),
});

function readTokens(r: JsonlRow, field: string): RoleUsage {
  const value = r.get(field);
  if (Array.isArray(value)) {
    const policy: TokenUsage = { input: 0, output: 0, cached_input: 0 };
    value.forEach((item, i) => {
      const parsed = openAiUsageSchema.safeParse(item);
      if (!parsed.success) {
        const issue = parsed.error.issues[0]!;
        throw r.fieldError([field, i, ...issue.path].join('.'), issue.message);
      }
      const cached = parsed.data.input_tokens_details?.cached_tokens ?? 0;
      if (cached > parsed.data.input_tokens)
        throw r.fieldError(`${field}.${i}`, `cached_tokens ${cached} exceed input_tokens ${parsed.data.input_tokens}`);
      policy.input += parsed.data.input_tokens - cached;
      policy.cached_input += cached;
      policy.output += parsed.data.output_tokens;
    });
    return { policy };
  }
  const parsed = roleUsageSchema.safeParse(value);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw r.fieldError([field, ...issue.path].join('.'), `${issue.message} (got ${show(value)})`);
  }
  return parsed.data;
}

function readResultRows(file: string, text: string, config: AggregateConfig, withTokens: boolean): ResultRow[] {
  const ordinal = new Map<string, number>();
  return jsonlRows(file, text).map((r) => {
    const uid = r.getUid(config.uidField);
    let repetition: string;
    if (config.repetitionField) {
      const value = r.get(config.repetitionField);
      if (!(typeof value === 'string' && value !== '') && !(typeof value === 'number' && Number.isInteger(value))) {
        throw r.fieldError(config.repetitionField, `expected an integer or a non-empty string, got ${show(value)}`);
      }
      repetition = canonicalJson(value);
    } else {
      const k = ordinal.get(uid) ?? 0;
      ordinal.set(uid, k + 1);
      repetition = `#${k}`;
    }
    let systemErrorField: string | null = null;
    for (const field of config.systemErrorFields) {
      if (r.getBoolean(field)) {
        systemErrorField = field;
        break;
      }
    }
    // Optional: result lines written before task errors existed have no such field.
    const taskError =
      !systemErrorField && config.taskErrorField && r.row[config.taskErrorField] === true
        ? String(r.row.cause ?? 'task error')
        : null;
    let domain = datasetGroup(uid);
    if (config.domainField) {
      const value = r.get(config.domainField);
      if (typeof value !== 'string' || value === '')
        throw r.fieldError(config.domainField, `expected a non-empty string, got ${show(value)}`);
      domain = value;
    }
    return {
      file,
      line: r.line,
      uid,
      repetition,
      systemErrorField,
      taskError,
      success: systemErrorField || taskError ? null : r.getBoolean(config.successField),
      domain,
      tokens: withTokens && !systemErrorField ? readTokens(r, config.tokensField) : null,
    };
  });
}

/** Problems that keep any score from being reported; each names file and line. */
export function coverageProblems(
  rows: readonly ResultRow[],
  repeats: number,
  expectedUids: readonly string[] | null,
): string[] {
  const problems: string[] = [];
  const at = (r: ResultRow) => `${r.file}:${r.line}`;
  const rep = (r: ResultRow) =>
    r.repetition.startsWith('#') ? `attempt ${Number(r.repetition.slice(1)) + 1}` : `repetition ${r.repetition}`;
  const byKey = new Map<string, ResultRow>();
  const byUid = new Map<string, ResultRow[]>();
  for (const r of rows) {
    if (r.systemErrorField)
      problems.push(
        `${at(r)}: uid ${r.uid} ${rep(r)}: infrastructure error (field ${r.systemErrorField} is true); re-run this key`,
      );
    const key = `${r.uid}\0${r.repetition}`;
    const first = byKey.get(key);
    if (first) problems.push(`${at(r)}: uid ${r.uid} ${rep(r)}: duplicate key, first seen at ${at(first)}`);
    else byKey.set(key, r);
    let list = byUid.get(r.uid);
    if (!list) byUid.set(r.uid, (list = []));
    list.push(r);
  }
  for (const uid of [...byUid.keys()].sort(compareStrings)) {
    const list = byUid.get(uid)!;
    const distinct = new Set(list.map((r) => r.repetition)).size;
    if (distinct !== repeats) {
      const where = list.slice(0, 4).map(at).join(', ') + (list.length > 4 ? ', ...' : '');
      problems.push(`${where}: uid ${uid}: ${distinct} distinct repetitions, expected --repeats ${repeats}`);
    }
    const domains = new Set(list.map((r) => r.domain));
    if (domains.size > 1)
      problems.push(
        `${at(list[0]!)}: uid ${uid}: rows disagree on the domain (${[...domains].sort(compareStrings).join(', ')})`,
      );
  }
  if (expectedUids) {
    const expected = new Set(expectedUids);
    for (const uid of [...expected].sort(compareStrings))
      if (!byUid.has(uid)) problems.push(`uid ${uid}: no results (expected ${repeats} repetitions)`);
    for (const uid of [...byUid.keys()].sort(compareStrings)) {
      if (!expected.has(uid)) problems.push(`${at(byUid.get(uid)![0]!)}: uid ${uid}: not in the task list`);
    }
  }
  return problems;
}

function loadPrices(file: string): PriceTable {
  const parsed = parseYamlFile(file, priceTableSchema);
  if (!parsed.value) throw new InputError(parsed.problems.map(formatProblem).join('\n'));
  return parsed.value;
}

interface TaskResult extends TaskOutcome {
  pass_at_k: Record<string, number>;
  pass_hat_k: Record<string, number>;
  cost: number | null;
}

/** The divisors once, then the figures of each scope (core/metrics.ts COST_SCOPES) over them. */
type CostReport = {
  by_role: CostBreakdown['by_role'];
  passing_attempts: number;
  reliable_tasks: number;
} & Record<CostScope, CostFigures>;

function costReport(
  rows: readonly ResultRow[],
  tasks: readonly TaskOutcome[],
  repeats: number,
  prices: PriceTable,
): CostReport {
  const breakdown = campaignCost(
    rows.map((r) => r.tokens ?? {}),
    prices,
  );
  const passing = rows.filter((r) => r.success === true).length;
  const reliable = observedAllPass(tasks, repeats);
  return {
    by_role: breakdown.by_role,
    passing_attempts: passing,
    reliable_tasks: reliable,
    ...costFigures(breakdown, passing, reliable),
  };
}

type AggregateCost = CostReport & { domains: Record<string, CostReport> };

interface AggregateInputs {
  expected: string[] | null;
  tasksInput: { path: string; sha256: string } | null;
  rows: ResultRow[];
  inputs: { path: string; sha256: string; rows: number }[];
}

/** Reads the task list and every result file, with the hashes the aggregate file records. */
function readAggregateInputs(config: AggregateConfig, withTokens: boolean): AggregateInputs {
  let expected: string[] | null = null;
  let tasksInput: { path: string; sha256: string } | null = null;
  if (config.tasksFile) ({ uids: expected, input: tasksInput } = readUidListInput(config.tasksFile));
  const rows: ResultRow[] = [];
  const inputs: { path: string; sha256: string; rows: number }[] = [];
  for (const file of config.resultFiles) {
    const bytes = readInputFile(file);
    const fileRows = readResultRows(file, bytes.toString('utf8'), config, withTokens);
    rows.push(...fileRows);
    inputs.push({ path: file, sha256: sha256(bytes), rows: fileRows.length });
  }
  if (rows.length === 0) throw new InputError(`${config.resultFiles.join(', ')}: no result rows`);
  return { expected, tasksInput, rows, inputs };
}

/** The coverage gate: throws, listing the first 50 problems, unless every key is present exactly once. */
function requireCoverage(rows: readonly ResultRow[], repeats: number, expected: string[] | null): void {
  const problems = coverageProblems(rows, repeats, expected);
  if (problems.length > 0) {
    const shown = problems.slice(0, 50);
    throw new InputError(
      [
        `coverage gate failed: ${problems.length} problem(s); no scores are reported until every (task, repetition) ` +
          `key is present exactly once without infrastructure errors`,
        ...shown,
        ...(problems.length > shown.length ? [`... and ${problems.length - shown.length} more`] : []),
      ].join('\n'),
    );
  }
}

/** One outcome per uid (attempts and successes), sorted by uid. */
function taskOutcomes(rows: readonly ResultRow[]): TaskOutcome[] {
  const byUid = new Map<string, TaskOutcome>();
  for (const r of rows) {
    let t = byUid.get(r.uid);
    if (!t) byUid.set(r.uid, (t = { uid: r.uid, domain: r.domain, n: 0, c: 0 }));
    t.n += 1;
    if (r.success) t.c += 1;
  }
  return [...byUid.values()].sort((a, b) => compareStrings(a.uid, b.uid));
}

/** Campaign cost overall and per domain, and the serving cost of each task. */
function aggregateCost(
  rows: readonly ResultRow[],
  outcomes: readonly TaskOutcome[],
  domains: readonly string[],
  repeats: number,
  prices: PriceTable,
): { cost: AggregateCost; taskCost: Map<string, number> } {
  const domainCosts: Record<string, CostReport> = {};
  for (const domain of domains) {
    domainCosts[domain] = costReport(
      rows.filter((r) => r.domain === domain),
      outcomes.filter((t) => t.domain === domain),
      repeats,
      prices,
    );
  }
  const cost = { ...costReport(rows, outcomes, repeats, prices), domains: domainCosts };
  const usageByUid = new Map<string, RoleUsage[]>();
  for (const r of rows) {
    let list = usageByUid.get(r.uid);
    if (!list) usageByUid.set(r.uid, (list = []));
    list.push(r.tokens ?? {});
  }
  const taskCost = new Map<string, number>();
  for (const t of outcomes) taskCost.set(t.uid, campaignCost(usageByUid.get(t.uid) ?? [], prices).total);
  return { cost, taskCost };
}

/** Tasks with task errors (each key's cause), and the rows of every other task: the ones scored. */
function setAsideTaskErrors(all: readonly ResultRow[]): { rows: ResultRow[]; taskErrors: TaskErrorReport } {
  const byUid = new Map<string, { uid: string; keys: number; cause: string }>();
  for (const r of all) {
    if (r.taskError === null) continue;
    const t = byUid.get(r.uid);
    if (t) t.keys += 1;
    else byUid.set(r.uid, { uid: r.uid, keys: 1, cause: r.taskError });
  }
  const tasks = [...byUid.values()].sort((a, b) => compareStrings(a.uid, b.uid));
  const keys = tasks.reduce((n, t) => n + t.keys, 0);
  const rows = all.filter((r) => !byUid.has(r.uid));
  if (rows.length === 0 && tasks.length > 0)
    throw new InputError(
      `every task has a key that ended in a task error (its test code raised); nothing to score:\n` +
        tasks.map((t) => `${t.uid}: ${t.cause}`).join('\n'),
    );
  return { rows, taskErrors: { keys, tasks } };
}

interface TaskErrorReport {
  keys: number;
  tasks: { uid: string; keys: number; cause: string }[];
}

function aggregateCommand(args: string[], io: CommandIo): number {
  const config = parseAggregateArgs(args);
  const prices = config.pricesFile ? loadPrices(config.pricesFile) : null;
  const { expected, tasksInput, rows: allRows, inputs } = readAggregateInputs(config, prices !== null);
  requireCoverage(allRows, config.repeats, expected);
  const { rows, taskErrors } = setAsideTaskErrors(allRows);

  const outcomes = taskOutcomes(rows);
  const ks = reportedKs(config.repeats);
  const options = { ks, seed: config.seed };
  const overall = summarize(outcomes, options);
  const domains = summarizeByDomain(outcomes, options);

  let cost: AggregateCost | null = null;
  let taskCost = new Map<string, number>();
  if (prices) ({ cost, taskCost } = aggregateCost(rows, outcomes, Object.keys(domains), config.repeats, prices));
  const tasks: TaskResult[] = outcomes.map((t) => ({
    ...t,
    pass_at_k: Object.fromEntries(ks.map((k) => [String(k), passAtK(t.n, t.c, k)])),
    pass_hat_k: Object.fromEntries(ks.map((k) => [String(k), passHatK(t.n, t.c, k)])),
    cost: prices ? taskCost.get(t.uid)! : null,
  }));

  const report = {
    // 2: cost figures per scope (cost.policy_only, cost.all_roles); 1 held the all-roles figures at cost's top.
    schema_version: 2,
    kind: 'tbt-eval-aggregate',
    repeats: config.repeats,
    configuration: {
      format: config.format,
      uid_field: config.uidField,
      repetition_field: config.repetitionField,
      success_field: config.successField,
      system_error_fields: config.systemErrorFields,
      domain_field: config.domainField,
      tokens_field: prices ? config.tokensField : null,
      prices,
      seed: config.seed,
    },
    inputs: {
      results: inputs,
      tasks: tasksInput,
      prices: config.pricesFile ? { path: config.pricesFile, sha256: sha256(readInputFile(config.pricesFile)) } : null,
    },
    coverage: {
      tasks: outcomes.length,
      attempts: rows.length,
      complete: true,
      task_error_tasks: taskErrors.tasks.length,
      task_error_keys: taskErrors.keys,
    },
    task_errors: taskErrors.tasks,
    overall,
    domains,
    cost,
    tasks,
  };
  const outDir = path.dirname(config.out);
  fs.mkdirSync(outDir, { recursive: true });
  writeFileAtomic(config.out, `${JSON.stringify(JSON.parse(canonicalJson(report)), null, 2)}\n`);
  io.out(renderAggregate(config.repeats, overall, domains, cost, taskErrors));
  io.out(`\nwrote ${config.out}`);
  return 0;
}

// ---------------------------------------------------------------------------------------------------
// Readable output

function interval([lo, hi]: [number, number]): string {
  return `[${(100 * lo).toFixed(1)}, ${(100 * hi).toFixed(1)}]`;
}

function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) =>
    cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ');
  return [line(header), line(widths.map((w) => '-'.repeat(w))), ...rows.map(line)].join('\n');
}

function renderAggregate(
  repeats: number,
  overall: Summary,
  domains: Record<string, Summary>,
  cost: (CostReport & { domains: Record<string, CostReport> }) | null,
  taskErrors: TaskErrorReport,
): string {
  const k = repeats;
  const header = [
    'domain',
    'tasks',
    'attempts',
    'pass@1',
    '95% CI (tasks)',
    `pass@${k}`,
    `pass^${k}`,
    `observed ${k}/${k}`,
    'solved >= 1',
  ];
  for (const scope of cost ? COST_SCOPE_ORDER : [])
    header.push(`cost, ${COST_SCOPES[scope].label}`, 'per success', 'per reliable');
  const row = (name: string, s: Summary, c: CostReport | undefined): string[] => {
    const atK = s.pass_at_k.find((x) => x.k === k)?.estimate ?? Number.NaN;
    const hatK = s.pass_hat_k.find((x) => x.k === k)?.estimate ?? Number.NaN;
    const cells = [
      name,
      String(s.tasks),
      String(s.attempts),
      percent(s.pass_at_1.estimate),
      interval(s.pass_at_1.bootstrap_tasks),
      percent(atK),
      percent(hatK),
      `${s.observed_all_pass.count} (${percent(s.observed_all_pass.rate)})`,
      `${s.solved_at_least_once.count} (${percent(s.solved_at_least_once.rate)})`,
    ];
    if (c)
      for (const scope of COST_SCOPE_ORDER)
        cells.push(
          dollars(c[scope].campaign),
          dollars(c[scope].per_successful_attempt),
          dollars(c[scope].per_reliable_task),
        );
    return cells;
  };
  const rows = Object.entries(domains).map(([name, s]) => row(name, s, cost?.domains[name]));
  rows.push(row('all', overall, cost ?? undefined));
  const lines = [
    `coverage: ${overall.tasks} tasks x ${repeats} repetitions = ${overall.attempts} attempts, every key present ` +
      `once, no infrastructure errors`,
    ...(taskErrors.tasks.length
      ? [
          `task errors: ${plural(taskErrors.tasks.length, 'task')} (${plural(taskErrors.keys, 'key')}) left out of ` +
            `every score, their test code raised the same exception twice:`,
          ...taskErrors.tasks.map((t) => `  ${t.uid} (${plural(t.keys, 'key')}): ${t.cause}`),
        ]
      : []),
    '',
    table(header, rows),
    '',
    `pass^k is the unbiased C(c,k)/C(n,k), not (c/n)^k; observed ${k}/${k} counts tasks that passed all ${k} attempts.`,
    `other k: ${overall.pass_at_k.map((x) => `pass@${x.k} ${percent(x.estimate)}`).join(', ')}; ` +
      `${overall.pass_hat_k.map((x) => `pass^${x.k} ${percent(x.estimate)}`).join(', ')}`,
  ];
  if (cost) {
    lines.push(
      '',
      `cost, divided by ${plural(cost.passing_attempts, 'passing attempt')} and ` +
        `${plural(cost.reliable_tasks, 'task')} at ${k}/${k}:`,
      ...COST_SCOPE_ORDER.map((scope) => {
        const f = cost[scope];
        return (
          `  ${COST_SCOPES[scope].label} (${COST_SCOPES[scope].counts}): campaign ${dollars(f.campaign)}; per ` +
          `successful attempt ${dollars(f.per_successful_attempt)}; per reliable task ${dollars(f.per_reliable_task)}`
        );
      }),
      'cost by role:',
      ...ROLES.map((r) => {
        const t = cost.by_role[r].tokens;
        return (
          `  ${r.padEnd(6)} ${dollars(cost.by_role[r].cost).padStart(10)}  ` +
          `input ${t.input}, cached input ${t.cached_input}, output ${t.output} tokens`
        );
      }),
    );
  }
  return lines.join('\n');
}

// ---------------------------------------------------------------------------------------------------
// compare

const aggregateFileSchema = z.object({
  kind: z.literal('tbt-eval-aggregate'),
  tasks: z
    .array(
      z.object({ uid: z.string().min(1), domain: z.string(), n: z.number().int().min(1), c: z.number().int().min(0) }),
    )
    .min(1),
  task_errors: z.array(z.object({ uid: z.string() })).optional(),
});

function readAggregateFile(file: string): { tasks: TaskOutcome[]; task_errors?: { uid: string }[] } {
  const text = readInputFile(file).toString('utf8');
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    throw new InputError(`${file}: invalid JSON: ${(err as Error).message}`);
  }
  const parsed = aggregateFileSchema.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw new InputError(
      `${file}: field ${issue.path.join('.') || '(root)'}: ${issue.message} (expected the output of 'tbt eval ` +
        `aggregate --out')`,
    );
  }
  const tasks = parsed.data.tasks.map(({ uid, domain, n, c }) => ({ uid, domain, n, c }));
  return { tasks, task_errors: parsed.data.task_errors };
}

function compareCommand(args: string[], io: CommandIo): number {
  const parsed = parseCommandLine(evalCompareCommand, args);
  const [fileA, fileB] = parsed.positionals as [string, string];
  const resamples = integerFlag('--resamples', parsed.values.resamples, { min: 1 });
  const seed = integerFlag('--seed', parsed.values.seed, { min: 0 });
  let comparison: Comparison;
  const paired = withoutTaskErrorTasks(readAggregateFile(fileA), readAggregateFile(fileB));
  if (paired.leftOut.length) io.out(leftOutNote(paired.leftOut));
  try {
    comparison = pairedComparison(paired.a, paired.b, { resamples, seed });
  } catch (err) {
    if (err instanceof RangeError) throw new InputError(`${fileA} vs ${fileB}: ${err.message}`);
    throw err;
  }
  if (parsed.values.out) {
    fs.mkdirSync(path.dirname(parsed.values.out), { recursive: true });
    const record = { schema_version: 1, kind: 'tbt-eval-compare', a: fileA, b: fileB, ...comparison };
    writeFileAtomic(parsed.values.out, `${JSON.stringify(JSON.parse(canonicalJson(record)), null, 2)}\n`);
  }
  const points = (x: number) => `${x >= 0 ? '+' : ''}${(100 * x).toFixed(2)} pts`;
  const ci = ([lo, hi]: [number, number]) => `[${points(lo)}, ${points(hi)}]`;
  const rows = [
    [
      'pass@1',
      percent(comparison.pass_at_1.a),
      percent(comparison.pass_at_1.b),
      points(comparison.pass_at_1.difference),
      ci(comparison.pass_at_1.interval),
    ],
    [
      'all attempts pass',
      percent(comparison.all_pass_rate.a),
      percent(comparison.all_pass_rate.b),
      points(comparison.all_pass_rate.difference),
      ci(comparison.all_pass_rate.interval),
    ],
    ...Object.entries(comparison.domains).map(([d, x]) => [
      `pass@1 ${d} (${x.tasks})`,
      percent(x.pass_at_1.a),
      percent(x.pass_at_1.b),
      points(x.pass_at_1.difference),
      ci(x.pass_at_1.interval),
    ]),
  ];
  io.out(
    [
      `paired comparison over ${comparison.tasks} tasks: A = ${fileA}, B = ${fileB}`,
      `B better on ${comparison.b_better} tasks, worse on ${comparison.b_worse}, equal on ${comparison.equal}`,
      '',
      table(
        [
          'metric',
          'A',
          'B',
          'B - A',
          `${Math.round(comparison.level * 100)}% paired bootstrap (${comparison.resamples}, seed ${comparison.seed})`,
        ],
        rows,
      ),
    ].join('\n') + (parsed.values.out ? `\n\nwrote ${parsed.values.out}` : ''),
  );
  return 0;
}
