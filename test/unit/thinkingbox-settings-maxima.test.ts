import assert from 'node:assert/strict';
import { test } from 'node:test';
import { thinkingboxSettingsSchema } from '../../config/episode-config.ts';

/** `episode.thinkingbox` numbers that a config could set high enough to exhaust a worker (second review, 7). */

test('second review, finding 7 (maxima): warm_processes and test_timeout_ms have a maximum', () => {
  const parse = (v: Record<string, number>) => thinkingboxSettingsSchema.safeParse(v);
  assert.equal(parse({ warm_processes: 16 }).success, true);
  assert.equal(parse({ test_timeout_ms: 900_000 }).success, true);
  for (const [field, value] of [
    ['warm_processes', 17],
    ['warm_processes', 1_000_000],
    ['test_timeout_ms', 900_001],
    ['test_timeout_ms', 2 ** 31],
  ] as const) {
    const result = parse({ [field]: value });
    assert.equal(result.success, false, `${field}=${value} was accepted`);
    assert.deepEqual(result.error!.issues[0]!.path, [field]);
    assert.match(result.error!.issues[0]!.message, /<=/);
  }
});
