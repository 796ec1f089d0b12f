import assert from 'node:assert/strict';
import { test } from 'node:test';
import { isInfrastructureSqlState } from '../../core/errors.ts';

test(
  "finding 6: a statement timeout (57014) is the statement's fault; shutdowns and connection loss are " +
    'infrastructure',
  () => {
    for (const code of ['57014', '42P01', '23505', '22P02', '54001', '40001'])
      assert.equal(isInfrastructureSqlState(code), false, code);
    for (const code of [undefined, '08006', '53300', '57P01', '57P03', '58030', 'XX000'])
      assert.equal(isInfrastructureSqlState(code), true, String(code));
  },
);
