import assert from 'node:assert/strict';
import { test } from 'node:test';
import { retryingSave } from '../../rollout/episode-store.ts';

test('finding 8: only the save is retried on a transient database failure; a data error is not retried', async () => {
  let calls = 0;
  const waits: number[] = [];
  const saved = await retryingSave(
    async () => {
      calls += 1;
      if (calls < 3)
        throw Object.assign(new Error('terminating connection due to administrator command'), { code: '57P01' });
      return true;
    },
    { firstDelayMs: 1, onWait: (n) => waits.push(n) },
  );
  assert.equal(saved, true);
  assert.equal(calls, 3);
  assert.deepEqual(waits, [1, 2]);

  calls = 0;
  const unsupported = Object.assign(new Error('unsupported Unicode escape sequence'), { code: '22P05' });
  await assert.rejects(
    retryingSave(
      async () => {
        calls += 1;
        throw unsupported;
      },
      { firstDelayMs: 1 },
    ),
    unsupported,
  );
  assert.equal(calls, 1);

  calls = 0;
  const refused = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), { code: 'ECONNREFUSED' });
  await assert.rejects(
    retryingSave(
      async () => {
        calls += 1;
        throw refused;
      },
      { attempts: 4, firstDelayMs: 1 },
    ),
    refused,
  );
  assert.equal(calls, 4);
});
