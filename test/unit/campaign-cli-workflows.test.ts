import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { setTimeout as delay } from 'node:timers/promises';
import path from 'node:path';
import { Context } from '@temporalio/activity';
import { WorkflowFailedError } from '@temporalio/client';
import type { TestWorkflowEnvironment } from '@temporalio/testing';
import type { Worker } from '@temporalio/worker';
import { withFailureMapping } from '../../activities/temporal-failure.ts';
import { loadCampaignConfig } from '../../config/campaign-config.ts';
import { repoRoot } from '../../config/environment.ts';
import { BadInputError } from '../../core/errors.ts';
import { campaignWorkflow } from '../../workflows/campaign-workflow.ts';
import { campaign, runEvaluation } from '../../cli/commands/campaign.ts';
import { mockedWorker, startWorkflowTestEnv } from '../helpers/workflow-test-env.ts';
import { testTempDir } from '../helpers/temp-dir.ts';

/**
 * The campaign commands that act on or wait for a workflow, run as the CLI runs them (in this process) against a
 * throw-away Temporal dev server with mocked activities: `tbt campaign terminate` ends the campaign and its
 * children with the reason, and a command that waited on a workflow that failed prints the explained failure
 * (cli/workflow-failure-text.ts) instead of a bare "Workflow execution failed".
 */

const prefix = 'unit-cli';
const queue = `${prefix}-orchestrator`;

/** Campaign ids whose probe episodes hang until cancelled. */
const hanging = new Set<string>();
const activities = withFailureMapping({
  async runEpisode(input: { campaign?: string; episodeId: string }) {
    if (hanging.has(input.campaign!)) await Context.current().sleep(120_000);
    return { id: input.episodeId, outcome: 'success', reward: 1, finishReason: 'done', policyTokens: 0 };
  },
  async ingestCandidates(input: { campaignId: string }) {
    if (input.campaignId.startsWith('bad-'))
      throw new BadInputError('campaign.yaml: field exclude_uids: uid list has a blank line 3');
    return { uids: ['t1', 't2'], excluded: 0, evaluationUids: ['t1', 't2'] };
  },
  async latestCheckpoint(input: { campaignId: string }) {
    throw new BadInputError(`campaign ${input.campaignId} has no selected pool: pass --tasks`);
  },
  async startLearner() {
    return { controlUrl: 'http://learner', manifest: {} };
  },
  async writeManifest() {
    return '/manifest.json';
  },
  async ensurePolicyServer() {
    return { baseUrl: 'http://policy/v1', model: 'm' };
  },
  async policySystemMessages() {
    return { system_messages: 'separate' };
  },
  async ensurePolicyWeights() {},
  async stopLearner() {},
});

let env: TestWorkflowEnvironment;
let worker: Worker;
let running: Promise<unknown>;
const saved = { ...process.env };
before(async () => {
  env = await startWorkflowTestEnv();
  worker = await mockedWorker(env, queue, activities);
  running = worker.run();
  // What the CLI reads: this server, these queues, an empty state folder (no learner of ours runs here).
  process.env.TBT_TEMPORAL_ADDRESS = env.address;
  process.env.TBT_TEMPORAL_NAMESPACE = env.namespace ?? 'default';
  process.env.TBT_TASK_QUEUE_PREFIX = prefix;
  process.env.TBT_STATE_DIR = testTempDir('tbt-cli-workflows-');
});
after(async () => {
  process.env = saved;
  worker?.shutdown();
  await running;
  await env?.teardown();
});

const campaignConfig = loadCampaignConfig(path.join(repoRoot, 'config', 'local.yaml'));

function startCampaign(campaignId: string) {
  return env.client.workflow.start(campaignWorkflow, {
    taskQueue: queue,
    workflowId: campaignId,
    args: [{ campaignId, config: campaignConfig, suiteDir: '/suite', queues: { rollout: queue, gpu: queue } }],
  });
}

async function until<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe().catch(() => undefined);
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await delay(100);
  }
}

/** What `fn` prints with console.log and console.error, and what it returns or throws. */
async function captured<T>(fn: () => Promise<T>): Promise<{ out: string; err: string; result?: T; error?: unknown }> {
  const out: string[] = [];
  const err: string[] = [];
  const { log, error } = console;
  console.log = (...a: unknown[]) => void out.push(a.join(' '));
  console.error = (...a: unknown[]) => void err.push(a.join(' '));
  try {
    const result = await fn();
    return { out: out.join('\n'), err: err.join('\n'), result };
  } catch (e) {
    return { out: out.join('\n'), err: err.join('\n'), error: e };
  } finally {
    console.log = log;
    console.error = error;
  }
}

test('tbt campaign terminate: the campaign and its probe child end with the reason, no resume claimed', async () => {
  hanging.add('cli-term');
  const handle = await startCampaign('cli-term');
  const probe = env.client.workflow.getHandle('cli-term/probe');
  await until('the probe child', async () => ((await probe.describe()).status.name === 'RUNNING' ? true : undefined));
  const run = await captured(() => campaign(['terminate', 'cli-term', '--reason', 'operator: wrong model']));
  hanging.delete('cli-term');
  assert.equal(run.error, undefined, String(run.error));
  assert.equal(run.result, 0, run.err);
  assert.equal((await handle.describe()).status.name, 'TERMINATED');
  const ended = await handle.result().then(
    () => undefined,
    (e: unknown) => e,
  );
  assert.ok(ended instanceof WorkflowFailedError && ended.message === 'operator: wrong model', String(ended));
  // The child is started with the default parent close policy (TERMINATE): it ends with the campaign.
  assert.equal(
    await until('the probe ended', async () => {
      const s = (await probe.describe()).status.name;
      return s === 'RUNNING' ? undefined : s;
    }),
    'TERMINATED',
  );
  assert.match(run.out, /terminated campaign cli-term \(run [\w-]+\): operator: wrong model/);
  assert.match(run.out, /cli-term\/probe \(probeWorkflow\): terminated with it/);
  assert.match(run.out, /cannot be resumed yet/);
  // A second terminate says there is nothing to terminate (exit 1), naming the status.
  const again = await captured(() => campaign(['terminate', 'cli-term']));
  assert.equal(again.result, 1);
  assert.match(again.err, /cli-term is not running \(TERMINATED\): nothing to terminate/);
});

test('tbt campaign follow of a campaign failed on bad input: the field, the class, what to do next', async () => {
  const handle = await startCampaign('bad-follow');
  await handle.result().catch(() => undefined);
  const run = await captured(() => campaign(['follow', 'bad-follow']));
  const message = (run.error as Error | undefined)?.message ?? '';
  assert.match(message, /^campaign bad-follow failed: campaign\.yaml: field exclude_uids: uid list has a blank/);
  assert.match(message, /class: bad input \(BadInputError\)/);
  assert.match(message, /activity ingestCandidates/);
  assert.match(message, /next: fix the file and field/);
  assert.doesNotMatch(message, /^Workflow execution failed$/m);
});

test('tbt eval run that fails: the explained failure, with the same command line to run again', async () => {
  const args = ['--config', 'config/local.yaml', '--campaign', 'cli-eval'];
  const run = await captured(() => runEvaluation(args));
  const message = (run.error as Error | undefined)?.message ?? '';
  assert.match(message, /^evaluation cli-eval\/eval-run-\d+ failed: campaign cli-eval has no selected pool/);
  assert.match(message, /class: bad input \(BadInputError\)/);
  assert.match(message, /`tbt eval run --config config\/local\.yaml --campaign cli-eval`/);
});
