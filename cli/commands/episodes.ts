import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { databaseUrl, readEnvironment } from '../../config/environment.ts';
import { episodeConfigSchema, type EpisodeConfig } from '../../config/episode-config.ts';
import {
  episodeDependencies,
  episodeEnvironment,
  episodeRunOptions,
  type EpisodeBackends,
} from '../../rollout/episode-setup.ts';
import { resultLine } from '../../rollout/episode-result-line.ts';
import { playEpisode } from '../../rollout/episode-runner.ts';
import { findTask } from '../../rollout/task-lookup.ts';
import { thinkingboxResourcesFactory } from '../../rollout/thinkingbox-resources.ts';
import { SandboxPool } from '../../sandbox/sandbox-pool.ts';
import { TerminalStateGrader } from '../../sandbox/terminal-state-grader.ts';
import { formatProblem, loadSuites, taskDomain, type AnySuite } from '../../task-suites/task-suite-loader.ts';
import { ensureControlDatabase } from '../../infra/control-database.ts';
import { startPolicyServer, type PolicyServerHandle } from '../../infra/embedded-policy-server.ts';
import { integerFlag, numberFlag } from '../flag-values.ts';
import { commandErrorExit, consoleIo, UsageError } from '../command-support.ts';
import { episodesCommand, episodesRunCommand } from '../command-definitions.ts';
import { parseCommandLine } from '../command-line.ts';

async function mapLimit<T>(items: T[], limit: number, fn: (item: T, i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(limit, items.length) }, async () => {
      while (next < items.length) {
        const i = next++;
        await fn(items[i]!, i);
      }
    }),
  );
}

function isHttpUrl(text: string): boolean {
  try {
    return /^https?:$/.test(new URL(text).protocol);
  } catch {
    return false;
  }
}

/** The flags of `tbt episodes run` (the words after `run`), checked. */
function runFlags(args: string[]) {
  const { values } = parseCommandLine(episodesRunCommand, args);
  const repeats = integerFlag('--repeats', values.repeats, { min: 1, max: 10_000 });
  const concurrency = integerFlag('--concurrency', values.concurrency, { min: 1, max: 64 });
  const temperature = numberFlag('--temperature', values.temperature, { min: 0, max: 10 });
  const maxTokensPerTurn = integerFlag('--max-tokens-per-turn', values['max-tokens-per-turn'], {
    min: 1,
    max: 1_000_000,
  });
  const maxAgentTurns = integerFlag('--max-agent-turns', values['max-agent-turns'], { min: 1, max: 10_000 });
  if (values['policy-url'] !== undefined && !isHttpUrl(values['policy-url']))
    throw new UsageError('--policy-url: expected an http(s) URL ending in /v1 (the value is not shown)');
  if (values.mode !== 'chat' && values.mode !== 'tokens')
    throw new UsageError(`--mode: expected chat or tokens, got '${values.mode}'`);
  if (values.user !== 'llm' && values.user !== 'scripted')
    throw new UsageError(`--user: expected llm or scripted, got '${values.user}'`);
  return {
    ...values,
    user: values.user,
    suite: values.suite,
    out: values.out,
    repeats,
    concurrency,
    temperature,
    maxTokensPerTurn,
    maxAgentTurns,
  };
}

type RunFlags = ReturnType<typeof runFlags>;

/** The suite and the uids to run (all its tasks unless --uid names some). */
function runSuite(flags: RunFlags): { suite: AnySuite; uids: string[] } {
  const { suites, problems } = loadSuites(flags.suite);
  const suite = suites[0];
  if (!suite || problems.length)
    throw new UsageError(
      `--suite ${flags.suite}: ${problems.slice(0, 5).map(formatProblem).join('; ') || 'no task suite there'}`,
    );
  const uids = flags.uid ?? suite.tasks.map((t) => t.uid);
  const unknown = uids.filter((uid) => !suite.tasks.some((t) => t.uid === uid));
  if (unknown.length) throw new UsageError(`--uid: not in ${flags.suite}: ${unknown.join(', ')}`);
  return { suite, uids };
}

function runConfig(flags: RunFlags, server: PolicyServerHandle | undefined): EpisodeConfig {
  return episodeConfigSchema.parse({
    policy: {
      base_url: flags['policy-url'] ?? server!.baseUrl,
      model: flags.model ?? server!.model,
      mode: flags.mode,
    },
    // The LLM user has no endpoint of its own here: the policy's server plays it.
    user: { mode: flags.user },
    sampling: { temperature: flags.temperature, stop: flags.stop ?? [] },
    limits: {
      max_tokens_per_turn: flags.maxTokensPerTurn,
      max_agent_turns: flags.maxAgentTurns,
      wall_clock_ms: 300_000,
    },
    prompt: { tools_in_prompt: true, example: flags.example },
  });
}

/** Per task, each episode's success: 1, 0, or NaN for an infrastructure error. */
type TaskRates = Map<string, number[]>;

