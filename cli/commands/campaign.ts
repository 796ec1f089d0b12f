import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Workflow, WorkflowResultType } from '@temporalio/common';
import {
  Client,
  WorkflowFailedError,
  WorkflowNotFoundError,
  WorkflowUpdateFailedError,
  type WorkflowHandle,
} from '@temporalio/client';
import { readEnvironment, repoRoot, taskQueues, temporalUiUrl, type Environment } from '../../config/environment.ts';
import { loadCampaignConfig, type CampaignConfig } from '../../config/campaign-config.ts';
import {
  isHostPlaceholder,
  learnerPlaceholders,
  nodeHosts,
  requireFilledPlaceholders,
} from '../../config/learner-topology.ts';
import { learnerFiles } from '../../learner-control/learner-process.ts';
import { gpuHost } from '../../config/gpu-host.ts';
import { BadInputError } from '../../core/errors.ts';
import { learnerConfigJson, resolveLearnerSection } from '../../learner-control/learner-config.ts';
import { isSuiteDir } from '../../task-suites/task-suite-loader.ts';
import { selectCandidates } from '../../campaign-records/training-candidates.ts';
import { withClient } from '../../infra/control-database.ts';
import { exitedWorkers } from '../../infra/local-workers.ts';
import { databaseUrl } from '../../config/environment.ts';
import { gpuLearnerDir, pythonBinary } from '../../infra/python-env.ts';
import { optionalIntegerFlag } from '../flag-values.ts';
import { commandErrorExit, consoleIo, readUidListInput, UsageError } from '../command-support.ts';
import { campaignCommand, evalRunCommand, evalScheduleCommand, trainCommand } from '../command-definitions.ts';
import { findCommand } from '../command-help.ts';
import { commandLineOrExit } from '../command-line.ts';
import { evaluationOutageWaits, scheduledEvaluationWorkflow } from '../../workflows/scheduled-evaluation-workflow.ts';
import { evaluationRunTimeoutMs } from '../evaluation-run-timeout.ts';
import { campaignAttributes } from '../../workflows/search-attribute-keys.ts';
import {
  campaignWorkflow,
  pauseUpdate,
  statusQuery,
  stopAfterStepUpdate,
  type CampaignInput,
  type CampaignStatus,
} from '../../workflows/campaign-workflow.ts';
import { campaignFileName } from '../../core/campaign-id.ts';
import { explainedWorkflowFailure, workflowFailureText } from '../workflow-failure-text.ts';
import { terminateCampaign } from './campaign-terminate.ts';
import { dryRunMemoryVerdict } from '../memory-verdict.ts';
import { followEvaluation } from '../evaluation-progress.ts';
import { resumeCampaign } from './campaign-resume.ts';
import { connectTemporalClient } from '../../infra/temporal-connection.ts';

/** `tbt train`, `tbt eval run|schedule` and `tbt campaign status|pause|resume|stop|terminate|follow`. */

async function connect(env: Environment): Promise<{ client: Client; close: () => Promise<void> }> {
  const connection = await connectTemporalClient(env);
  return { client: new Client({ connection, namespace: env.TBT_TEMPORAL_NAMESPACE }), close: () => connection.close() };
}

export function workflowUrl(env: Environment, workflowId: string): string {
  return `${temporalUiUrl(env)}/namespaces/${env.TBT_TEMPORAL_NAMESPACE}/workflows/${encodeURIComponent(workflowId)}`;
}

function currentFile(env: Environment, name: string): string {
  return path.join(env.TBT_STATE_DIR, 'campaigns', `${name}.current`);
}

