import fs from 'node:fs';
import path from 'node:path';
import { z } from 'zod';
import { databaseUrl, readEnvironment } from '../../config/environment.ts';
import { scenarioSchema, taskFileSchema } from '../../config/task-schema.ts';
import { SandboxPool } from '../../sandbox/sandbox-pool.ts';
import { formatProblem, loadSuites, taskDomain } from '../../task-suites/task-suite-loader.ts';
import { thinkingboxResources } from '../../rollout/thinkingbox-resources.ts';
import { thinkingboxSettingsSchema } from '../../config/episode-config.ts';
import { validateImportedTask } from '../../datasets/thinkingbox/imported-task-validation.ts';
import { importThinkingboxDataset } from '../../datasets/thinkingbox/dataset-importer.ts';
import { datasetEnvironment, prepareDatasetEnvironment } from '../../datasets/thinkingbox/dataset-environment.ts';
import { loadImportedSuite } from '../../datasets/thinkingbox/imported-suite.ts';
import { isProjectName } from '../../datasets/thinkingbox/requirement-specs.ts';
import { BadInputError, InfrastructureError } from '../../core/errors.ts';
import { IMPORTED_SUITE_FILE } from '../../config/thinkingbox-schema.ts';
import {
  commandErrorExit,
  consoleIo,
  InputError,
  readUidListInput,
  UsageError,
  type CommandIo,
} from '../command-support.ts';
import {
  tasksCommand,
  tasksImportThinkingboxCommand,
  tasksPrepareEnvCommand,
  tasksSchemaCommand,
  tasksValidateCommand,
} from '../command-definitions.ts';
import { parseCommandLine } from '../command-line.ts';
import { validateTask, type TaskValidation } from '../../task-suites/task-validation.ts';
import { TerminalStateGrader } from '../../sandbox/terminal-state-grader.ts';
import { ensureControlDatabase } from '../../infra/control-database.ts';
import { integerFlag } from '../flag-values.ts';

async function mapLimit<T, R>(items: T[], limit: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const results: R[] = new Array(items.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(limit, items.length) }, async () => {
      while (next < items.length) {
        const i = next++;
        results[i] = await fn(items[i]!);
      }
    }),
  );
  return results;
}

