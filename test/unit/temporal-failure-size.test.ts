import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ApplicationFailure, DefaultFailureConverter, defaultPayloadConverter } from '@temporalio/common';
import { failureMessageLimit, toTemporalFailure } from '../../activities/temporal-failure.ts';
import { InfrastructureError } from '../../core/errors.ts';
import { LearnerHttpError } from '../../learner-control/learner-client.ts';

// Temporal keeps a retried activity's last failure only up to 4 KB (limit.mutableStateActivityFailureSize.error).
const TEMPORAL_FAILURE_LIMIT = 4096;

/** What a learner answered for a save that failed on every rank: DCP's repr with each rank's traceback. */
function multiRankTraceback(ranks: number): string {
  const frames = Array.from(
    { length: 30 },
    (_, i) => `  File "/opt/tbt/torch/distributed/checkpoint/x${i}.py", line ${i}`,
  );
  const perRank = Array.from({ length: ranks }, (_, r) => [
    `Traceback (most recent call last): (RANK ${r})`,
    ...frames,
  ]);
  const last = 'RuntimeError: [enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598';
  return `CheckpointException ranks:dict_keys([...])\n${perRank.flat().join('\n')}\n${last}`;
}

function encodedSize(err: unknown): number {
  const failure = new DefaultFailureConverter().errorToFailure(err, defaultPayloadConverter);
  return Buffer.byteLength(JSON.stringify(failure));
}

test('a learner 500 with 24 ranks of traceback becomes a failure Temporal keeps, with its last line', () => {
  const message = `learner /train_step: HTTP 500: ${multiRankTraceback(24)}`;
  assert.ok(message.length > 40_000, 'the unclipped message alone is ten times the limit');
  const mapped = toTemporalFailure(new LearnerHttpError(500, 'internal', message));
  assert.ok(mapped instanceof ApplicationFailure);
  assert.equal(mapped.type, InfrastructureError.name, 'still an infrastructure failure (retried)');
  assert.ok(mapped.message.length <= failureMessageLimit + 20, `${mapped.message.length}`);
  assert.match(mapped.message, /^HTTP 500: learner \/train_step: HTTP 500: CheckpointException/);
  assert.match(mapped.message, /characters cut .*unexpected pos 704 vs 598$/s);
  const size = encodedSize(mapped);
  assert.ok(size < TEMPORAL_FAILURE_LIMIT, `failure of ${size} bytes`);
});

test('a deep cause chain of long messages stays within the limit', () => {
  let err: Error = new Error('x'.repeat(10_000));
  for (let i = 0; i < 6; i++) err = new InfrastructureError(`level ${i}: ${'y'.repeat(10_000)}`, { cause: err });
  const size = encodedSize(toTemporalFailure(err));
  assert.ok(size < TEMPORAL_FAILURE_LIMIT, `failure of ${size} bytes`);
});

test('a message within the limit passes unchanged', () => {
  const mapped = toTemporalFailure(new InfrastructureError('postgres: 57P03 the database system is starting up'));
  assert.ok(mapped instanceof ApplicationFailure);
  assert.equal(mapped.message, 'postgres: 57P03 the database system is starting up');
  assert.equal(mapped.nonRetryable, false);
});
