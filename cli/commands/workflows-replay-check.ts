import fs from 'node:fs';
import path from 'node:path';
import { Client, type WorkflowExecutionInfo } from '@temporalio/client';
import type { History } from '@temporalio/common/lib/proto-utils.js';
import { DefaultLogger, Runtime, Worker, type ReplayWorkerOptions } from '@temporalio/worker';
import { readEnvironment, taskQueues } from '../../config/environment.ts';
import { connectTemporalClient } from '../../infra/temporal-connection.ts';
import {
  buildWorkflowBundle,
  defaultWorkflowBundleDir,
  prebuiltWorkflowBundle,
  workflowBundleBuildId,
} from '../../infra/workflow-bundle.ts';
import { workflowsCommand, workflowsReplayCheckCommand } from '../command-definitions.ts';
import { commandLineOrExit } from '../command-line.ts';
import { commandErrorExit, consoleIo, InputError, UsageError, type CommandIo } from '../command-support.ts';
import { integerFlag, optionalIntegerFlag } from '../flag-values.ts';

/**
 * `tbt workflows replay-check`: before a deploy, replays the histories of the workflows running on the orchestrator's
 * queue (and, if asked, of those closed recently) against the code about to be deployed: this checkout's workflows
 * or a pre-built bundle. A workflow whose recorded commands the new code would not issue again (a change without
 * `patched()`) is named with the nondeterminism, and the command exits 1: deploying would break that workflow.
 * Under Worker Versioning a workflow pinned to another build is listed but not replayed: it drains on its build.
 */

interface Listed {
  info: WorkflowExecutionInfo;
  history?: History;
  fetchError?: string;
  /** Under Worker Versioning: the build the workflow is pinned to (it never runs on another one). */
  pinnedTo?: string;
}

/** temporal.api.enums.v1.VersioningBehavior PINNED. */
const pinnedBehavior = 1;

interface BundleChoice {
  options: Pick<ReplayWorkerOptions, 'workflowBundle'>;
  buildId: string;
  origin: string;
}

/** `--bundle DIR` (a pre-built bundle folder) or `FILE.js`; default this checkout's, pre-built when fresh. */
async function chooseBundle(given: string | undefined): Promise<BundleChoice> {
  if (given === undefined) {
    const found = prebuiltWorkflowBundle(defaultWorkflowBundleDir);
    if (found.state === 'fresh')
      return {
        options: { workflowBundle: { codePath: found.codePath } },
        buildId: found.manifest.buildId,
        origin: `pre-built ${found.codePath}`,
      };
    const { code, buildId } = await buildWorkflowBundle();
    return { options: { workflowBundle: { code } }, buildId, origin: "built now from this checkout's workflows/" };
  }
  const stat = fs.statSync(given, { throwIfNoEntry: false });
  if (!stat) throw new InputError(`--bundle ${given}: no such file or folder`);
  if (stat.isDirectory()) {
    const found = prebuiltWorkflowBundle(given);
    // A folder from another checkout is judged by its code alone: its sources are not the ones here.
    if (found.state === 'missing') throw new InputError(`--bundle ${given}: ${found.reason}`);
    const codePath = path.join(given, 'workflow-bundle.js');
    return {
      options: { workflowBundle: { codePath } },
      buildId: workflowBundleBuildId(fs.readFileSync(codePath)),
      origin: found.state === 'fresh' ? `pre-built ${codePath}` : `${codePath} (${found.reason})`,
    };
  }
  return {
    options: { workflowBundle: { codePath: given } },
    buildId: workflowBundleBuildId(fs.readFileSync(given)),
    origin: given,
  };
}

function visibilityQuery(taskQueue: string, closedHours: number | undefined): string {
  const running = `ExecutionStatus = 'Running'`;
  if (closedHours === undefined) return `TaskQueue = '${taskQueue}' AND ${running}`;
  const since = new Date(Date.now() - closedHours * 3_600_000).toISOString();
  return `TaskQueue = '${taskQueue}' AND (${running} OR CloseTime > '${since}')`;
}

async function listWithHistories(client: Client, query: string, limit: number): Promise<Listed[]> {
  const listed: Listed[] = [];
  for await (const info of client.workflow.list({ query })) {
    if (listed.length === limit) break;
    listed.push({ info });
  }
  for (const entry of listed) {
    const { workflowId, runId } = entry.info;
    const handle = client.workflow.getHandle(workflowId, runId);
    const versioning = (await handle.describe().catch(() => undefined))?.raw.workflowExecutionInfo?.versioningInfo;
    if (versioning?.behavior === pinnedBehavior && versioning.deploymentVersion?.buildId)
      entry.pinnedTo = versioning.deploymentVersion.buildId;
    entry.history = await handle.fetchHistory().catch((err: unknown) => {
      entry.fetchError = err instanceof Error ? err.message : String(err);
      return undefined;
    });
  }
  return listed;
}

