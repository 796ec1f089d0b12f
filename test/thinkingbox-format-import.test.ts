import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { repoRoot } from '../config/environment.ts';
import { importThinkingboxDataset } from '../datasets/thinkingbox/dataset-importer.ts';
import { testTempDir } from './helpers/temp-dir.ts';

/**
 * The ThinkingBox format as the reference framework reads it, on a copy of our fixture: typed `$history`
 * conversations sliced by `key:start:end` (message ids), module `!` defaults that each apply to the functions after
 * them, `use_internal_servers` named when a scenario needs a server servers.yaml does not define, and `mcp-remote`
 * servers read from `endpoint`.
 */

const fixture = path.join(repoRoot, 'examples', 'thinkingbox-fixture');
const work = testTempDir('tbt-tb-format-');

function datasetCopy(name: string): { root: string; data: string; cases: string } {
  const root = path.join(work, name);
  fs.cpSync(fixture, root, { recursive: true });
  return { root, data: path.join(root, 'dataset'), cases: path.join(root, 'dataset', 'test_case') };
}

function importWith(root: string, entries: string[]) {
  const list = path.join(root, 'list.yaml');
  fs.writeFileSync(list, entries.map((e) => `- ${e}\n`).join(''));
  return importThinkingboxDataset({ dataDir: path.join(root, 'dataset'), listFile: list });
}

const META = `$history:
  "#notes": [not, a, conversation]
  desk:
    - T: Text
      message_id: t1
      role: user
      content: Is The Tombs of Atuan in?
    - T: ParallelToolCall
      metadata: {}
      tool_calls:
        - T: ToolCall
          name: search_books
          arguments: {query: Tombs of Atuan}
          id: call_1
    - T: ToolResponse
      name: search_books
      content: '{"books": [{"id": "B003"}]}'
      id: call_1
    - T: Text
      metadata: {tag: text, is_done: true}
      role: assistant
      content: Yes, it is on shelf C5.
    - T: Text
      message_id: t2
      role: user
      content: Thanks. And opening hours?
    - {role: assistant, content: We open at nine.}
`;

const TESTS = `"""!
scenario: circulation_desk
tags: [first]
"""


def test_whole(x):
    """!
    query: Whole history
    history: "desk:0:"
    tags: [own]
    """


def test_first_turn(x):
    """!
    query: First turn only
    history: desk:0:t2
    """


"""!
tags: [second]
max_user_sim_turns: 3
"""


def test_second_turn(x):
    """!
    query: From the second turn
    history: "desk:t2:"
    """


def test_numeric_end(x):
    """!
    query: An end that is not a message id
    history: desk:0:2
    """


def test_two_parts(x):
    """!
    query: Two parts only
    history: desk:0
    """


def test_negative_start(x):
    """!
    query: Negative start
    history: "desk:-1:"
    """
`;

test('typed histories import, sliced by message id as the reference slices them; defaults are cumulative', () => {
  const { root, cases } = datasetCopy('typed');
  fs.writeFileSync(path.join(cases, 'typed.py'), TESTS);
  fs.writeFileSync(path.join(cases, 'typed.meta.yaml'), META);
  const names = ['whole', 'first_turn', 'second_turn', 'numeric_end', 'two_parts', 'negative_start'];
  const result = importWith(
    root,
    names.map((n) => `typed.py:test_${n}`),
  );
  const byUid = new Map(result.suite.tasks.map((t) => [t.uid.replace('typed.py:test_', ''), t]));
  assert.deepEqual([...byUid.keys()], ['whole', 'first_turn', 'second_turn']);

  const whole = byUid.get('whole')!;
  assert.deepEqual(
    whole.history.map((m) => m.T),
    ['Text', 'ParallelToolCall', 'ToolResponse', 'Text', 'Text', 'Text'],
  );
  assert.deepEqual(whole.history[1], {
    T: 'ParallelToolCall',
    metadata: {},
    tool_calls: [
      { T: 'ToolCall', name: 'search_books', arguments: { query: 'Tombs of Atuan' }, id: 'call_1', metadata: {} },
    ],
  });
  assert.deepEqual(whole.history[2], {
    T: 'ToolResponse',
    name: 'search_books',
    content: '{"books": [{"id": "B003"}]}',
    id: 'call_1',
    metadata: {},
  });
  assert.deepEqual(whole.history[5], { T: 'Text', role: 'assistant', content: 'We open at nine.', metadata: {} });
  assert.deepEqual(whole.tags, ['first', 'own'], 'function tags follow the module tags in force');
  assert.equal(whole.limits.max_user_turns, 10);

  assert.equal(byUid.get('first_turn')!.history.length, 4, 'desk:0:t2 ends before message t2');
  const second = byUid.get('second_turn')!;
  assert.deepEqual(
    second.history.map((m) => (m.T === 'Text' ? m.content : m.T)),
    ['Thanks. And opening hours?', 'We open at nine.'],
  );
  assert.deepEqual(second.tags, ['second'], "the second module string replaces the first one's tags");
  assert.equal(second.limits.max_user_turns, 3, 'a later module string applies to the functions after it');
  assert.equal(second.scenario, 'circulation_desk', 'keys it does not set stay from the earlier one');

  const problems = result.problems.map((p) => `${path.basename(p.file)}:${p.line}: ${p.message}`).join('\n');
  const line = (fn: string) => TESTS.split('\n').findIndex((l) => l.startsWith(`def test_${fn}(`)) + 4;
  assert.match(problems, new RegExp(`typed\\.py:${line('numeric_end')}: .*message_id '2' not found`));
  assert.match(problems, new RegExp(`typed\\.py:${line('two_parts')}: .*key:start:end`));
  assert.match(problems, new RegExp(`typed\\.py:${line('negative_start')}: .*out of range`));
});

