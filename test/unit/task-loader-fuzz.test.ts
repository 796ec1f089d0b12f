import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { stringify } from 'yaml';
import { formatProblem, loadSuites } from '../../task-suites/task-suite-loader.ts';
import { testTempDir } from '../helpers/temp-dir.ts';

/** Each case breaks one thing of a valid suite; the loader must name the file and the field (and a line). */

const scenario = () => ({
  name: 'shop',
  instructions: 'Be careful.',
  schema: 'CREATE TABLE items (id integer PRIMARY KEY, qty integer NOT NULL);',
  seed: 'INSERT INTO items VALUES (1, 5);',
  volatile: {},
  tools: [
    {
      name: 'set_qty',
      description: 'Set a quantity.',
      input_schema: {
        type: 'object',
        properties: { id: { type: 'integer' }, qty: { type: 'integer' } },
        required: ['id', 'qty'],
      },
      sql: 'UPDATE items SET qty = :qty WHERE id = :id',
      result: 'affected',
    },
  ],
});
const taskFile = () => ({
  tasks: [
    {
      uid: 'shop/one',
      scenario: 'shop',
      query: 'Set item 1 to 3.',
      golden: [{ tool: 'set_qty', arguments: { id: 1, qty: 3 } }],
    },
  ],
});

type Case = { name: string; file: 'scenario' | 'tasks'; field: string; edit?: (s: any, t: any) => void; raw?: string };
const cases: Case[] = [
  { name: 'scenario name missing', file: 'scenario', field: 'name', edit: (s) => delete s.name },
  { name: 'scenario name with capitals', file: 'scenario', field: 'name', edit: (s) => (s.name = 'Shop') },
  { name: 'instructions missing', file: 'scenario', field: 'instructions', edit: (s) => delete s.instructions },
  { name: 'instructions empty', file: 'scenario', field: 'instructions', edit: (s) => (s.instructions = '') },
  { name: 'schema missing', file: 'scenario', field: 'schema', edit: (s) => delete s.schema },
  { name: 'schema blank', file: 'scenario', field: 'schema', edit: (s) => (s.schema = '   ') },
  { name: 'seed not text', file: 'scenario', field: 'seed', edit: (s) => (s.seed = 42) },
  { name: 'volatile not a map', file: 'scenario', field: 'volatile', edit: (s) => (s.volatile = ['a']) },
  {
    name: 'volatile column not a list',
    file: 'scenario',
    field: 'volatile.items',
    edit: (s) => (s.volatile = { items: 'qty' }),
  },
  { name: 'no tools', file: 'scenario', field: 'tools', edit: (s) => (s.tools = []) },
  { name: 'tool name missing', file: 'scenario', field: 'tools[0].name', edit: (s) => delete s.tools[0].name },
  {
    name: 'tool description missing',
    file: 'scenario',
    field: 'tools[0].description',
    edit: (s) => delete s.tools[0].description,
  },
  { name: 'tool sql missing', file: 'scenario', field: 'tools[0].sql', edit: (s) => delete s.tools[0].sql },
  { name: 'tool sql empty list', file: 'scenario', field: 'tools[0].sql', edit: (s) => (s.tools[0].sql = []) },
  {
    name: 'tool result unknown',
    file: 'scenario',
    field: 'tools[0].result',
    edit: (s) => (s.tools[0].result = 'everything'),
  },
  {
    name: 'input schema not an object type',
    file: 'scenario',
    field: 'tools[0].input_schema.type',
    edit: (s) => (s.tools[0].input_schema.type = 'array'),
  },
  {
    name: 'required names an undeclared argument',
    file: 'scenario',
    field: 'tools[0].input_schema.required[0]',
    edit: (s) => (s.tools[0].input_schema.required = ['nope']),
  },
  {
    name: 'sql uses an undeclared parameter',
    file: 'scenario',
    field: 'tools[0].sql',
    edit: (s) => (s.tools[0].sql = 'UPDATE items SET qty = :amount WHERE id = :id'),
  },
  {
    name: 'duplicate tool names',
    file: 'scenario',
    field: 'tools[1].name',
    edit: (s) => s.tools.push({ ...s.tools[0] }),
  },
  { name: 'unknown scenario field', file: 'scenario', field: 'colour', edit: (s) => (s.colour = 'red') },
  {
    name: 'scenario YAML syntax error',
    file: 'scenario',
    field: 'YAML syntax',
    raw: 'name: shop\ninstructions: [unclosed\n',
  },
  { name: 'scenario is a list', file: 'scenario', field: '', raw: '- a\n- b\n' },
  { name: 'duplicate YAML key', file: 'scenario', field: 'YAML syntax', raw: 'name: shop\nname: again\n' },
  {
    name: 'tasks key missing',
    file: 'tasks',
    field: 'tasks',
    edit: (_s, t) => {
      delete t.tasks;
      t.task = [];
    },
  },
  { name: 'empty task list', file: 'tasks', field: 'tasks', edit: (_s, t) => (t.tasks = []) },
  { name: 'uid missing', file: 'tasks', field: 'tasks[0].uid', edit: (_s, t) => delete t.tasks[0].uid },
  { name: 'uid with spaces', file: 'tasks', field: 'tasks[0].uid', edit: (_s, t) => (t.tasks[0].uid = 'has space') },
  { name: 'query missing', file: 'tasks', field: 'tasks[0].query', edit: (_s, t) => delete t.tasks[0].query },
  { name: 'golden missing', file: 'tasks', field: 'tasks[0].golden', edit: (_s, t) => delete t.tasks[0].golden },
  {
    name: 'golden call without tool',
    file: 'tasks',
    field: 'tasks[0].golden[0].tool',
    edit: (_s, t) => delete t.tasks[0].golden[0].tool,
  },
  {
    name: 'golden arguments not an object',
    file: 'tasks',
    field: 'tasks[0].golden[0].arguments',
    edit: (_s, t) => (t.tasks[0].golden[0].arguments = 'id=1'),
  },
  {
    name: 'golden calls an unknown tool',
    file: 'tasks',
    field: 'tasks[0].golden[0].tool',
    edit: (_s, t) => (t.tasks[0].golden[0].tool = 'drop_everything'),
  },
  {
    name: 'unknown scenario',
    file: 'tasks',
    field: 'tasks[0].scenario',
    edit: (_s, t) => (t.tasks[0].scenario = 'bank'),
  },
  {
    name: 'rubric not text',
    file: 'tasks',
    field: 'tasks[0].rubrics[0]',
    edit: (_s, t) => (t.tasks[0].rubrics = [{ q: 1 }]),
  },
  {
    name: 'assertion without sql',
    file: 'tasks',
    field: 'tasks[0].assertions[0].sql',
    edit: (_s, t) => (t.tasks[0].assertions = [{ name: 'x' }]),
  },
  {
    name: 'negative user turns',
    file: 'tasks',
    field: 'tasks[0].limits.max_user_turns',
    edit: (_s, t) => (t.tasks[0].limits = { max_user_turns: -1 }),
  },
  {
    name: 'zero agent turns',
    file: 'tasks',
    field: 'tasks[0].limits.max_agent_turns',
    edit: (_s, t) => (t.tasks[0].limits = { max_agent_turns: 0 }),
  },
  {
    name: 'user_replies not a list',
    file: 'tasks',
    field: 'tasks[0].user_replies',
    edit: (_s, t) => (t.tasks[0].user_replies = 'yes'),
  },
  { name: 'duplicate uid', file: 'tasks', field: 'tasks[1].uid', edit: (_s, t) => t.tasks.push({ ...t.tasks[0] }) },
  { name: 'unknown task field', file: 'tasks', field: 'tasks[0].reward', edit: (_s, t) => (t.tasks[0].reward = 1) },
  { name: 'tasks YAML syntax error', file: 'tasks', field: 'YAML syntax', raw: 'tasks:\n  - uid: "unterminated\n' },
  { name: 'tasks file empty', file: 'tasks', field: '', raw: '' },
];