/** The SDK wraps Core's message in two sentences of its own; the part that names the command is what helps. */
function replayErrorText(text: string): string {
  const core = /\[TMPRL\d+\][^"]*/.exec(text)?.[0];
  return (core ?? text.split('\n')[0]!).slice(0, 300);
}

export async function replayCheck(args: string[], deps: { client?: Client; io?: CommandIo } = {}): Promise<number> {
  const io = deps.io ?? consoleIo;
  const line = commandLineOrExit(workflowsReplayCheckCommand, args, io);
  if (typeof line === 'number') return line;
  const env = readEnvironment();
  const taskQueue = line.values['task-queue'] ?? taskQueues(env).orchestrator;
  try {
    // It goes into the visibility query between quotes.
    if (!/^[A-Za-z0-9._-]+$/.test(taskQueue))
      throw new UsageError(`--task-queue: expected letters, digits, . _ -, got '${taskQueue}'`);
    const closedHours = optionalIntegerFlag('--closed-hours', line.values['closed-hours'], { min: 1, max: 24 * 366 });
    const limit = integerFlag('--limit', line.values.limit, { min: 1, max: 100_000 });
    const bundle = await chooseBundle(line.values.bundle);
    const connection = deps.client ? undefined : await connectTemporalClient(env);
    const client = deps.client ?? new Client({ connection, namespace: env.TBT_TEMPORAL_NAMESPACE });
    try {
      return await runCheck(client, io, { taskQueue, closedHours, limit, bundle });
    } finally {
      await connection?.close();
    }
  } catch (err) {
    return commandErrorExit(err, workflowsReplayCheckCommand, io);
  }
}

async function runCheck(
  client: Client,
  io: CommandIo,
  options: { taskQueue: string; closedHours?: number; limit: number; bundle: BundleChoice },
): Promise<number> {
  const { taskQueue, closedHours, limit, bundle } = options;
  const listed = await listWithHistories(client, visibilityQuery(taskQueue, closedHours), limit);
  const scope = closedHours === undefined ? 'running' : `running or closed in the last ${closedHours} h`;
  io.out(
    `replaying ${listed.length} workflow(s) ${scope} on ${taskQueue} against bundle ${bundle.buildId} ` +
      `(${bundle.origin})${listed.length === limit ? `; only the first ${limit} (--limit)` : ''}`,
  );
  const counts = { ok: 0, nondeterministic: 0, errors: 0, pinned: 0 };
  // Pinned to another build (Worker Versioning): it finishes on that build's workers and never replays on this code.
  const elsewhere = (l: Listed) => l.pinnedTo !== undefined && l.pinnedTo !== bundle.buildId;
  for (const l of listed.filter(elsewhere)) {
    counts.pinned++;
    io.out(`pinned ${l.info.workflowId} ${l.info.type} run ${l.info.runId}: stays on build ${l.pinnedTo}`);
  }
  const readable = listed.filter((l) => l.history && !elsewhere(l));
  for (const l of listed.filter((entry) => !entry.history && !elsewhere(entry))) {
    counts.errors++;
    io.out(`ERROR ${l.info.workflowId} ${l.info.type} run ${l.info.runId}: history not readable: ${l.fetchError}`);
  }
  // One history at a time, in order: each result belongs to the history pushed last.
  let current = 0;
  const histories = (function* () {
    for (const [i, l] of readable.entries()) {
      current = i;
      yield { workflowId: l.info.workflowId, history: l.history! };
    }
  })();
  for await (const result of Worker.runReplayHistories(bundle.options, histories)) {
    const { info, history } = readable[current]!;
    const where = `${info.workflowId} ${info.type} run ${info.runId}`;
    if (!result.error) {
      counts.ok++;
      io.out(`ok ${where} (${history!.events?.length ?? 0} events, ${info.status.name.toLowerCase()})`);
    } else if (result.error.name === 'DeterminismViolationError') {
      counts.nondeterministic++;
      io.out(`NONDETERMINISTIC ${where}: ${replayErrorText(result.error.message)}`);
    } else {
      counts.errors++;
      io.out(`ERROR ${where}: ${replayErrorText(result.error.message)}`);
    }
  }
  io.out(
    `replay-check: bundle ${bundle.buildId} workflows=${listed.length} ok=${counts.ok} ` +
      `nondeterministic=${counts.nondeterministic} errors=${counts.errors}` +
      (counts.pinned ? ` pinned-elsewhere=${counts.pinned}` : ''),
  );
  if (counts.nondeterministic > 0)
    io.err(
      'a deploy of this bundle would break the workflows above: guard the change with patched() ' +
        '(docs/operations.md "Deploying new code under a running campaign")',
    );
  return counts.nondeterministic + counts.errors > 0 ? 1 : 0;
}

/** `tbt workflows SUBCOMMAND`: the group's one subcommand today. */
export async function workflows(args: string[]): Promise<number> {
  if (args[0] === 'replay-check') {
    // The replay worker's state changes would bury the one line per workflow; its errors still show.
    Runtime.install({ logger: new DefaultLogger('ERROR') });
    return replayCheck(args.slice(1));
  }
  const problem = args[0] === undefined ? 'a subcommand is required' : `unknown subcommand '${args[0]}'`;
  return commandErrorExit(new UsageError(problem), workflowsCommand, consoleIo);
}
