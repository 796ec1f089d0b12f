import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { repoRoot } from '../../config/environment.ts';
import { judgeMessages } from '../../rollout/judge-client.ts';

/**
 * Rubric questions are asked by two judges: the native fast path (rollout/judge-client.ts) and the Python
 * `thinkingbox.common.Judge` test code calls. Both must send the reference's exact yes/no prompt, or the same
 * question is graded differently depending on the path it took.
 */
test('the native judge sends the same system and user message as the Python shim judge', () => {
  const python = fs.readFileSync(path.join(repoRoot, '.tools', 'thinkingbox-venv'), 'utf8').trim();
  const message = 'Booked <b>two</b> seats & a meal.\nDone.';
  const question = 'Did the assistant book two seats?';
  const script = [
    'import json, sys',
    'from thinkingbox.common.judge import SYSTEM_TEXT_YESNO, USER_TEXT_YESNO, safe_tag_encode',
    'm, q = sys.argv[1], sys.argv[2]',
    'print(json.dumps([SYSTEM_TEXT_YESNO, USER_TEXT_YESNO.format(message=safe_tag_encode(m), question=q)]))',
  ].join('\n');
  const out = execFileSync(path.join(python, 'bin', 'python'), ['-c', script, message, question], {
    env: { ...process.env, PYTHONPATH: path.join(repoRoot, 'thinkingbox', 'shim') },
    encoding: 'utf8',
  });
  const [system, user] = JSON.parse(out) as [string, string];
  assert.deepEqual(
    judgeMessages(question, message).map((m) => m.content),
    [system, user],
  );
  assert.ok(system.includes('\nA message will be presented'), 'one sentence a line, as the reference');
  assert.ok(user.includes('&lt;b&gt;two&lt;/b&gt; seats & a meal'), 'tags encoded, & left alone');
});