test(`the loader rejects ${cases.length} malformed files, each with file, line and field, without crashing`, () => {
  assert.ok(cases.length >= 30);
  const root = testTempDir('tbt-fuzz-');
  for (const [i, c] of cases.entries()) {
    const dir = path.join(root, `case${i}`);
    fs.mkdirSync(path.join(dir, 'scenarios'), { recursive: true });
    fs.mkdirSync(path.join(dir, 'tasks'), { recursive: true });
    const s = scenario();
    const t = taskFile();
    c.edit?.(s, t);
    const scenarioText = c.file === 'scenario' && c.raw !== undefined ? c.raw : stringify(s);
    const tasksText = c.file === 'tasks' && c.raw !== undefined ? c.raw : stringify(t);
    fs.writeFileSync(path.join(dir, 'scenarios', 'shop.yaml'), scenarioText);
    fs.writeFileSync(path.join(dir, 'tasks', 'shop.yaml'), tasksText);
    const { problems } = loadSuites(dir);
    const expectedFile = path.join(dir, c.file === 'scenario' ? 'scenarios' : 'tasks', 'shop.yaml');
    const own = problems.filter((p) => p.file === expectedFile);
    assert.ok(own.length > 0, `${c.name}: expected a problem in ${expectedFile}, got ${JSON.stringify(problems)}`);
    const message = own.map(formatProblem).join('\n');
    assert.ok(
      own.every((p) => p.line >= 1),
      `${c.name}: line numbers`,
    );
    assert.ok(message.includes(expectedFile), `${c.name}: names the file`);
    if (c.field) assert.ok(message.includes(c.field), `${c.name}: expected field '${c.field}' in:\n${message}`);
  }
  fs.rmSync(root, { recursive: true, force: true });
});

test('the valid base suite loads without problems, and a line number points at the broken field', () => {
  const dir = testTempDir('tbt-ok-');
  fs.mkdirSync(path.join(dir, 'scenarios'));
  fs.mkdirSync(path.join(dir, 'tasks'));
  fs.writeFileSync(path.join(dir, 'scenarios', 'shop.yaml'), stringify(scenario()));
  fs.writeFileSync(path.join(dir, 'tasks', 'shop.yaml'), stringify(taskFile()));
  const ok = loadSuites(dir);
  assert.deepEqual(ok.problems, []);
  assert.equal(ok.suites[0]!.tasks.length, 1);
  fs.writeFileSync(
    path.join(dir, 'tasks', 'shop.yaml'),
    'tasks:\n  - uid: a\n    scenario: shop\n    query: q\n    golden:\n      - tool: set_qty\n        arguments: 7\n',
  );
  const bad = loadSuites(dir);
  assert.equal(bad.problems.length, 1);
  assert.equal(bad.problems[0]!.line, 7);
  assert.equal(bad.problems[0]!.field, 'tasks[0].golden[0].arguments');
  // A YAML syntax error names the line it is on, not the top of the file.
  fs.writeFileSync(
    path.join(dir, 'tasks', 'shop.yaml'),
    'tasks:\n  - uid: a\n    scenario: shop\n    query: q\n    query: again\n',
  );
  const duplicate = loadSuites(dir);
  assert.equal(duplicate.problems.length, 1);
  assert.equal(duplicate.problems[0]!.line, 5);
});
