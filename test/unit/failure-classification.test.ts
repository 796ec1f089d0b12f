import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ApplicationFailure } from '@temporalio/common';
import pg from 'pg';
import { toTemporalFailure } from '../../activities/temporal-failure.ts';
import { InfrastructureError } from '../../core/errors.ts';
import { LearnerHttpError } from '../../learner-control/learner-client.ts';

/**
 * Issue 40, classification: errors the machine, the database or the learner caused are infrastructure (retried,
 * then the work pauses with the cause), wherever they are met; a bug or a refusal stays what it is.
 */

function databaseError(code: string, message: string): pg.DatabaseError {
  const err = new pg.DatabaseError(message, message.length, 'error');
  err.code = code;
  err.severity = 'FATAL';
  return err;
}

function systemError(code: string, message: string): Error {
  return Object.assign(new Error(message), { code });
}

const infrastructure: [string, unknown][] = [
  ['Postgres shutting down (57P01)', databaseError('57P01', 'terminating connection due to administrator command')],
  ['Postgres in recovery (57P03)', databaseError('57P03', 'the database system is in recovery mode')],
  ['Postgres connection failure (08006)', databaseError('08006', 'connection failure')],
  ['Postgres too many connections (53300)', databaseError('53300', 'sorry, too many clients already')],
  ['pg without a code: connection terminated', new Error('Connection terminated unexpectedly')],
  ['pg without a code: connect timeout', new Error('timeout expired')],
  ['pg without a code: connection timeout', new Error('Connection terminated due to connection timeout')],
  ['a name that does not resolve while a container restarts', systemError('ENOTFOUND', 'getaddrinfo ENOTFOUND db')],
  ['the learner answering 500', new LearnerHttpError(500, 'fatal', 'learner /train_step: HTTP 500: step failed')],
  ['the learner answering 503', new LearnerHttpError(503, 'unknown', 'learner /export: HTTP 503: no message')],
  ['wrapped: a cause chain ending in 57P01', new Error('saving', { cause: databaseError('57P01', 'terminating') })],
  ['the Temporal client timing out its connect', new Error('Failed to connect before the deadline')],
];

for (const [what, err] of infrastructure)
  test(`classification: ${what} is an infrastructure error, retried`, () => {
    const failure = toTemporalFailure(err);
    assert.ok(failure instanceof ApplicationFailure, `not mapped: ${String(failure)}`);
    assert.equal(failure.type, InfrastructureError.name);
    assert.equal(failure.nonRetryable, false);
    assert.ok(failure.message.includes((err as Error).message), failure.message);
  });

const unchanged: [string, unknown][] = [
  ['a unique violation (23505): a bug', databaseError('23505', 'duplicate key value violates unique constraint')],
  ['a syntax error (42601): a bug', databaseError('42601', 'syntax error at or near "SELEC"')],
  ['a statement timeout (57014): the statement was too slow', databaseError('57014', 'canceling statement')],
  ['the learner refusing (409)', new LearnerHttpError(409, 'step_refused', 'learner /train_step: HTTP 409')],
  ['a plain bug', new TypeError("Cannot read properties of undefined (reading 'x')")],
];

for (const [what, err] of unchanged)
  test(`classification: ${what} is not made an infrastructure error`, () => {
    assert.equal(toTemporalFailure(err), err);
  });
