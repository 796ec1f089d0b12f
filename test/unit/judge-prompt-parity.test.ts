import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import type { JudgeMode } from '../../config/episode-config.ts';
import { repoRoot } from '../../config/environment.ts';
import { judgeFrom, judgeMessages } from '../../rollout/judge-client.ts';

/**
 * Rubric questions are asked by two judges: the native fast path (rollout/judge-client.ts) and the Python
 * `thinkingbox.common.Judge` test code calls. Both must send the reference's exact yes/no prompt of the judge mode,
 * with the same settings, and read the answer alike, or the same question is graded differently depending on the
 * path it took. The reference's own texts are a fixture taken from its judge.py (commit named in the fixture).
 */

const reference = JSON.parse(
  fs.readFileSync(path.join(repoRoot, 'thinkingbox', 'tests', 'fixtures', 'reference_judge_prompts.json'), 'utf8'),
) as { source: { commit: string }; modes: Record<JudgeMode | 'user', string>; prompts: Record<string, string> };
const modes: JudgeMode[] = ['legacy', 'motivation'];

/** What the Python shim prints for `script` (argv: the JSON-encoded `args`). */
function shim(script: string[], ...args: string[]): unknown {
  const python = fs.readFileSync(path.join(repoRoot, '.tools', 'thinkingbox-venv'), 'utf8').trim();
  const out = execFileSync(path.join(python, 'bin', 'python'), ['-c', script.join('\n'), ...args], {
    env: { ...process.env, PYTHONPATH: path.join(repoRoot, 'thinkingbox', 'shim') },
    encoding: 'utf8',
  });
  return JSON.parse(out);
}

const message = 'Booked <b>two</b> seats & a meal.\nDone.';
const question = 'Did the assistant book two seats?';

test('the native judge sends the same system and user message as the Python shim judge, in both modes', () => {
  const script = [
    'import json, sys',
    'from thinkingbox.common.judge import SYSTEM_TEXT_YESNO, SYSTEM_TEXT_YESNO_MOTIVATION, USER_TEXT_YESNO',
    'from thinkingbox.common.judge import safe_tag_encode',
    'm, q = sys.argv[1], sys.argv[2]',
    'user = USER_TEXT_YESNO.format(message=safe_tag_encode(m), question=q)',
    'print(json.dumps({"legacy": [SYSTEM_TEXT_YESNO, user], "motivation": [SYSTEM_TEXT_YESNO_MOTIVATION, user]}))',
  ];
  const python = shim(script, message, question) as Record<JudgeMode, [string, string]>;
  for (const mode of modes)
    assert.deepEqual(
      judgeMessages(question, message, mode).map((m) => m.content),
      python[mode],
      mode,
    );
  const [system, user] = python.legacy;
  assert.ok(system.includes('\nA message will be presented'), 'one sentence a line, as the reference');
  assert.ok(user.includes('&lt;b&gt;two&lt;/b&gt; seats & a meal'), 'tags encoded, & left alone');
  assert.deepEqual(
    judgeMessages(question, message).map((m) => m.content),
    python.legacy,
    'legacy when no mode is named',
  );
});

test("the native judge's prompts of both modes are the reference framework's byte for byte", () => {
  assert.equal(reference.source.commit.length, 40, 'the fixture names the commit it was taken from');
  const user = reference.prompts[reference.modes.user]!.replace(
    '{message}',
    'Booked &lt;b&gt;two&lt;/b&gt; seats & a meal.\nDone.',
  ).replace('{question}', question);
  for (const mode of modes) {
    const [system, sent] = judgeMessages(question, message, mode);
    assert.equal(system?.content, reference.prompts[reference.modes[mode]], `${mode} system prompt`);
    assert.equal(sent?.content, user, `${mode} user prompt`);
  }
  assert.notEqual(reference.prompts[reference.modes.legacy], reference.prompts[reference.modes.motivation]);
});

test('the native judge asks with the shim judge settings and reads each answer as it does, in both modes', async () => {
  const replies = [
    'Yes',
    'No.',
    'Yes, absolutely',
    '{"motivation": "Two seats are booked.", "answer": "Yes"}',
    '{"motivation": "Only one.", "answer": "No"}',
    '{\'motivation\': "m", \'answer\': "Yes"}',
    '{motivation: "m", answer: "yes."}',
    '{ answer : "Yes" }',
    '  {"answer": "Yes"}\n',
    '{"answer": "Yes"} and more',
    '{"motivation": "no answer given"}',
    '{"answer": true}',
    '["Yes"]',
  ];
  const script = [
    'import json, sys',
    'from thinkingbox.common.judge import Judge',
    'out = {}',
    'for mode in ("legacy", "motivation"):',
    '    for reply in json.loads(sys.argv[1]):',
    '        seen = []',
    '        def backend(messages, settings, reply=reply):',
    '            seen.append({k: v for k, v in settings.items() if k != "question"})',
    '            return reply',
    '        try:',
    '            yes = Judge(backend, judge_type=mode).text_yesno("m", "q?")',
    '        except Exception:',
    '            yes = "error"',
    '        out.setdefault(mode, []).append({"yes": yes, "settings": seen[0]})',
    'print(json.dumps(out))',
  ];
  const python = shim(script, JSON.stringify(replies)) as Record<JudgeMode, { yes: boolean | 'error' }[]>;
  for (const mode of modes) {
    const native = [];
    for (const reply of replies) {
      let settings: unknown;
      const judge = judgeFrom(async (_, s) => {
        settings = s;
        return { text: reply, usage: { input: 0, output: 0 } };
      }, mode);
      const yes = await judge.ask('q?', 'm').then(
        (v) => v.yes,
        () => 'error' as const,
      );
      native.push({ yes, settings });
    }
    assert.deepEqual(native, python[mode], mode);
  }
  assert.deepEqual(
    python.motivation.map((r) => r.yes),
    [false, false, false, true, false, true, true, true, true, false, 'error', 'error', 'error'],
    'the motivation judge: JSON only, keys repaired; no text answer is an error, not a grade',
  );
});
