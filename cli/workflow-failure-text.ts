import { WorkflowFailedError } from '@temporalio/client';
import {
  ActivityFailure,
  ApplicationFailure,
  CancelledFailure,
  ChildWorkflowFailure,
  ServerFailure,
  TerminatedFailure,
  TimeoutFailure,
} from '@temporalio/common';
import { errorClasses, isBadInputType } from '../core/errors.ts';
import { coverageGateFailureType } from '../workflows/evaluation-workflow.ts';
import { noWorkerPollingType } from '../workflows/missing-poller.ts';
import { stepLostFailureType } from '../workflows/training-step-workflow.ts';

/**
 * What a command that waited on a workflow prints when the workflow did not complete: the cause (the message of
 * the failure that decided it, and the innermost one beneath it), its class, the workflow id, and what to do
 * next. Every waiting command (`tbt train --wait`, `campaign follow`, `demo`, `eval run`) goes through
 * `explainedWorkflowFailure`, so none prints the SDK's bare "Workflow execution failed".
 */

export interface WaitedWorkflow {
  /** What the command waited on: decides what "next" says. */
  kind: 'campaign' | 'evaluation';
  workflowId: string;
  /** The command line that starts it again (`tbt eval run ...`, `tbt train --config FILE`). */
  again?: string;
  /** The workflow's page in the Temporal UI. */
  uiUrl?: string;
}

/** The failure classes of core/errors.ts, plus how Temporal itself ends a workflow. */
export type FailureClass =
  'bad input' | 'infrastructure' | 'no worker polling' | 'cancelled' | 'terminated' | 'timed out' | 'unclassified';

export interface FailureExplanation {
  failureClass: FailureClass;
  /** The failure type: an error class name (core/errors.ts), a workflow's own type, or the timeout kind. */
  type: string;
  /** The message of the failure that decided the class. */
  message: string;
  /** The innermost cause's message, when it says more than `message`. */
  innermost?: string;
  /** Child workflows and activities between the waited workflow and the failure, outermost first. */
  where: string[];
  /** The queue nobody polls (class 'no worker polling', when the failure names it). */
  taskQueue?: string;
}

/**
 * Failure types the workflows raise on purpose when infrastructure, not the input, is at fault: the evaluation's
 * coverage gate and a lost training step.
 */
const infrastructureTypes = new Set<string>([
  ...errorClasses.filter((c) => c.retryable).map((c) => c.type),
  coverageGateFailureType,
  stepLostFailureType,
]);

/** The error and its causes, outermost first (a cycle or a very deep chain is cut). */
function causeChain(err: unknown): Error[] {
  const chain: Error[] = [];
  for (let e: unknown = err; e instanceof Error && chain.length < 20 && !chain.includes(e); e = e.cause) chain.push(e);
  return chain;
}

function place(e: Error): string | undefined {
  if (e instanceof ChildWorkflowFailure) return `child workflow ${e.workflowType} ${e.execution.workflowId}`;
  if (e instanceof ActivityFailure)
    return `activity ${e.activityType}${e.retryState ? ` (retry state ${e.retryState})` : ''}`;
  return undefined;
}

/** The first failure along the chain that decides the class, with that class. */
function decide(chain: Error[]): { failure: Error | undefined; failureClass: FailureClass; type: string } {
  for (const [i, e] of chain.entries()) {
    if (e instanceof ApplicationFailure && e.type) {
      if (isBadInputType(e.type)) return { failure: e, failureClass: 'bad input', type: e.type };
      if (e.type === noWorkerPollingType) return { failure: e, failureClass: 'no worker polling', type: e.type };
      if (infrastructureTypes.has(e.type)) return { failure: e, failureClass: 'infrastructure', type: e.type };
    }
    if (e instanceof TimeoutFailure) {
      const type = `${e.timeoutType ?? 'unknown'} timeout`;
      // Right under the workflow (i === 1): the workflow's own run or execution timeout.
      if (i === 1 && chain[0] instanceof WorkflowFailedError) return { failure: e, failureClass: 'timed out', type };
      if (e.timeoutType === 'SCHEDULE_TO_START') return { failure: e, failureClass: 'no worker polling', type };
      return { failure: e, failureClass: 'infrastructure', type };
    }
    if (e instanceof TerminatedFailure) return { failure: e, failureClass: 'terminated', type: 'terminated' };
    if (e instanceof CancelledFailure) return { failure: e, failureClass: 'cancelled', type: 'cancelled' };
    if (e instanceof ServerFailure) return { failure: e, failureClass: 'infrastructure', type: 'ServerFailure' };
  }
  const wrappers = (e: Error) =>
    e instanceof WorkflowFailedError || e instanceof ChildWorkflowFailure || e instanceof ActivityFailure;
  const first = chain.find((e) => !wrappers(e));
  const type = first instanceof ApplicationFailure ? (first.type ?? 'Error') : (first?.name ?? 'none recorded');
  return { failure: first, failureClass: 'unclassified', type };
}

export function explainWorkflowFailure(err: unknown): FailureExplanation {
  const chain = causeChain(err);
  const { failure, failureClass, type } = decide(chain);
  const innermost = chain.at(-1);
  const message = failure?.message || 'the workflow recorded no cause';
  const explanation: FailureExplanation = {
    failureClass,
    type,
    message,
    where: chain.map(place).filter((p): p is string => p !== undefined),
  };
  if (innermost && innermost !== failure && innermost.message && !message.includes(innermost.message))
    explanation.innermost = innermost.message;
  if (failureClass === 'no worker polling') {
    const named = /task queue "([^"]+)"/.exec(message)?.[1];
    if (named) explanation.taskQueue = named;
  }
  return explanation;
}