/** The workflow input of a campaign config; host placeholders are allowed only for a dry run (which starts nothing). */
function campaignInput(
  env: Environment,
  config: CampaignConfig,
  campaignId: string,
  configFile: string,
  options: { dryRun?: boolean } = {},
): CampaignInput {
  if (!options.dryRun) requireFilledPlaceholders(config.learner, configFile);
  const base = path.dirname(path.resolve(configFile));
  const resolve = (p: string) =>
    [path.resolve(base, p), path.resolve(repoRoot, p)].find((x) => fs.existsSync(x)) ?? path.resolve(repoRoot, p);
  const suiteDir = resolve(config.suite);
  if (!isSuiteDir(suiteDir))
    throw new BadInputError(
      `${configFile}: field suite: ${config.suite} is not a task suite folder (scenarios/ and tasks/, or an ` +
        'imported suite written by `tbt tasks import-thinkingbox`)',
    );
  const excludeUidsFile = config.exclude_uids ? resolve(config.exclude_uids) : undefined;
  if (excludeUidsFile && !fs.existsSync(excludeUidsFile))
    throw new BadInputError(`${configFile}: field exclude_uids: ${config.exclude_uids} does not exist`);
  const pricesFile = config.prices ? resolve(config.prices) : undefined;
  if (pricesFile && !fs.existsSync(pricesFile))
    throw new BadInputError(`${configFile}: field prices: ${config.prices} does not exist`);
  let learner: CampaignConfig['learner'];
  try {
    learner = resolveLearnerSection(config.learner, config.seed);
  } catch (err) {
    if (err instanceof BadInputError) throw new BadInputError(`${configFile}: field ${err.message}`, { cause: err });
    throw err;
  }
  return {
    campaignId,
    config: Object.freeze({ ...config, learner }),
    suiteDir,
    excludeUidsFile,
    pricesFile,
    queues: learnerQueues(env, config.learner),
  };
}

/** Node 0's GPU queue (this host's unless `learner.gpu_workers` names the workers) and, for several nodes, all. */
function learnerQueues(env: Environment, learner: CampaignConfig['learner']): CampaignInput['queues'] {
  const queues = taskQueues(env);
  const hosts = nodeHosts(learner) ?? [gpuHost(env)];
  return {
    rollout: queues.rollout,
    gpu: queues.gpu(hosts[0]!),
    ...(hosts.length > 1 ? { gpuNodes: hosts.map((h) => queues.gpu(h)) } : {}),
  };
}

/**
 * What the campaign evaluates, counted from the suite as a start would select it; a held-out task among the training
 * candidates is refused here as at the start (campaign-records/benchmark-leak.ts).
 */
function evaluationPlan(input: CampaignInput): string {
  const { evaluation, probe } = input.config;
  const selected = selectCandidates({
    campaignId: input.campaignId,
    suiteDir: input.suiteDir,
    excludeUidsFile: input.excludeUidsFile,
    maxCandidates: probe.max_candidates,
    evaluationTasks: evaluation.tasks,
  });
  const candidates = new Set(selected.uids);
  const pools = `${selected.uids.length} training candidates; every training pool is drawn from them`;
  const when = evaluation.before_training ? 'before and after training' : 'after training';
  if (evaluation.tasks === 'pool') return `the training pool x ${evaluation.repeats} repeats ${when} (${pools})`;
  const tasks = evaluation.tasks === 'held_out' ? selected.heldOutUids : selected.evaluationUids;
  const inPools = tasks.filter((u) => candidates.has(u)).length;
  const which =
    evaluation.tasks === 'held_out'
      ? `held-out tasks only (${input.excludeUidsFile ? `uids in ${input.excludeUidsFile} and ` : ''}the suite's ` +
        'evaluation-only tasks)'
      : 'every suite task';
  return (
    `${which}: ${tasks.length} tasks x ${evaluation.repeats} repeats ${when}, ${inPools} of them in any training ` +
    `pool (${pools})`
  );
}

