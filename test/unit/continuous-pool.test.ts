import assert from 'node:assert/strict';
import { test } from 'node:test';
import { continuousPoolMakespan } from '../../core/continuous-pool.ts';

test('continuous pool: each job takes the first free slot, in order', () => {
  assert.equal(continuousPoolMakespan([], 3), 0);
  assert.equal(continuousPoolMakespan([5], 3), 5);
  // Two slots: 4 | 1, then 2 goes after the 1 (free at 1), then 3 after the 2 (free at 3): ends at 6.
  assert.equal(continuousPoolMakespan([4, 1, 2, 3], 2), 6);
  // One slot is the sum; as many slots as jobs is the longest.
  assert.equal(continuousPoolMakespan([4, 1, 2, 3], 1), 10);
  assert.equal(continuousPoolMakespan([4, 1, 2, 3], 4), 4);
  assert.throws(() => continuousPoolMakespan([1], 0), /slots must be an integer >= 1/);
});
