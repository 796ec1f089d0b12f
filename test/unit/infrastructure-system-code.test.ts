import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ApplicationFailure } from '@temporalio/common';
import { toTemporalFailure } from '../../activities/temporal-failure.ts';
import { infrastructureSystemCode } from '../../core/errors.ts';

/** Which unwrapped errors count as infrastructure (core/errors.ts): by their code, anywhere along the causes. */

const coded = (message: string, code: string, cause?: unknown) =>
  Object.assign(new Error(message, cause === undefined ? undefined : { cause }), { code });

test('a full disk, a refused connection and an undici timeout are infrastructure, also as a cause', () => {
  assert.equal(infrastructureSystemCode(coded('write failed', 'ENOSPC')), 'ENOSPC');
  assert.equal(
    infrastructureSystemCode(new Error('fetch failed', { cause: coded('refused', 'ECONNREFUSED') })),
    'ECONNREFUSED',
  );
  assert.equal(infrastructureSystemCode(coded('headers', 'UND_ERR_HEADERS_TIMEOUT')), 'UND_ERR_HEADERS_TIMEOUT');
});

test('a missing file, bad permissions and plain errors are not', () => {
  assert.equal(infrastructureSystemCode(coded('no such file', 'ENOENT')), undefined);
  assert.equal(infrastructureSystemCode(coded('denied', 'EACCES')), undefined);
  assert.equal(infrastructureSystemCode(new TypeError('x is undefined')), undefined);
  assert.equal(infrastructureSystemCode('ECONNREFUSED'), undefined);
});

test('an activity failing with an unwrapped ENOSPC fails as a retryable InfrastructureError', () => {
  const failure = toTemporalFailure(coded('no space left on device, write', 'ENOSPC'));
  assert.ok(failure instanceof ApplicationFailure);
  assert.equal(failure.type, 'InfrastructureError');
  assert.equal(failure.nonRetryable, false);
  assert.match(failure.message, /^ENOSPC: no space left on device/);
  const bug = new TypeError('x is undefined');
  assert.equal(toTemporalFailure(bug), bug, 'a bug passes through unclassified');
});