function dryRun(input: CampaignInput, configFile: string): void {
  const c = input.config;
  const t = c.training;
  console.log(`campaign ${input.campaignId} (dry run: nothing is started)`);
  console.log(
    `  suite        ${input.suiteDir}${input.excludeUidsFile ? ` (excluding uids in ${input.excludeUidsFile})` : ''}`,
  );
  console.log(
    c.probe.enabled
      ? `  stages       ingest -> probe (${c.probe.repeats} episodes per ` +
          `candidate${c.probe.max_candidates ? `, first ${c.probe.max_candidates} candidates` : ''}) -> select ` +
          `(bands ${c.probe.retain_bands.join('/')}, min clean runs ${c.probe.min_clean_runs})`
      : '  stages       ingest (no probe: every candidate is in the pool)',
  );
  const baseEval = c.evaluation.before_training ? `evaluate base policy (${c.evaluation.repeats} repeats) -> ` : '';
  console.log(
    `               -> ${baseEval}${t.steps} ` +
      `training steps x ${t.groups_per_step} groups x ${t.group_size} episodes = ${t.groups_per_step * t.group_size} ` +
      `per update -> evaluate (${c.evaluation.repeats} repeats) -> report`,
  );
  console.log(`  evaluation   ${evaluationPlan(input)}`);
  console.log(
    `  refill       up to ${t.infra_refill_cap} extra episodes per group for infrastructure errors, then the group ` +
      `is replaced`,
  );
  console.log(
    `  zero variance  up to ${t.max_replacements} replacement tasks per step, then fallback: ` +
      `${t.zero_variance_fallback}`,
  );
  console.log(
    `  policy       ${c.episode.policy.base_url} (${c.episode.policy.model}, ${c.episode.policy.mode} mode, ` +
      `temperature ${c.episode.sampling.temperature})`,
  );
  console.log(
    `  judge mode   probe ${c.probe.judge_mode}, training ${c.training.judge_mode}, ` +
      `evaluation ${c.evaluation.judge_mode}${c.episode.judge ? '' : ' (no judge configured)'}`,
  );
  console.log(
    `  queues       rollout ${input.queues.rollout}, gpu ${input.queues.gpu}` +
      (input.queues.gpuNodes ? ` (learner nodes: ${input.queues.gpuNodes.join(', ')})` : ''),
  );
  const placeholders = learnerPlaceholders(c.learner);
  if (placeholders.length > 0) {
    const hosts = [...new Set(placeholders.map((p) => p.value.replace(/:\d+$/, '')))];
    console.log(
      `  placeholders ${hosts.join(', ')}: hosts the operator fills in ` +
        `(${placeholders.map((p) => p.field).join(', ')}) in ${configFile}; tbt train starts nothing until they ` +
        'are real host names',
    );
  }
  console.log('  hyperparameters (learner):');
  for (const [k, v] of Object.entries(c.learner)) console.log(`    ${k.padEnd(24)} ${JSON.stringify(v)}`);
  // The learner's own launch plan: exact torchrun command per node and its resolved hyperparameters.
  const tmp = path.join(os.tmpdir(), `tbt-learner-${process.pid}.json`);
  const learner = learnerConfigJson(c.learner, c.seed, c.episode.sampling.temperature);
  fs.writeFileSync(
    tmp,
    JSON.stringify(
      {
        ...learner,
        checkpoint: { ...(learner.checkpoint as object), dir: `<state>/learners/${input.campaignId}/checkpoints` },
      },
      null,
      2,
    ),
  );
  const workers = nodeHosts(c.learner) ?? [gpuHost(readEnvironment())];
  if (c.learner.attach_url)
    console.log(`  learner      attached at ${c.learner.attach_url}: started outside, with the commands below`);
  else
    for (const [rank, host] of workers.entries()) {
      const queue = taskQueues(readEnvironment()).gpu(host);
      const where = isHostPlaceholder(host) ? '(placeholder)' : `(queue ${queue})`;
      console.log(`  learner node ${rank}: started by the GPU worker of host ${host} ${where}`);
    }
  try {
    const plan = execFileSync(
      pythonBinary(),
      [
        '-m',
        'tbt_gpu.learner.launch',
        '--nodes',
        String(c.learner.nodes),
        '--gpus-per-node',
        String(c.learner.gpus_per_node),
        ...(c.learner.rdzv_endpoint ? ['--rdzv-endpoint', c.learner.rdzv_endpoint] : []),
        '--rdzv-id',
        campaignFileName(input.campaignId),
        '--config',
        tmp,
        // What the GPU workers run: the campaign's learner folder, always with --resume.
        '--config-shown',
        learnerFiles(readEnvironment().TBT_STATE_DIR, input.campaignId).config,
        '--resume',
        '--dry-run',
      ],
      { cwd: gpuLearnerDir, encoding: 'utf8' },
    );
    console.log(
      plan
        .trimEnd()
        .split('\n')
        .map((l) => `  ${l}`)
        .join('\n'),
    );
  } finally {
    fs.rmSync(tmp, { force: true });
  }
}