export async function validate(args: string[]): Promise<number> {
  const { values, positionals } = parseCommandLine(tasksValidateCommand, args);
  const dir = positionals[0]!;
  const concurrency = integerFlag('--concurrency', values.concurrency, { min: 1, max: 64 });
  const { suites, problems } = loadSuites(dir);
  for (const p of problems) console.error(formatProblem(p));
  const env = readEnvironment();
  await ensureControlDatabase(env);
  const pool = new SandboxPool({
    controlUrl: databaseUrl(env),
    agentPassword: env.TBT_AGENT_DB_PASSWORD,
    readerPassword: env.TBT_READER_DB_PASSWORD,
    warm: 2,
  });
  const grader = new TerminalStateGrader(pool, databaseUrl(env));
  const results: TaskValidation[] = [];
  const thinkingbox = thinkingboxResources(
    thinkingboxSettingsSchema.parse({
      ...(values.warm !== undefined ? { warm_processes: Number(values.warm) } : {}),
      ...(values['start-timeout-ms'] !== undefined
        ? { server_start_timeout_ms: Number(values['start-timeout-ms']) }
        : {}),
      ...(values['server-start'] !== undefined ? { server_start: values['server-start'] } : {}),
    }),
  );
  const startedAt = Date.now();
  const total = suites.reduce((n, s) => n + s.tasks.length, 0);
  let done = 0;
  let lastProgress = startedAt;
  // A full bench takes most of an hour: say how far it is, at most every 30 s (stderr, so stdout stays the summary).
  const progress = <T extends TaskValidation>(r: T): T => {
    done += 1;
    if (Date.now() - lastProgress >= 30_000 || done === total) {
      lastProgress = Date.now();
      console.error(`validated ${done}/${total} tasks in ${((lastProgress - startedAt) / 1000).toFixed(0)} s`);
    }
    return r;
  };
  let imported = 0;
  try {
    for (const suite of suites) {
      const tasks: { file: string; line: number }[] = suite.tasks;
      const checked =
        suite.kind === 'native'
          ? await mapLimit(suite.tasks, concurrency, async (task) =>
              progress(await validateTask(pool, grader, suite.scenarios[task.scenario]!, task)),
            )
          : await mapLimit(suite.tasks, concurrency, async (task) =>
              progress(await validateImportedTask(thinkingbox, suite, task)),
            );
      if (suite.kind !== 'native') imported += checked.length;
      for (const [i, r] of checked.entries()) {
        const task = tasks[i]!;
        for (const p of r.problems)
          console.error(`${path.relative(process.cwd(), task.file)}:${task.line}: task ${r.uid}: ${p}`);
        for (const w of r.warnings ?? [])
          console.error(`warning: ${path.relative(process.cwd(), task.file)}:${task.line}: task ${r.uid}: ${w}`);
      }
      results.push(...checked);
    }
  } finally {
    await pool.close();
    await thinkingbox.servers.close();
  }
  const domains = new Set(suites.flatMap((s) => Object.keys(s.scenarios).map((name) => taskDomain(s, name))));
  const count = (f: (r: TaskValidation) => boolean) => results.filter(f).length;
  const changeTasks = results.filter((r) => !r.noChange && !r.noGolden);
  console.log(
    `no_change_tasks=${count((r) => r.noChange)} file_problems=${problems.length} ` +
      `task_problems=${count((r) => r.problems.length > 0)}`,
  );
  if (count((r) => r.noGolden === true))
    console.log(
      `no_golden_tasks=${count((r) => r.noGolden === true)} (no golden trajectory declared; their test code ran on ` +
        `a null agent without a system error: ${count((r) => r.noGolden === true && r.nullOk)})`,
    );
  if (imported)
    console.log(
      `imported_tasks=${imported} (no one-row mutation check: their state lives in the dataset's tool servers)`,
    );
  console.log(
    `tasks=${results.length} domains=${domains.size} golden_pass=${count((r) => r.goldenPass)} ` +
      `null_fail=${changeTasks.filter((r) => r.nullOk).length} mutation_fail=${count((r) => r.mutationFail)}`,
  );
  const starts = results.flatMap((r) => r.backendStartMs ?? []).sort((a, b) => a - b);
  if (starts.length) {
    const q = (p: number) => starts[Math.min(starts.length - 1, Math.floor(p * starts.length))]!;
    console.log(
      `wall_s=${((Date.now() - startedAt) / 1000).toFixed(0)} episodes=${starts.length} backend_start_ms ` +
        `p50=${q(0.5)} p95=${q(0.95)} (warm pool ${values.warm ?? 'default'}, concurrency ${values.concurrency})`,
    );
  }
  return problems.length === 0 && results.every((r) => r.problems.length === 0) && results.length > 0 ? 0 : 1;
}

function writeSchemas(args: string[]): number {
  const { values } = parseCommandLine(tasksSchemaCommand, args);
  fs.mkdirSync(values.out, { recursive: true });
  for (const [name, schema] of [
    ['scenario', scenarioSchema],
    ['task-file', taskFileSchema],
  ] as const) {
    const file = path.join(values.out, `${name}.schema.json`);
    fs.writeFileSync(file, `${JSON.stringify(z.toJSONSchema(schema, { io: 'input' }), null, 2)}\n`);
    console.log(file);
  }
  return 0;
}