interface EpisodeJobs {
  flags: RunFlags;
  suite: AnySuite;
  config: EpisodeConfig;
  backends: EpisodeBackends;
  jobs: { uid: string; repetition: number }[];
  /** Result lines (and full records) are written here, one line per episode. */
  out: number;
  records: number | undefined;
}

/** Plays the jobs, `concurrency` at once; a job that cannot run goes to `failures` and the others go on. */
async function playJobs(
  { flags, suite, config, backends, jobs, out, records }: EpisodeJobs,
  perTask: TaskRates,
  failures: string[],
): Promise<void> {
  let done = 0;
  await mapLimit(jobs, flags.concurrency, async ({ uid, repetition }) => {
    const { task } = findTask(flags.suite, uid);
    const id = `adhoc:${uid}#${repetition}`;
    let record;
    try {
      record = await playEpisode(
        episodeDependencies(config, episodeEnvironment(backends, config, suite, task), task),
        task,
        id,
        episodeRunOptions(config, id),
      );
    } catch (err) {
      // A task defect (e.g. rubrics without a judge) is reported and the run goes on with the other tasks.
      process.stderr.write(`\n${uid}#${repetition}: ${(err as Error).message}\n`);
      failures.push(`${uid}#${repetition}: ${(err as Error).message}`);
      return;
    }
    fs.writeSync(
      out,
      `${JSON.stringify(resultLine(id, uid, repetition, taskDomain(suite, task.scenario), record, task.scenario))}\n`,
    );
    if (records !== undefined) fs.writeSync(records, `${JSON.stringify({ id, record })}\n`);
    perTask.set(uid, [
      ...(perTask.get(uid) ?? []),
      // Infrastructure and task errors are not graded: they count for neither side.
      record.outcome === 'success' ? 1 : record.outcome === 'agent_failure' ? 0 : NaN,
    ]);
    done += 1;
    process.stderr.write(
      `\r[${done}/${jobs.length}] ${uid}#${repetition}: ${record.outcome} (${record.finishReason})`.padEnd(100),
    );
  });
}

function printRates(perTask: TaskRates, failures: string[], jobCount: number): void {
  const rates = [...perTask.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  for (const [uid, r] of rates) {
    const infra = r.some(Number.isNaN) ? ` (${r.filter(Number.isNaN).length} infra)` : '';
    console.log(`${uid.padEnd(40)} ${r.filter((x) => x === 1).length}/${r.length}${infra}`);
  }
  const mixed = rates.filter(([, r]) => r.some((x) => x === 1) && r.some((x) => x === 0)).length;
  const all = rates.filter(([, r]) => r.every((x) => x === 1)).length;
  const none = rates.filter(([, r]) => r.every((x) => x === 0)).length;
  for (const f of failures) console.log(`not run: ${f}`);
  console.log(
    `tasks=${rates.length} always=${all} never=${none} mixed=${mixed} ` +
      `mean_success=${(rates.flatMap(([, r]) => r).filter((x) => x === 1).length / jobCount).toFixed(3)}`,
  );
}

export async function episodes(args: string[]): Promise<number> {
  if (args[0] === 'show') return (await import('./episode-show.ts')).episodeShow(args.slice(1));
  if (args[0] !== 'run') {
    const problem = args[0] === undefined ? 'a subcommand is required' : `unknown subcommand '${args[0]}'`;
    return commandErrorExit(new UsageError(problem), episodesCommand, consoleIo);
  }
  const flags = runFlags(args.slice(1));
  const { suite, uids } = runSuite(flags);
  const env = readEnvironment();
  await ensureControlDatabase(env);
  const server = flags['policy-url']
    ? undefined
    : await startPolicyServer({ logFile: path.join(os.tmpdir(), 'tbt-episodes-policy-server.log') });
  const config = runConfig(flags, server);
  const pool = new SandboxPool({
    controlUrl: databaseUrl(env),
    agentPassword: env.TBT_AGENT_DB_PASSWORD,
    readerPassword: env.TBT_READER_DB_PASSWORD,
    recycle: env.TBT_SANDBOX_RECYCLE,
    warm: 2,
  });
  const thinkingbox = thinkingboxResourcesFactory();
  const backends: EpisodeBackends = { pool, grader: new TerminalStateGrader(pool, databaseUrl(env)), thinkingbox };
  const jobs = uids.flatMap((uid) => Array.from({ length: flags.repeats }, (_, repetition) => ({ uid, repetition })));
  const out = fs.openSync(flags.out, 'w');
  const records = flags.records ? fs.openSync(flags.records, 'w') : undefined;
  const perTask: TaskRates = new Map();
  const failures: string[] = [];
  try {
    await playJobs({ flags, suite, config, backends, jobs, out, records }, perTask, failures);
  } finally {
    process.stderr.write('\n');
    fs.closeSync(out);
    if (records !== undefined) fs.closeSync(records);
    await pool.close();
    await thinkingbox.close();
    await server?.stop();
  }
  printRates(perTask, failures, jobs.length);
  return failures.length ? 1 : 0;
}