async function episodeCount(campaignId: string, env: Environment): Promise<number> {
  return withClient(databaseUrl(env), async (c) =>
    Number(
      (
        await c.query<{ n: string }>(`SELECT count(*) AS n FROM episodes WHERE campaign = $1 AND status <> 'running'`, [
          campaignId,
        ])
      ).rows[0]!.n,
    ),
  ).catch(() => -1);
}

/**
 * Follows a campaign until it ends, redrawing one progress line (stage, step bar, episodes). A campaign that ends
 * otherwise than completed is explained (cli/workflow-failure-text.ts); `again` is the command that starts it anew.
 */
export async function follow(
  client: Client,
  env: Environment,
  workflowId: string,
  again?: string,
): Promise<CampaignStatus> {
  const handle = client.workflow.getHandle(workflowId);
  const tty = process.stdout.isTTY;
  let last = '';
  const warned = new Set<string>();
  for (;;) {
    // A local worker that died leaves its queue unpolled and the campaign waiting, durably but silently.
    for (const w of exitedWorkers(env).filter((w) => !warned.has(w.kind))) {
      warned.add(w.kind);
      console.error(
        `\nwarning: the local ${w.kind} worker exited (log: ${w.log}); the campaign waits for a worker on its ` +
          'queue: `tbt workers up` starts it again and the campaign goes on',
      );
    }
    const description = await handle.describe();
    if (description.status.name !== 'RUNNING') {
      if (tty) process.stdout.write('\n');
      const waited = { kind: 'campaign', workflowId, again, uiUrl: workflowUrl(env, workflowId) } as const;
      return (await explainedWorkflowFailure(handle.result(), waited)) as CampaignStatus;
    }
    const s = await handle.query(statusQuery).catch(() => undefined);
    if (s) {
      const width = 20;
      const filled = Math.round((s.step / Math.max(1, s.steps)) * width);
      const line =
        `[${'#'.repeat(filled)}${'-'.repeat(width - filled)}] step ${s.step}/${s.steps}  stage ` +
        `${s.stage.padEnd(15)} episodes ` +
        `${await episodeCount(s.campaignId, env)}` +
        (s.lastStep ? `  last reward ${s.lastStep.meanReward.toFixed(2)}` : '') +
        (s.paused ? `  (paused${s.pauseReason ? `: ${s.pauseReason}` : ''})` : '');
      if (line !== last) {
        process.stdout.write(tty ? `\r${line.padEnd(110)}` : `${line}\n`);
        last = line;
      }
    }
    await new Promise((r) => setTimeout(r, 3000));
  }
}

