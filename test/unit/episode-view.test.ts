import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { buildReportModel } from '../../core/report/build-report-model.ts';
import { renderEpisodePage } from '../../core/report/episode-page.ts';
import { chooseEpisodes, type EpisodeResultRef } from '../../core/report/episode-selection.ts';
import { renderEpisodeText } from '../../core/report/episode-text.ts';
import {
  episodePageName,
  episodeView,
  infrastructureClass,
  toolCallLine,
  type StoredEpisode,
} from '../../core/report/episode-view.ts';
import { parseEvalAggregate } from '../../core/report/parse-inputs.ts';
import { renderHtml } from '../../core/report/render-html.ts';
import { renderMarkdown } from '../../core/report/render-markdown.ts';
import type { ReportInput } from '../../core/report/report-model.ts';

/** The episode viewer's pure parts: the view model, its HTML page and text, the choice of pages, report links. */

const HOSTILE = '<script>alert("x")</script> & <img src=x onerror=alert(1)>';

function failedEpisode(): StoredEpisode {
  return {
    id: 'camp/eval-after/s0/tiny/todo/complete-2#1',
    taskUid: 'tiny/todo/complete-2',
    suite: 'tiny',
    scenario: 'todo',
    domain: 'todo',
    purpose: 'eval',
    campaign: 'camp',
    step: null,
    repetition: 1,
    status: 'agent_failure',
    policyModel: 'scripted',
    startedAt: '2026-12-02T08:00:00.000Z',
    finishedAt: '2026-12-02T08:00:01.000Z',
    record: {
      outcome: 'agent_failure',
      reward: 0,
      finishReason: 'done',
      cause: 'terminal state differs from the golden state',
      messages: [
        { role: 'system', content: 'You manage to-dos. SYSTEM-PROMPT-TEXT' },
        // A worked example before the query: an assistant message that is not an agent turn.
        { role: 'user', content: 'example question' },
        { role: 'assistant', content: 'EXAMPLE-ANSWER' },
        { role: 'user', content: `Mark to-do 2 as done. ${HOSTILE}` },
        { role: 'assistant', content: '<think>pick one</think><tool_call>...</tool_call>' },
        { role: 'tool', content: '{"id":3}' },
        { role: 'assistant', content: 'Could you confirm?' },
        { role: 'user', content: 'USER-REPLY yes' },
        { role: 'assistant', content: 'Done. <DONE>' },
      ],
      completions: [
        {
          turn: 0,
          raw: '<think>pick one</think><tool_call>...</tool_call>',
          finishReason: 'stop',
          interpretation: { reasoning: 'REASONING-TEXT pick one', text: '', toolCalls: [{ name: 'complete_todo' }] },
        },
        {
          turn: 1,
          raw: 'Could you confirm?',
          finishReason: 'stop',
          interpretation: { reasoning: '', text: 'Could you confirm?', toolCalls: [] },
        },
        {
          turn: 2,
          raw: 'Done. <DONE>',
          finishReason: 'stop',
          interpretation: { reasoning: '', text: 'Done. <DONE>', toolCalls: [] },
        },
      ],
      toolCalls: [
        { turn: 0, name: 'complete_todo', arguments: { note: HOSTILE, id: 3 }, result: HOSTILE, isError: false },
      ],
      grade: {
        stateMatches: false,
        resultHash: 'a'.repeat(64),
        goldenHash: 'b'.repeat(64),
        diff: [
          { path: 'todos[2].done', result: false, golden: true },
          { path: 'todos[3].done', result: true, golden: false },
        ],
        assertions: [{ name: 'nothing deleted', passed: true }],
        rubrics: [{ question: 'Does the assistant confirm to-do 2?', answer: 'No', yes: false }],
      },
      usage: {
        policy: { calls: 3, input: 900, output: 60, cached: 0 },
        user: { calls: 0, input: 0, output: 0, cached: 0 },
        judge: { calls: 1, input: 50, output: 1, cached: 0 },
      },
      timings: { totalMs: 1000, policyMs: 500, toolMs: 100, userMs: 0, gradeMs: 300, sandboxMs: 100 },
    },
  };
}