/**
 * How to start the work again, as true today: what is kept and what is not. The one place to change when a
 * failed or terminated campaign becomes resumable (issue 21); `tbt campaign terminate` prints it too.
 */
export function startAgainText(waited: Pick<WaitedWorkflow, 'kind' | 'again'>): string {
  if (waited.kind === 'evaluation')
    return (
      `run the same command again${waited.again ? ` (\`${waited.again}\`)` : ''}: it starts a new evaluation, ` +
      "whose label carries its run id, so this one's finished episodes are not reused"
    );
  // Resume today continues only a paused campaign whose workflow still runs (docs/operations.md).
  return (
    'a campaign that ended this way cannot be resumed yet (`tbt campaign resume` continues only a paused campaign ' +
    `that is still running); \`${waited.again ?? 'tbt train --config FILE'}\` starts a new campaign at ingest ` +
    "(this one's recorded steps, checkpoints and episodes stay where they are)"
  );
}

function nextStep(e: FailureExplanation, waited: WaitedWorkflow): string {
  const again = startAgainText(waited);
  switch (e.failureClass) {
    case 'bad input':
      return `fix the file and field the message names (bad input is never retried), then ${again}`;
    case 'infrastructure':
      return (
        'bring back what the message names (a policy, judge or user-simulator endpoint, a worker, Postgres, disk ' +
        `space); it had already been retried and re-run within its limits. Then ${again}`
      );
    case 'no worker polling': {
      const queue = e.taskQueue;
      const host = queue ? /-gpu-(.+)$/.exec(queue)?.[1] : undefined;
      return (
        `start a worker that polls ${queue ? `task queue "${queue}"` : 'that task queue'}: \`tbt workers up\` on ` +
        'this host' +
        (host
          ? `, or on GPU host ${host}: TBT_GPU_HOST=${host} docker compose -f docker/compose.yaml --profile gpu ` +
            'up -d gpu-worker'
          : '') +
        ` (or fix the queue name: learner.gpu_workers in the campaign config). Then ${again}`
      );
    }
    case 'terminated':
      return `nothing to fix unless the reason says so; ${again}`;
    case 'cancelled':
      return `it was cancelled on request, nothing failed; ${again}`;
    case 'timed out':
      return `it ran past its time limit (work waits on a queue without a worker: \`tbt workers status\`); ${again}`;
    case 'unclassified':
      return (
        'this error has no failure class (core/errors.ts): most likely a bug. Report it with the workflow id and ' +
        `the failure from the Temporal UI (TBT_DEBUG=1 prints the client's stack); ${again}`
      );
  }
}

function headline(e: FailureExplanation, waited: WaitedWorkflow): string {
  const subject = `${waited.kind} ${waited.workflowId}`;
  if (e.failureClass === 'terminated') return `${subject} was terminated: ${e.message}`;
  if (e.failureClass === 'cancelled') return `${subject} was cancelled`;
  if (e.failureClass === 'timed out') return `${subject} timed out: ${e.message}`;
  const activity =
    e.where
      .filter((w) => w.startsWith('activity '))
      .at(-1)
      ?.split(' ')[1] ?? 'an activity';
  if (e.failureClass === 'no worker polling' && !e.taskQueue)
    return `${subject} failed: no worker took activity ${activity} from its task queue in time (${e.message})`;
  if (e.failureClass === 'infrastructure' && e.type.endsWith(' timeout'))
    return `${subject} failed: activity ${activity} hit its ${e.type}: its worker died or hung (${e.message})`;
  return `${subject} failed: ${e.message}`;
}

/** The lines a command prints for a workflow that did not complete. */
export function workflowFailureText(err: unknown, waited: WaitedWorkflow): string {
  const e = explainWorkflowFailure(err);
  return [
    headline(e, waited),
    ...(e.innermost ? [`  cause: ${e.innermost}`] : []),
    `  class: ${e.failureClass} (${e.type})`,
    ...(e.where.length ? [`  where: ${e.where.join(' > ')}`] : []),
    `  workflow: ${waited.workflowId}${waited.uiUrl ? ` (${waited.uiUrl})` : ''}`,
    `  next: ${nextStep(e, waited)}`,
  ].join('\n');
}

/** A workflow failure explained for the user: tbt prints its message (the text above) and exits 1. */
export class ExplainedWorkflowFailure extends Error {
  override readonly name = 'ExplainedWorkflowFailure';
  readonly explanation: FailureExplanation;
  constructor(err: WorkflowFailedError, waited: WaitedWorkflow) {
    super(workflowFailureText(err, waited), { cause: err });
    this.explanation = explainWorkflowFailure(err);
  }
}

/** What the promise resolves to; a workflow failure is rethrown explained, anything else as it is. */
export async function explainedWorkflowFailure<T>(promise: Promise<T>, waited: WaitedWorkflow): Promise<T> {
  try {
    return await promise;
  } catch (err) {
    if (err instanceof WorkflowFailedError) throw new ExplainedWorkflowFailure(err, waited);
    throw err;
  }
}