export async function startCampaign(
  configFile: string,
  options: { wait: boolean; id?: string; seed?: number },
): Promise<{ workflowId: string; status?: CampaignStatus }> {
  const env = readEnvironment();
  const loaded = loadCampaignConfig(configFile);
  // A seed given on the command line (bench:learning --seed) replaces the file's, and names the campaign apart so
  // runs with different seeds can go side by side; the manifest records the seed used.
  const config =
    options.seed === undefined
      ? loaded
      : Object.freeze({ ...loaded, seed: options.seed, name: `${loaded.name}-s${options.seed}` });
  requireFilledPlaceholders(config.learner, configFile);
  const { client, close } = await connect(env);
  try {
    const current = currentFile(env, config.name);
    let workflowId: string | undefined = options.id;
    if (!workflowId && fs.existsSync(current)) {
      const id = fs.readFileSync(current, 'utf8').trim();
      const running = await client.workflow
        .getHandle(id)
        .describe()
        .then(
          (d) => d.status.name === 'RUNNING',
          (err: unknown) => (err instanceof WorkflowNotFoundError ? false : Promise.reject(err)),
        );
      if (running) {
        workflowId = id;
        console.log(`campaign ${id} is already running: following it`);
      }
    }
    if (!workflowId || options.id) {
      const stamp = new Date().toISOString().replace(/[-:]/g, '').replace(/\..*/, '').replace('T', '-');
      workflowId ??= `${config.name}-${stamp}`;
      const input = campaignInput(env, config, workflowId, configFile);
      await client.workflow
        .start(campaignWorkflow, {
          workflowId,
          taskQueue: taskQueues(env).orchestrator,
          args: [input],
          memo: { config },
          workflowIdReusePolicy: 'ALLOW_DUPLICATE_FAILED_ONLY',
        })
        .catch((err: unknown) => {
          if ((err as Error).name !== 'WorkflowExecutionAlreadyStartedError') throw err;
          console.log(`campaign ${workflowId} is already running: following it`);
        });
      fs.mkdirSync(path.dirname(current), { recursive: true });
      fs.writeFileSync(current, workflowId);
    }
    console.log(`campaign workflow: ${workflowId}`);
    console.log(`Temporal UI:       ${workflowUrl(env, workflowId)}`);
    const again = `tbt train --config ${shellWord(configFile)}`;
    const status = options.wait ? await follow(client, env, workflowId, again) : undefined;
    return { workflowId, status };
  } finally {
    await close();
  }
}

export async function train(args: string[]): Promise<number> {
  const line = commandLineOrExit(trainCommand, args);
  if (typeof line === 'number') return line;
  const { values } = line;
  if (values['dry-run']) {
    const env = readEnvironment();
    const config = loadCampaignConfig(values.config);
    const input = campaignInput(env, config, values.id ?? `${config.name}-<timestamp>`, values.config, {
      dryRun: true,
    });
    dryRun(input, values.config);
    const memory = dryRunMemoryVerdict(input.config);
    for (const line of memory.lines) console.log(line);
    if (memory.refusal) throw new BadInputError(`${values.config}: field ${memory.refusal}`);
    return 0;
  }
  const { status } = await startCampaign(values.config, { wait: values.wait, id: values.id });
  if (status) console.log(JSON.stringify(status, null, 2));
  return 0;
}

/**
 * The run timeout of an evaluation run or schedule, sized to its work (cli/commands/eval.ts). Without --tasks the
 * campaign's pool, chosen at run time, is evaluated: at most the suite, so it is sized for the whole suite.
 */
async function evaluationRunTimeout(config: CampaignConfig, suiteDir: string, repeats: number, uids?: string[]) {
  const tasks = uids?.length ?? (await evaluationUids('all', suiteDir)).length;
  return evaluationRunTimeoutMs({ config, tasks, repeats, outageWaits: evaluationOutageWaits(config) });
}

/** `--tasks all|FILE`: every task of the suite, or the file's uid list, each of which must be in the suite. */
async function evaluationUids(tasks: string, suiteDir: string): Promise<string[]> {
  const { loadSuites, formatProblem } = await import('../../task-suites/task-suite-loader.ts');
  const { suites, problems } = loadSuites(suiteDir);
  if (!suites[0] || problems.length)
    throw new BadInputError(
      `suite ${suiteDir}: ${problems.slice(0, 5).map(formatProblem).join('; ') || 'no task suite there'}`,
    );
  const known = suites[0].tasks.map((t) => t.uid);
  if (tasks === 'all') return known;
  const { uids } = readUidListInput(tasks);
  const unknown = uids.filter((u) => !known.includes(u));
  if (uids.length === 0) throw new UsageError(`--tasks ${tasks}: the list is empty`);
  if (unknown.length) throw new UsageError(`--tasks ${tasks}: not in ${suiteDir}: ${unknown.slice(0, 10).join(', ')}`);
  const twice = uids.filter((u, i) => uids.indexOf(u) !== i);
  // Each task runs --repeats times already; a uid listed twice would be two episodes with one id.
  if (twice.length) throw new UsageError(`--tasks ${tasks}: listed more than once: ${twice.slice(0, 10).join(', ')}`);
  return uids;
}