test('the view: prompt apart, agent turns in order with their tool calls, user turns, the grade', () => {
  const v = episodeView(failedEpisode());
  assert.equal(v.outcome, 'agent_failure');
  assert.deepEqual(v.system, ['You manage to-dos. SYSTEM-PROMPT-TEXT']);
  assert.deepEqual(
    v.context.map((m) => m.text),
    ['example question', 'EXAMPLE-ANSWER'],
    'the worked example is context, not an agent turn',
  );
  assert.match(v.query!, /^Mark to-do 2 as done\./);
  assert.deepEqual(
    v.transcript.map((e) => (e.kind === 'agent' ? `agent ${e.turn} ${e.toolCalls.length}` : e.kind)),
    ['agent 0 1', 'agent 1 0', 'user', 'agent 2 0'],
  );
  const first = v.transcript[0]!;
  assert.ok(first.kind === 'agent');
  assert.equal(first.reasoning, 'REASONING-TEXT pick one');
  assert.equal(first.toolCalls[0]!.arguments, JSON.stringify({ id: 3, note: HOSTILE }), 'canonical JSON');
  assert.deepEqual(v.grade!.diff[0], { path: 'todos[2].done', result: 'false', golden: 'true' });
  assert.equal(v.infrastructure, null);
});

test('the page escapes every text of the record and shows tool calls, reasoning, diff and verdicts', () => {
  const html = renderEpisodePage(episodeView(failedEpisode()), { back: { href: '../index.html', label: 'report' } });
  assert.ok(!html.includes('<script>'), 'no script from the record');
  assert.ok(!html.includes('<img'), 'no element from the record');
  assert.ok(html.includes('&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &lt;img'), 'escaped text shown');
  assert.match(html, /<details class="turn system"><summary>system prompt/, 'system prompt collapsed');
  assert.match(html, /<div class="tool-call" data-tool="complete_todo">/);
  assert.ok(html.includes('&quot;id&quot;:3'), 'tool call arguments');
  assert.ok(html.includes('REASONING-TEXT pick one'));
  assert.ok(html.includes('USER-REPLY yes'));
  assert.ok(html.includes('<code>todos[2].done</code></td><td><code>false</code></td><td><code>true</code>'));
  assert.ok(html.includes('Does the assistant confirm to-do 2?'));
  assert.match(html, /differs from the golden state/);
  assert.match(html, /<meta http-equiv="Content-Security-Policy" content="default-src 'none'/);
  assert.ok(!/\bhttps?:\/\//.test(html), 'nothing to fetch');
});

test('the text shows the same tool calls, the diff lines and the verdicts, without terminal control characters', () => {
  const episode = failedEpisode();
  episode.record!.toolCalls![0]!.result = 'ok\u001b[2Jcleared';
  const v = episodeView(episode);
  const text = renderEpisodeText(v);
  const call = v.transcript[0]!.kind === 'agent' ? v.transcript[0]!.toolCalls[0]! : undefined;
  assert.ok(text.includes(`tool call: ${toolCallLine(call!)}`));
  assert.ok(text.includes('todos[2].done: false (expected true)'));
  assert.ok(text.includes('todos[3].done: true (expected false)'));
  assert.ok(text.includes('judge: no: Does the assistant confirm to-do 2?'));
  assert.ok(text.includes('REASONING-TEXT'));
  assert.ok(!text.includes('\u001b'), 'escape character shown as text');
  assert.ok(text.includes('ok\\u001b[2Jcleared'));
  assert.ok(!text.includes('SYSTEM-PROMPT-TEXT'), 'the system prompt is summarised');
});

test('an infrastructure error shows its class and cause; a running episode has no record', () => {
  const e = failedEpisode();
  e.record = {
    ...e.record!,
    outcome: 'infrastructure_error',
    finishReason: 'infrastructure_error',
    cause: 'no answer from tool before the episode deadline',
    grade: undefined,
  };
  const v = episodeView(e);
  assert.deepEqual(v.infrastructure, {
    class: 'deadline (tool)',
    cause: 'no answer from tool before the episode deadline',
  });
  assert.equal(v.reward, 'none (not graded)');
  assert.match(renderEpisodePage(v), /infrastructure class<\/div><div class="value">deadline \(tool\)/);
  assert.match(renderEpisodeText(v), /infrastructure class: deadline \(tool\)/);
  assert.equal(infrastructureClass('unexpected error: boom'), 'unexpected');
  assert.equal(infrastructureClass('judge unavailable: HTTP 503'), 'judge');
  const running = episodeView({ ...e, status: 'running', record: null });
  assert.equal(running.outcome, 'running');
  assert.deepEqual(running.notes, ['No record: the episode is still running.']);
});

test('page names are safe file names and distinct for ids that differ only in unsafe characters', () => {
  const hash = (t: string) => createHash('sha256').update(t).digest('hex');
  const a = episodePageName('c/eval/s0/tiny/todo/a#1', hash);
  const b = episodePageName('c/eval/s0/tiny/todo/a:1', hash);
  assert.match(a, /^[A-Za-z0-9._-]+\.html$/);
  assert.notEqual(a, b);
  assert.match(episodePageName('../../etc/passwd', hash), /^etc_passwd-[0-9a-f]{10}\.html$/);
});

test('one passed, one failed and one infrastructure-errored episode per task, the first by repetition', () => {
  const line = (uid: string, rep: number, success: boolean, infra = false): EpisodeResultRef => ({
    id: `e/${uid}#${rep}`,
    uid,
    repetition: rep,
    domain: 'd',
    success,
    infrastructure_error: infra,
  });
  const chosen = chooseEpisodes([
    line('b', 2, false),
    line('b', 1, false),
    line('b', 0, true),
    line('b', 3, false, true),
    line('a', 0, true),
    line('a', 1, true),
  ]);
  assert.deepEqual(
    chosen.map((t) => [t.uid, t.passed, t.attempts, t.chosen.map((c) => `${c.outcome}:${c.repetition}`)]),
    [
      ['a', 2, 2, ['passed:0']],
      ['b', 1, 3, ['passed:0', 'failed:1', 'infrastructure error:3']],
    ],
  );
});

test('the report links each chosen episode from its evaluation table, in HTML and markdown', () => {
  const fixture = path.join(
    path.dirname(fileURLToPath(import.meta.url)),
    '..',
    'fixtures',
    'report',
    'eval-after.json',
  );
  const evaluation = parseEvalAggregate(fixture, fs.readFileSync(fixture, 'utf8'), 'evaluation');
  const [task] = chooseEpisodes([
    { id: 'x#0', uid: 'tiny/a', repetition: 0, domain: 'd', success: true, infrastructure_error: false },
    { id: 'x#1', uid: 'tiny/a', repetition: 1, domain: 'd', success: false, infrastructure_error: false },
  ]);
  evaluation.episodes = {
    tasks: [{ ...task!, hrefs: { 'x#0': 'episodes/p0.html', 'x#1': 'episodes/p1.html' } }],
    notes: [],
  };
  const input: ReportInput = {
    title: 't',
    campaign: null,
    probe: null,
    steps: null,
    before: null,
    after: null,
    eval: evaluation,
    costs: null,
  };
  const model = buildReportModel(input);
  const html = renderHtml(model);
  assert.ok(html.includes('<td>tiny/a</td>'));
  assert.ok(html.includes('<a href="episodes/p0.html">#0</a>'));
  assert.ok(html.includes('<a href="episodes/p1.html">#1</a>'));
  assert.match(renderMarkdown(model), /\[#0\]\(episodes\/p0\.html\) \| \[#1\]\(episodes\/p1\.html\)/);
  assert.match(html, /at most three per task/, 'the report says how the pages were chosen');
  // Without episodes there is no episode table.
  const plain = renderHtml(buildReportModel({ ...input, eval: { ...evaluation, episodes: undefined } }));
  assert.ok(!plain.includes('episodes/'));
});