/** Builds the Python environment of an imported suite's dataset (cached; a second run returns at once). */
export function prepareEnv(args: string[], io: CommandIo = consoleIo): number {
  try {
    const { positionals, values } = parseCommandLine(tasksPrepareEnvCommand, args);
    const allowSdist = values['allow-sdist'] ?? [];
    const badName = allowSdist.find((n) => !isProjectName(n));
    if (badName) throw new UsageError(`--allow-sdist ${badName}: not a project name (or ':all:')`);
    const { suite, problems } = loadImportedSuite(positionals[0]!);
    if (!suite) throw new InputError(problems.map(formatProblem).join('\n'));
    const started = Date.now();
    const env = prepareDatasetEnvironment(suite.imported.server_packages, (line) => io.out(line), {
      allowSdist,
      allowUrls: values['allow-urls'],
    });
    io.out(`dataset environment ready: ${env.venv} (${((Date.now() - started) / 1000).toFixed(1)} s)`);
    return 0;
  } catch (err) {
    // A bad requirement names its file and line; a failed install says why: both are the command's answer.
    if (err instanceof BadInputError || err instanceof InfrastructureError) {
      io.err(err.message);
      return 1;
    }
    return commandErrorExit(err, tasksPrepareEnvCommand, io);
  }
}

/** Writes the imported suite even when some files or tasks had problems (they are listed; exit 1). */
export function importThinkingbox(args: string[], io: CommandIo = consoleIo): number {
  try {
    const flags = parseCommandLine(tasksImportThinkingboxCommand, args).values;
    if (!fs.existsSync(flags.data) || !fs.statSync(flags.data).isDirectory())
      throw new InputError(`--data ${flags.data}: no such folder`);
    const evaluationOnly = new Set(flags['exclude-uids'] ? readUidListInput(flags['exclude-uids']).uids : []);
    const result = importThinkingboxDataset({
      dataDir: flags.data,
      listFile: flags.list,
      serversFile: flags.servers,
      agent: flags.agent,
      evaluationOnly,
      name: flags.name,
    });
    const out = path.resolve(flags.out ?? path.join(readEnvironment().TBT_STATE_DIR, 'imported', result.suite.name));
    fs.mkdirSync(out, { recursive: true });
    fs.writeFileSync(path.join(out, IMPORTED_SUITE_FILE), `${JSON.stringify(result.suite, null, 2)}\n`);
    for (const w of result.warnings) io.err(`warning: ${formatProblem(w)}`);
    for (const p of result.problems) io.err(formatProblem(p));
    const excluded = result.suite.tasks.filter((t) => t.evaluation_only).length;
    const unmatched = [...evaluationOnly].filter((u) => !result.suite.tasks.some((t) => t.uid === u)).length;
    io.out(
      `imported ${result.suite.tasks.length} of ${result.listed} listed tasks ` +
        `(${Object.keys(result.suite.scenarios).length} scenarios, servers: ` +
        `${Object.keys(result.suite.servers).join(', ') || 'none'}); evaluation-only ` +
        `${excluded}${unmatched ? ` (${unmatched} excluded uids not in the list)` : ''}; problems ` +
        `${result.problems.length}`,
    );
    io.out(`suite written to ${out}`);
    try {
      datasetEnvironment(result.suite.server_packages, out);
    } catch {
      io.out(`next: tbt tasks prepare-env ${out}   (builds the dataset's Python environment once)`);
    }
    return result.problems.length ? 1 : 0;
  } catch (err) {
    return commandErrorExit(err, tasksImportThinkingboxCommand, io);
  }
}

export async function tasks(args: string[]): Promise<number> {
  const [sub, ...rest] = args;
  if (sub === 'validate') return validate(rest);
  if (sub === 'import-thinkingbox') return importThinkingbox(rest);
  if (sub === 'schema') return writeSchemas(rest);
  if (sub === 'prepare-env') return prepareEnv(rest);
  return commandErrorExit(
    new UsageError(sub ? `unknown subcommand '${sub}'` : 'a subcommand is required'),
    tasksCommand,
    consoleIo,
  );
}