/** `tbt eval run`: evaluate a campaign's latest checkpoint (or the base policy) on tasks x repeats, coverage-gated. */
export async function runEvaluation(args: string[]): Promise<number> {
  const line = commandLineOrExit(evalRunCommand, args);
  if (typeof line === 'number') return line;
  const { values } = line;
  const repeats = optionalIntegerFlag('--repeats', values.repeats, { min: 1, max: 10_000 });
  const env = readEnvironment();
  const config = loadCampaignConfig(values.config);
  const campaignId = values.campaign ?? `${config.name}-eval`;
  const input = campaignInput(env, config, campaignId, values.config);
  const uids = values.tasks ? await evaluationUids(values.tasks, input.suiteDir) : undefined;
  const evalRepeats = repeats ?? config.evaluation.repeats;
  const runTimeout = await evaluationRunTimeout(config, input.suiteDir, evalRepeats, uids);
  const { client, close } = await connect(env);
  try {
    const workflowId = `${campaignId}/eval-run-${Date.now()}`;
    console.log(`evaluation workflow: ${workflowId}\nTemporal UI: ${workflowUrl(env, workflowId)}`);
    const handle = await client.workflow.start(scheduledEvaluationWorkflow, {
      workflowId,
      taskQueue: taskQueues(env).orchestrator,
      workflowRunTimeout: runTimeout,
      args: [
        {
          campaignId,
          config,
          suiteDir: input.suiteDir,
          queues: input.queues,
          repeats: evalRepeats,
          uids,
          labelPrefix: 'run',
        },
      ],
    });
    const waited = {
      kind: 'evaluation',
      workflowId,
      again: ['tbt', 'eval', 'run', ...args].map(shellWord).join(' '),
      uiUrl: workflowUrl(env, workflowId),
    } as const;
    const stopFollowing = followEvaluation(client, handle, (line) => console.log(line));
    const result = await explainedWorkflowFailure(waitForResult(handle), waited).finally(stopFollowing);
    console.log(result.summary);
    console.log(`aggregate: ${result.aggregate}`);
    return 0;
  } finally {
    await close();
  }
}

