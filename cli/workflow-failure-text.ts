import { WorkflowFailedError } from '@temporalio/client';
import { ActivityFailure, ApplicationFailure, ChildWorkflowFailure, TimeoutFailure } from '@temporalio/common';
import { causeChain, failureClassOf, failurePlace, type FailureClass } from '../workflows/failure-class.ts';

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

export type { FailureClass };

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

/** The first failure along the chain that decides the class, with that class. */
function decide(chain: Error[]): { failure: Error | undefined; failureClass: FailureClass; type: string } {
  for (const [i, e] of chain.entries()) {
    const decided = failureClassOf(e);
    if (!decided) continue;
    // Right under the workflow (i === 1): the workflow's own run or execution timeout.
    if (e instanceof TimeoutFailure && i === 1 && chain[0] instanceof WorkflowFailedError)
      return { failure: e, failureClass: 'timed out', type: decided.type };
    return { failure: e, ...decided };
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
    where: chain.map(failurePlace).filter((p): p is string => p !== undefined),
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
 * How to start the work again: what is kept and what is not. `tbt campaign terminate` prints it too. A campaign
 * resumes from its last committed step (cli/commands/campaign-resume.ts).
 */
export function startAgainText(waited: Pick<WaitedWorkflow, 'kind' | 'again' | 'workflowId'>): string {
  if (waited.kind === 'evaluation')
    return (
      `run the same command again${waited.again ? ` (\`${waited.again}\`)` : ''}: it resumes this evaluation ` +
      '(its label is the step and what is evaluated), so finished episodes are reused and only the rest are played'
    );
  return (
    `\`tbt campaign resume ${waited.workflowId}\` starts it again from its last committed training step (the ` +
    "learner from that step's checkpoint, finished episodes reused; a changed campaign config needs " +
    `\`${waited.again ?? 'tbt train --config FILE'}\`, a new campaign)`
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