test('a meta file is <stem>.meta.yaml only; a message without a T is a Text; a bad message names its line', () => {
  const { root, cases } = datasetCopy('meta');
  fs.writeFileSync(path.join(cases, 'other.py'), TESTS.replace('desk:0:t2', '"bad:0:"'));
  fs.writeFileSync(path.join(cases, 'other.py.meta.yaml'), META);
  const none = importWith(root, ['other.py:test_whole']);
  assert.equal(none.suite.tasks.length, 0);
  assert.match(none.problems.map((p) => p.message).join('\n'), /no such file/);

  fs.writeFileSync(
    path.join(cases, 'other.meta.yaml'),
    `${META}  bad:\n    - T: Text\n      role: user\n    - T: Picture\n      url: x\n`,
  );
  const bad = importWith(root, ['other.py:test_first_turn']);
  assert.equal(bad.suite.tasks.length, 0);
  const metaProblems = bad.problems.filter((p) => p.file.endsWith('other.meta.yaml'));
  const metaLines = fs.readFileSync(path.join(cases, 'other.meta.yaml'), 'utf8').split('\n');
  assert.ok(metaProblems.length > 0, bad.problems.map((p) => p.message).join('\n'));
  for (const p of metaProblems) assert.match(metaLines[p.line - 1]!, /T: (Text|Picture)/, p.message);
});

test('use_internal_servers: a server the reference would take from its own tools is a clear import error', () => {
  const { root, data } = datasetCopy('internal');
  const scenario = path.join(data, 'scenario', 'stacks_maintenance.yaml');
  fs.writeFileSync(scenario, fs.readFileSync(scenario, 'utf8').replace(/^  catalog:/m, '  cloud_drive:'));
  const result = importWith(root, ['stacks_shelving.py:test_move_silent_spring']);
  const text = result.problems.map((p) => `${path.basename(p.file)}:${p.line}: ${p.message}`).join('\n');
  assert.match(text, /cloud_drive/);
  assert.match(text, /servers\.yaml:\d+: .*use_internal_servers/);
  assert.match(text, /mcp_cloud_drive\.py/);
});

test('mcp-remote servers are read from endpoint, as the reference names it; url alone is refused', () => {
  const { root } = datasetCopy('remote');
  const servers = path.join(root, 'servers', 'servers.yaml');
  const base = fs.readFileSync(servers, 'utf8');
  fs.writeFileSync(
    servers,
    `${base}  remote_a:\n    type: mcp-remote\n    endpoint: http://127.0.0.1:10611/mcp/\n    transport: sse\n` +
      `  remote_b:\n    type: mcp-remote\n    url: http://127.0.0.1:10611/mcp/\n`,
  );
  const result = importWith(root, ['circulation.py:test_checkout_left_hand']);
  const text = result.problems.map((p) => `${p.line}: ${p.field}: ${p.message}`).join('\n');
  assert.match(text, /servers\.remote_b\.endpoint/);
  assert.doesNotMatch(text, /remote_a/);
});
