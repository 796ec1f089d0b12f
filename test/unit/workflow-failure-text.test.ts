import assert from 'node:assert/strict';
import { test } from 'node:test';
import { WorkflowFailedError } from '@temporalio/client';
import {
  ActivityFailure,
  ApplicationFailure,
  CancelledFailure,
  ChildWorkflowFailure,
  RetryState,
  TerminatedFailure,
  TimeoutFailure,
  TimeoutType,
} from '@temporalio/common';
import { toTemporalFailure } from '../../activities/temporal-failure.ts';
import { BadInputError, InfrastructureError } from '../../core/errors.ts';
import { explainMissingPoller } from '../../workflows/missing-poller.ts';
import { stepLostFailureType } from '../../workflows/training-step-workflow.ts';
import { explainWorkflowFailure, workflowFailureText, type WaitedWorkflow } from '../../cli/workflow-failure-text.ts';
import { infrastructureCause } from '../../workflows/failure-class.ts';

/**
 * What a CLI command that waited on a workflow prints when it failed (cli/workflow-failure-text.ts), for each
 * failure class, from failure objects built as the SDK hands them to the client: never a bare "execution failed".
 */

const campaign: WaitedWorkflow = { kind: 'campaign', workflowId: 'local-20250101-120000' };
const evaluation: WaitedWorkflow = {
  kind: 'evaluation',
  workflowId: 'local-eval/eval-run-1700000000000',
  again: 'tbt eval run --config config/local.yaml',
};

function failed(cause: Error, message = 'Workflow execution failed'): WorkflowFailedError {
  return new WorkflowFailedError(message, cause, RetryState.NON_RETRYABLE_FAILURE);
}

function activity(type: string, cause: Error, retry: RetryState = RetryState.MAXIMUM_ATTEMPTS_REACHED) {
  return new ActivityFailure('Activity task failed', type, '7', retry, 'worker@host', cause);
}

function child(workflowType: string, workflowId: string, cause: Error): ChildWorkflowFailure {
  const execution = { workflowId, runId: 'r1' };
  return new ChildWorkflowFailure('default', execution, workflowType, RetryState.NON_RETRYABLE_FAILURE, cause);
}

/** The failure our activities raise for one of our error classes (the one mapping, activities/temporal-failure.ts). */
function mapped(err: Error): Error {
  return toTemporalFailure(err) as Error;
}

test('an evaluation whose policy endpoint was down: infrastructure, the keys named, run again (it resumes)', () => {
  const gate = ApplicationFailure.nonRetryable(
    'coverage gate failed for evaluation run-step0-abc: 12 of 1014 keys still end in infrastructure errors after ' +
      '3 re-runs (e.g. t1#0: episode activity failed after its retries: connect ECONNREFUSED 127.0.0.1:8000)',
    'CoverageGate',
  );
  const err = failed(child('evaluationWorkflow', 'local-eval/eval-run-step0-abc', gate));
  const e = explainWorkflowFailure(err);
  assert.equal(e.failureClass, 'infrastructure');
  assert.equal(e.type, 'CoverageGate');
  const text = workflowFailureText(err, evaluation);
  assert.doesNotMatch(text.split('\n')[0]!, /^Workflow execution failed$/);
  assert.match(text, /^evaluation local-eval\/eval-run-1700000000000 failed: coverage gate failed/);
  assert.match(text, /ECONNREFUSED 127\.0\.0\.1:8000/);
  assert.match(text, /child workflow evaluationWorkflow local-eval\/eval-run-step0-abc/);
  assert.match(text, /class: +infrastructure \(CoverageGate\)/);
  // `tbt eval run` again resumes the evaluation: its label is the step and what is evaluated, not the run.
  assert.match(text, /tbt eval run --config config\/local\.yaml/);
  assert.match(text, /it resumes this evaluation .* finished episodes are reused/);
});

