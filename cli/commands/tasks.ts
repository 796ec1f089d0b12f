import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { z } from 'zod';
import { databaseUrl, readEnvironment } from '../../config/environment.ts';
import { scenarioSchema, taskFileSchema } from '../../config/task-schema.ts';
import { SandboxPool } from '../../activities/sandbox-pool.ts';
import { formatProblem, loadSuites } from '../../activities/task-suite-loader.ts';
import { validateTask, type TaskValidation } from '../../activities/task-validation.ts';
import { TerminalStateGrader } from '../../activities/terminal-state-grader.ts';
import { ensureControlDatabase } from '../../infra/control-database.ts';

const USAGE = `usage:
  tbt tasks validate <dir> [--concurrency N]   check suites: schema, golden replay, null agent, one-row mutation
  tbt tasks schema --out <dir>                 write JSON Schema files for editors`;

async function mapLimit<T, R>(items: T[], limit: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const results: R[] = new Array(items.length);
  let next = 0;
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, async () => {
    while (next < items.length) {
      const i = next++;
      results[i] = await fn(items[i]!);
    }
  }));
  return results;
}

export async function validate(args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({ args, allowPositionals: true, options: { concurrency: { type: 'string', default: '4' } } });
  const dir = positionals[0];
  if (!dir) {
    console.error(USAGE);
    return 2;
  }
  const { suites, problems } = loadSuites(dir);
  for (const p of problems) console.error(formatProblem(p));
  const env = readEnvironment();
  await ensureControlDatabase(env);
  const pool = new SandboxPool({ controlUrl: databaseUrl(env), agentPassword: env.TBT_AGENT_DB_PASSWORD, readerPassword: env.TBT_READER_DB_PASSWORD, warm: 2 });
  const grader = new TerminalStateGrader(pool, databaseUrl(env));
  const results: TaskValidation[] = [];
  try {
    for (const suite of suites) {
      const checked = await mapLimit(suite.tasks, Number(values.concurrency), (task) => validateTask(pool, grader, suite.scenarios[task.scenario]!, task));
      for (const [i, r] of checked.entries()) {
        const task = suite.tasks[i]!;
        for (const p of r.problems) console.error(`${path.relative(process.cwd(), task.file)}:${task.line}: task ${r.uid}: ${p}`);
      }
      results.push(...checked);
    }
  } finally {
    await pool.close();
  }
  const domains = new Set(suites.flatMap((s) => Object.values(s.scenarios).map((sc) => sc.domain ?? sc.name)));
  const count = (f: (r: TaskValidation) => boolean) => results.filter(f).length;
  const changeTasks = results.filter((r) => !r.noChange);
  console.log(`no_change_tasks=${count((r) => r.noChange)} file_problems=${problems.length} task_problems=${count((r) => r.problems.length > 0)}`);
  console.log(`tasks=${results.length} domains=${domains.size} golden_pass=${count((r) => r.goldenPass)} null_fail=${changeTasks.filter((r) => r.nullOk).length} mutation_fail=${count((r) => r.mutationFail)}`);
  return problems.length === 0 && results.every((r) => r.problems.length === 0) && results.length > 0 ? 0 : 1;
}

function writeSchemas(args: string[]): number {
  const { values } = parseArgs({ args, options: { out: { type: 'string' } } });
  if (!values.out) {
    console.error(USAGE);
    return 2;
  }
  fs.mkdirSync(values.out, { recursive: true });
  for (const [name, schema] of [['scenario', scenarioSchema], ['task-file', taskFileSchema]] as const) {
    const file = path.join(values.out, `${name}.schema.json`);
    fs.writeFileSync(file, `${JSON.stringify(z.toJSONSchema(schema, { io: 'input' }), null, 2)}\n`);
    console.log(file);
  }
  return 0;
}

export async function tasks(args: string[]): Promise<number> {
  const [sub, ...rest] = args;
  if (sub === 'validate') return validate(rest);
  if (sub === 'schema') return writeSchemas(rest);
  console.error(USAGE);
  return 2;
}
