import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { batchRow, batchRowJsonSchema, batchRowSchema, batchRowSchemaFile } from '../../learner-control/batch-row.ts';
import { repoRoot } from '../../config/environment.ts';

// The batch row has one schema: the zod one here, whose JSON Schema the learner's tests read from the committed file.

const committed = JSON.parse(fs.readFileSync(path.join(repoRoot, batchRowSchemaFile), 'utf8')) as object;
const validCommitted = new Ajv2020({ strict: false }).compile(committed);

const trajectory = { tokenIds: [5, 6, 7, 8], lossMask: [0, 0, 1, 1], logprobs: [0, 0, -0.5, -1.25] };
const row = batchRow({ episodeId: 'ep-1', advantage: -0.75 }, trajectory);

test('the committed JSON Schema is the one the zod schema generates', () => {
  assert.deepEqual(
    committed,
    batchRowJsonSchema(),
    `${batchRowSchemaFile} is stale; rewrite it with: node --import tsx -e "import('./learner-control/batch-row.ts')` +
      `.then((m) => require('fs').writeFileSync(m.batchRowSchemaFile, JSON.stringify(m.batchRowJsonSchema(), ` +
      `null, 2) + '\\n'))"`,
  );
});

test('a row built from a trajectory is the line batch files hold, valid under both schemas', () => {
  assert.equal(
    JSON.stringify(row),
    '{"trajectory_id":"ep-1","input_ids":[5,6,7,8],"loss_mask":[0,0,1,1],"old_logprobs":[0,0,-0.5,-1.25],' +
      '"advantage":-0.75}',
  );
  assert.ok(batchRowSchema.safeParse(row).success);
  assert.ok(validCommitted(JSON.parse(JSON.stringify(row))), JSON.stringify(validCommitted.errors));
  const { old_logprobs: _old, ...withoutOld } = row;
  assert.ok(validCommitted({ ...withoutOld, group_id: 'g-1' }), 'old_logprobs optional, metadata allowed');
});

test('a row missing a required field, or with a mask item other than 0 or 1, is rejected', () => {
  for (const field of ['trajectory_id', 'input_ids', 'loss_mask', 'advantage']) {
    const { [field]: _dropped, ...rest } = row;
    assert.ok(!batchRowSchema.safeParse(rest).success, field);
    assert.ok(!validCommitted(rest), field);
  }
  assert.ok(!validCommitted({ ...row, loss_mask: [0, 2, 1, 1] }));
  assert.ok(!batchRowSchema.safeParse({ ...row, advantage: Number.NaN }).success);
});