test('bad input from an activity: the message that names the field, not retried, fix it and start again', () => {
  const bad = new BadInputError('config/local.yaml: field suite: tasks/nope is not a task suite folder');
  const err = failed(activity('ingestCandidates', mapped(bad), RetryState.NON_RETRYABLE_FAILURE));
  const e = explainWorkflowFailure(err);
  assert.equal(e.failureClass, 'bad input');
  assert.equal(e.type, 'BadInputError');
  const text = workflowFailureText(err, campaign);
  assert.match(text, /^campaign local-20250101-120000 failed: config\/local\.yaml: field suite: tasks\/nope/);
  assert.match(text, /activity ingestCandidates/);
  assert.match(text, /class: +bad input \(BadInputError\)/);
  assert.match(text, /fix the (file and )?field/i);
  // A failed campaign resumes from its last committed step; a changed config needs a new campaign.
  assert.match(text, /`tbt campaign resume local-20250101-120000` starts it again from its last committed/);
  assert.match(text, /a changed campaign config needs `tbt train --config/);
});

test('an infrastructure error after its retries: the innermost cause is printed with the class', () => {
  const root = new Error('connect ECONNREFUSED 127.0.0.1:54329');
  const infra = new InfrastructureError('control database unreachable', { cause: root });
  const err = failed(
    child('trainingStepWorkflow', 'local-20250101-120000/step-3', activity('recordStep', mapped(infra))),
  );
  const e = explainWorkflowFailure(err);
  assert.equal(e.failureClass, 'infrastructure');
  assert.equal(e.type, 'InfrastructureError');
  const text = workflowFailureText(err, campaign);
  assert.match(text, /failed: control database unreachable/);
  assert.match(text, /connect ECONNREFUSED 127\.0\.0\.1:54329/);
  assert.match(text, /trainingStepWorkflow local-20250101-120000\/step-3 > activity recordStep/);
  assert.match(text, /MAXIMUM_ATTEMPTS_REACHED/);
});

test('no worker polls a queue (explained by the workflow): the queue named, with the command that starts one', () => {
  const timeout = new TimeoutFailure('activity ScheduleToStart timeout', undefined, 'SCHEDULE_TO_START');
  const explained = explainMissingPoller(activity('trainStep', timeout), 'tbt-gpu-node7', 'trainStep') as Error;
  const err = failed(child('trainingStepWorkflow', 'c/step-1', explained));
  const e = explainWorkflowFailure(err);
  assert.equal(e.failureClass, 'no worker polling');
  assert.equal(e.taskQueue, 'tbt-gpu-node7');
  const text = workflowFailureText(err, campaign);
  assert.match(text, /no worker polls task queue "tbt-gpu-node7"/);
  assert.match(text, /tbt workers up/);
  assert.match(text, /TBT_GPU_HOST=node7/);
});

test('a bare schedule-to-start timeout still says no worker polls the queue, naming the activity', () => {
  const timeout = new TimeoutFailure('activity ScheduleToStart timeout', undefined, 'SCHEDULE_TO_START');
  const err = failed(activity('latestCheckpoint', timeout, RetryState.TIMEOUT));
  const e = explainWorkflowFailure(err);
  assert.equal(e.failureClass, 'no worker polling');
  assert.match(workflowFailureText(err, evaluation), /no worker took activity latestCheckpoint/);
});

test('a heartbeat timeout: infrastructure (a worker died or hung)', () => {
  const timeout = new TimeoutFailure('activity Heartbeat timeout', undefined, 'HEARTBEAT');
  const err = failed(activity('trainStep', timeout));
  const e = explainWorkflowFailure(err);
  assert.equal(e.failureClass, 'infrastructure');
  assert.equal(e.type, 'HEARTBEAT timeout');
  assert.match(workflowFailureText(err, campaign), /its worker died or hung/);
});

test('a training step lost to infrastructure (if it ever escapes): infrastructure', () => {
  const lost = ApplicationFailure.nonRetryable('step 2: every group was lost', stepLostFailureType);
  assert.equal(
    explainWorkflowFailure(failed(child('trainingStepWorkflow', 'c/step-2', lost))).failureClass,
    'infrastructure',
  );
});

test('terminated: the reason, and how to resume it from its last committed step', () => {
  const reason = 'operator: wrong model';
  const err = failed(new TerminatedFailure(reason), reason);
  const e = explainWorkflowFailure(err);
  assert.equal(e.failureClass, 'terminated');
  const text = workflowFailureText(err, campaign);
  assert.match(text, /^campaign local-20250101-120000 was terminated: operator: wrong model/);
  assert.match(text, /tbt campaign resume local-20250101-120000/);
});

test('cancelled, and a workflow that ran past its run timeout', () => {
  const cancelled = failed(new CancelledFailure('Workflow canceled'), 'Workflow execution cancelled');
  assert.equal(explainWorkflowFailure(cancelled).failureClass, 'cancelled');
  assert.match(workflowFailureText(cancelled, evaluation), /^evaluation .* was cancelled/);
  const timedOut = failed(
    new TimeoutFailure('Workflow execution timed out', undefined, 'START_TO_CLOSE'),
    'Workflow execution timed out',
  );
  assert.equal(explainWorkflowFailure(timedOut).failureClass, 'timed out');
  assert.match(workflowFailureText(timedOut, evaluation), /time limit/);
});

test('an error of no failure class (a bug): says so, with the type and where to report it', () => {
  const bug = ApplicationFailure.create({
    message: "Cannot read properties of undefined (reading 'step')",
    type: 'TypeError',
  });
  const err = failed(activity('writeReport', bug));
  const e = explainWorkflowFailure(err);
  assert.equal(e.failureClass, 'unclassified');
  assert.equal(e.type, 'TypeError');
  const text = workflowFailureText(err, campaign);
  assert.match(text, /Cannot read properties of undefined/);
  assert.match(text, /bug/);
  assert.match(text, /TBT_DEBUG=1/);
});

test('every text names the workflow id and a next step, and no line is the bare SDK message', () => {
  const cases = [
    failed(new TerminatedFailure('x'), 'x'),
    failed(activity('a', mapped(new InfrastructureError('disk full')))),
    failed(new Error('no cause recorded')),
    new WorkflowFailedError('Workflow execution failed', undefined, RetryState.NON_RETRYABLE_FAILURE),
  ];
  for (const err of cases)
    for (const waited of [campaign, evaluation]) {
      const text = workflowFailureText(err, waited);
      assert.ok(text.includes(waited.workflowId), text);
      assert.match(text, /^ {2}next: /m, text);
      assert.ok(!text.split('\n').some((l) => l.trim() === 'Workflow execution failed'), text);
    }
});

test('what pauses a campaign: infrastructure, no poller, a terminated child; never bad input or a bug', () => {
  const gate = ApplicationFailure.nonRetryable(
    'coverage gate failed for evaluation after: 3 of 8 keys',
    'CoverageGate',
  );
  const evaluationChild = child('evaluationWorkflow', 'c/eval-after', gate);
  assert.match(infrastructureCause(evaluationChild) ?? '', /^coverage gate failed .* \(infrastructure, CoverageGate; /);
  assert.match(infrastructureCause(evaluationChild) ?? '', /child workflow evaluationWorkflow c\/eval-after\)$/);
  const infra = activity('recordStep', mapped(new InfrastructureError('control database unreachable')));
  assert.match(infrastructureCause(infra) ?? '', /^control database unreachable \(infrastructure, InfrastructureError/);
  const noPoller = explainMissingPoller(
    activity('startLearner', new TimeoutFailure('timed out', undefined, TimeoutType.SCHEDULE_TO_START)),
    'tbt-gpu-host1',
    'startLearner',
  );
  assert.match(infrastructureCause(noPoller) ?? '', /no worker polls task queue "tbt-gpu-host1".*no worker polling/);
  assert.match(infrastructureCause(child('trainingStepWorkflow', 'c/step-2', new TerminatedFailure('x'))) ?? '', /x/);
  // Bad input, a cancellation of the campaign itself, and an error with no class (a bug) end the campaign.
  const bad = activity('ingestCandidates', mapped(new BadInputError('suite.yaml: field uid')));
  assert.equal(infrastructureCause(bad), undefined);
  assert.equal(infrastructureCause(new CancelledFailure('cancelled')), undefined);
  assert.equal(
    infrastructureCause(activity('writeReport', ApplicationFailure.create({ type: 'TypeError' }))),
    undefined,
  );
});
