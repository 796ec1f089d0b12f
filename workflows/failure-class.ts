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
import { coverageGateFailureType } from './evaluation-workflow.ts';
import { noWorkerPollingType } from './missing-poller.ts';
import { stepLostFailureType } from './training-step-workflow.ts';

/**
 * The one mapping from a Temporal failure to its class, used by the campaign (which pauses on infrastructure and
 * fails only on bad input and bugs) and by the CLI (which explains a failed workflow). Pure: it only reads the
 * failure objects, so workflow code may call it.
 */

/** The failure classes of core/errors.ts, plus how Temporal itself ends work. 'timed out': the workflow's own. */
export type FailureClass =
  'bad input' | 'infrastructure' | 'no worker polling' | 'cancelled' | 'terminated' | 'timed out' | 'unclassified';

/**
 * Failure types the workflows raise on purpose when infrastructure, not the input, is at fault: the evaluation's
 * coverage gate and a lost training step, beside the retryable error classes.
 */
const infrastructureTypes = new Set<string>([
  ...errorClasses.filter((c) => c.retryable).map((c) => c.type),
  coverageGateFailureType,
  stepLostFailureType,
]);

/** The error and its causes, outermost first (a cycle or a very deep chain is cut). */
export function causeChain(err: unknown): Error[] {
  const chain: Error[] = [];
  for (let e: unknown = err; e instanceof Error && chain.length < 20 && !chain.includes(e); e = e.cause) chain.push(e);
  return chain;
}

/** The class one failure of a chain decides, or undefined when it only wraps its cause. */
export function failureClassOf(e: Error): { failureClass: FailureClass; type: string } | undefined {
  if (e instanceof ApplicationFailure && e.type) {
    if (isBadInputType(e.type)) return { failureClass: 'bad input', type: e.type };
    if (e.type === noWorkerPollingType) return { failureClass: 'no worker polling', type: e.type };
    if (infrastructureTypes.has(e.type)) return { failureClass: 'infrastructure', type: e.type };
  }
  if (e instanceof TimeoutFailure) {
    const type = `${e.timeoutType ?? 'unknown'} timeout`;
    if (e.timeoutType === 'SCHEDULE_TO_START') return { failureClass: 'no worker polling', type };
    return { failureClass: 'infrastructure', type };
  }
  if (e instanceof TerminatedFailure) return { failureClass: 'terminated', type: 'terminated' };
  if (e instanceof CancelledFailure) return { failureClass: 'cancelled', type: 'cancelled' };
  if (e instanceof ServerFailure) return { failureClass: 'infrastructure', type: 'ServerFailure' };
  return undefined;
}

/** Where along the chain a failure happened: a child workflow or an activity. */
export function failurePlace(e: Error): string | undefined {
  if (e instanceof ChildWorkflowFailure) return `child workflow ${e.workflowType} ${e.execution.workflowId}`;
  if (e instanceof ActivityFailure)
    return `activity ${e.activityType}${e.retryState ? ` (retry state ${e.retryState})` : ''}`;
  return undefined;
}

/**
 * Why a stage failed, when infrastructure is at fault (an endpoint, a worker, a queue without a poller, a child
 * terminated by hand): the message of the deciding failure and where it happened. Undefined for bad input, a
 * cancellation of the campaign itself and anything unclassified (a bug): those end the campaign.
 */
export function infrastructureCause(err: unknown): string | undefined {
  const chain = causeChain(err);
  for (const e of chain) {
    const decided = failureClassOf(e);
    if (!decided) continue;
    if (!['infrastructure', 'no worker polling', 'terminated'].includes(decided.failureClass)) return undefined;
    const where = chain.map(failurePlace).filter((p): p is string => p !== undefined);
    const message = e.message || decided.type;
    return `${message} (${decided.failureClass}, ${decided.type}${where.length ? `; ${where.join(' > ')}` : ''})`;
  }
  return undefined;
}