/** A command-line word as a shell reads it back (quoted only when it needs to be). */
function shellWord(word: string): string {
  return /^[\w@%+=:,./-]+$/.test(word) ? word : `'${word.replace(/'/g, `'\\''`)}'`;
}

/**
 * The workflow's result, riding out transient client errors: a long evaluation's result long-poll can time out
 * on a loaded machine ("Failed to get Workflow execution history") while the workflow runs on unharmed.
 */
async function waitForResult<W extends Workflow>(handle: WorkflowHandle<W>): Promise<WorkflowResultType<W>> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await handle.result();
    } catch (err) {
      if (err instanceof WorkflowFailedError || err instanceof WorkflowNotFoundError || attempt >= 20) throw err;
      console.error(`waiting for the result again (${(err as Error).message})`);
      await new Promise((r) => setTimeout(r, Math.min(30_000, 1000 * 2 ** attempt)));
    }
  }
}

/** `tbt eval schedule`: a Temporal Schedule that re-evaluates a campaign's latest checkpoint. */
export async function scheduleEvaluation(args: string[]): Promise<number> {
  const line = commandLineOrExit(evalScheduleCommand, args);
  if (typeof line === 'number') return line;
  const { values } = line;
  const repeats = optionalIntegerFlag('--repeats', values.repeats, { min: 1, max: 10_000 });
  const env = readEnvironment();
  const config = loadCampaignConfig(values.config);
  const input = campaignInput(env, config, values.campaign, values.config);
  const scheduleId = values.id ?? `${values.campaign}-reeval`;
  const runTimeout = await evaluationRunTimeout(config, input.suiteDir, repeats ?? config.evaluation.repeats);
  const { client, close } = await connect(env);
  try {
    await client.schedule.create({
      scheduleId,
      spec: { cronExpressions: [values.cron] },
      action: {
        type: 'startWorkflow',
        workflowType: 'scheduledEvaluationWorkflow',
        taskQueue: taskQueues(env).orchestrator,
        // Sized to the work: a run stuck on a queue without a worker ends, and the next tick resumes the same
        // step's evaluation (its label is the step and what is evaluated).
        workflowRunTimeout: runTimeout,
        typedSearchAttributes: campaignAttributes(values.campaign, 'evaluate-scheduled', 0),
        args: [
          {
            campaignId: values.campaign,
            config,
            suiteDir: input.suiteDir,
            queues: input.queues,
            repeats: repeats ?? config.evaluation.repeats,
          },
        ],
      },
      // A slow evaluation is never doubled by the next tick.
      // After a server outage, only ticks missed in the last 10 minutes are caught up (not a backlog of runs).
      policies: { overlap: 'SKIP', catchupWindow: '10 minutes' },
    });
    console.log(
      `schedule ${scheduleId}: cron "${values.cron}" re-evaluates the latest checkpoint of ${values.campaign}`,
    );
    console.log(
      `Temporal UI: ${temporalUiUrl(env)}/namespaces/${env.TBT_TEMPORAL_NAMESPACE}` +
        `/schedules/${encodeURIComponent(scheduleId)}`,
    );
    return 0;
  } finally {
    await close();
  }
}

export async function campaign(args: string[]): Promise<number> {
  const sub = args[0];
  const command = sub === undefined ? undefined : findCommand(`campaign ${sub}`);
  if (!command) {
    const problem = sub === undefined ? 'a subcommand is required' : `unknown subcommand '${sub}'`;
    return commandErrorExit(new UsageError(problem), campaignCommand, consoleIo);
  }
  const line = commandLineOrExit(command, args.slice(1));
  if (typeof line === 'number') return line;
  const id = line.positionals[0]!;
  const env = readEnvironment();
  const { client, close } = await connect(env);
  try {
    const handle = client.workflow.getHandle(id);
    if (sub === 'status') {
      const status = await handle.query(statusQuery);
      console.log(JSON.stringify(status, null, 2));
      // stderr: stdout stays the JSON alone.
      if (status.paused)
        console.error(`paused: ${status.pauseReason ?? 'pause requested'} (resume: tbt campaign resume ${id})`);
      // A campaign that ended otherwise than completed: why, and what to do (stdout stays the JSON).
      if (!['RUNNING', 'COMPLETED'].includes((await handle.describe()).status.name))
        await handle.result().catch((err: unknown) => {
          console.error(workflowFailureText(err, { kind: 'campaign', workflowId: id, uiUrl: workflowUrl(env, id) }));
        });
    } else if (sub === 'pause') {
      const given = line.values.reason;
      const reason = typeof given === 'string' ? given : `paused by tbt campaign pause at ${new Date().toISOString()}`;
      console.log(`${id}: ${await handle.executeUpdate(pauseUpdate, { args: [{ reason }] })}`);
    } else if (sub === 'terminate') {
      const given = line.values.reason;
      const reason =
        typeof given === 'string' ? given : `terminated by tbt campaign terminate at ${new Date().toISOString()}`;
      return await terminateCampaign(client, env, id, reason);
    } else if (sub === 'follow') console.log(JSON.stringify(await follow(client, env, id), null, 2));
    else if (sub === 'resume') return await resumeCampaign(client, env, id);
    else console.log(`${id}: ${await handle.executeUpdate(stopAfterStepUpdate)}`);
    return 0;
  } catch (err) {
    // A refused Update (nothing to pause, stop or resume): its reason, not a stack.
    if (err instanceof WorkflowUpdateFailedError) {
      console.error(`campaign ${id}: ${sub} refused: ${err.cause?.message ?? err.message}`);
      return 1;
    }
    throw err;
  } finally {
    await close();
  }
}
