import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import {
  interpretCompletion,
  interpretNativeMessage,
  typeArguments,
  type Interpretation,
  type InterpretedToolCall,
  type NativeAssistantMessage,
  type ToolSpecForTyping,
} from '../../core/interpret/index.ts';

interface ExpectedCall {
  name: string;
  arguments?: Record<string, unknown>;
  /** A substring the parse error must contain; absent means the call must parse. */
  parseError?: string;
  raw?: string;
}

interface GoldenCase {
  name: string;
  raw?: string;
  native?: NativeAssistantMessage;
  options?: { thinkPreopened?: boolean };
  expect: Omit<Interpretation, 'toolCalls'> & { toolCalls: ExpectedCall[] };
}

const golden = JSON.parse(readFileSync(new URL('../fixtures/interpret/cases.json', import.meta.url), 'utf8')) as {
  tools: ToolSpecForTyping[];
  cases: GoldenCase[];
};
const { tools } = golden;

function schemaOf(name: string): Record<string, unknown> {
  const tool = tools.find((candidate) => candidate.name === name);
  assert.ok(tool, `fixture tool ${name}`);
  return tool.inputSchema;
}

function run(goldenCase: GoldenCase): Interpretation {
  if (goldenCase.native !== undefined) return interpretNativeMessage(goldenCase.native, tools);
  assert.equal(typeof goldenCase.raw, 'string', 'a case needs raw or native');
  return interpretCompletion(goldenCase.raw ?? '', tools, goldenCase.options);
}

function assertCall(
  actual: InterpretedToolCall | undefined,
  expected: ExpectedCall,
  index: number,
  source: string | undefined,
): void {
  assert.ok(actual, `tool call ${index} is missing`);
  assert.equal(actual.index, index);
  assert.equal(actual.name, expected.name);
  if (expected.parseError === undefined) {
    assert.equal(actual.parseError, undefined, `unexpected parse error: ${actual.parseError}`);
    assert.deepEqual(actual.arguments, expected.arguments);
  } else {
    assert.ok(
      actual.parseError?.includes(expected.parseError),
      `parse error ${JSON.stringify(actual.parseError)} lacks ${JSON.stringify(expected.parseError)}`,
    );
    assert.deepEqual(actual.arguments, {});
  }
  if (expected.raw !== undefined) assert.equal(actual.raw, expected.raw);
  if (source !== undefined) {
    assert.ok(actual.raw.startsWith('<tool_call>') && source.includes(actual.raw), 'raw is the block as emitted');
  }
}

test('the golden file covers every case kind and names each case once', () => {
  assert.ok(golden.cases.length >= 30, `only ${golden.cases.length} golden cases`);
  assert.equal(new Set(golden.cases.map((c) => c.name)).size, golden.cases.length);
  const formats = new Set(golden.cases.map((c) => c.expect.format));
  assert.deepEqual([...formats].sort(), ['hermes_json', 'native', 'plain', 'qwen3_xml']);
  assert.ok(golden.cases.some((c) => c.expect.toolCalls.some((call) => call.parseError !== undefined)));
});

for (const goldenCase of golden.cases) {
  test(`golden: ${goldenCase.name}`, () => {
    const result = run(goldenCase);
    assert.equal(result.format, goldenCase.expect.format);
    assert.equal(result.reasoning, goldenCase.expect.reasoning);
    assert.equal(result.text, goldenCase.expect.text);
    assert.equal(result.toolCalls.length, goldenCase.expect.toolCalls.length, JSON.stringify(result.toolCalls));
    goldenCase.expect.toolCalls.forEach((expected, index) =>
      assertCall(result.toolCalls[index], expected, index, goldenCase.raw),
    );
  });
}

test('interpretation is deterministic and leaves its inputs untouched', () => {
  for (const goldenCase of golden.cases) {
    const before = JSON.stringify(goldenCase);
    const toolsBefore = JSON.stringify(tools);
    assert.deepEqual(run(goldenCase), run(goldenCase), goldenCase.name);
    assert.equal(JSON.stringify(goldenCase), before);
    assert.equal(JSON.stringify(tools), toolsBefore);
  }
  const args = { order_id: '42' };
  const typed = typeArguments(args, schemaOf('get_order'));
  assert.deepEqual(typed, { order_id: 42 });
  assert.deepEqual(args, { order_id: '42' });
  assert.notEqual(typed, args);
});

test('typing is idempotent: typing typed arguments changes nothing', () => {
  const schema = schemaOf('probe');
  const properties = Object.keys(schema.properties as Record<string, unknown>);
  const texts = [
    'true',
    'FALSE',
    'yes',
    '7',
    ' -3 ',
    '7.0',
    '1.5',
    '1e3',
    'inf',
    '[1,2]',
    '{"a":1}',
    '"[1]"',
    '"x"',
    '5',
    'null',
    'None',
    '',
    ' ',
    '{bad',
    '99999999999999999999',
    '-0',
  ];
  let converted = 0;
  for (const property of properties) {
    for (const text of texts) {
      const once = typeArguments({ [property]: text }, schema);
      if (once[property] !== text) converted += 1;
      assert.deepEqual(typeArguments(once, schema), once, `${property} = ${JSON.stringify(text)}`);
    }
  }
  assert.ok(converted > 30, `only ${converted} conversions: the loop is not exercising typing`);
  const alreadyTyped = { int: 3, num: 1.5, bool: false, arr: ['1'], obj: { n: '1' }, int_or_null: null, untyped: '5' };
  assert.deepEqual(typeArguments(alreadyTyped, schema), alreadyTyped);
});

test('typing edge rules: -0 is 0, "__proto__" stays an ordinary argument, no schema types nothing', () => {
  const schema = schemaOf('probe');
  assert.ok(Object.is(typeArguments({ int: '-0' }, schema).int, 0));
  const hostile = JSON.parse('{"__proto__": "1", "int": "2"}') as Record<string, unknown>;
  const typed = typeArguments(hostile, schema);
  assert.deepEqual(Object.keys(typed), ['__proto__', 'int']);
  assert.equal(Object.getPrototypeOf(typed), Object.prototype);
  assert.deepEqual(typeArguments({ int: '2' }, undefined), { int: '2' });
  assert.deepEqual(typeArguments({ n: '2' }, { type: 'object', properties: { n: { type: ['integer', 7] } } }), {
    n: 2,
  });
});

/** The same calls as a Qwen3 XML completion, a Hermes completion and a native message. */
const parityCalls: { name: string; arguments: Record<string, unknown> }[] = [
  { name: 'get_order', arguments: { order_id: 42, include_items: true } },
  {
    name: 'search_products',
    arguments: {
      query: 'blue mug',
      limit: 5,
      max_price: 12.75,
      tags: ['kitchen', 'sale'],
      filters: { in_stock: true },
    },
  },
  { name: 'write_file', arguments: { path: 'a.txt', content: 'two\nlines' } },
  { name: 'unknown_tool', arguments: { x: 'y' } },
  { name: 'end_turn', arguments: {} },
];

function xmlValue(value: unknown): string {
  return typeof value === 'string' ? value : JSON.stringify(value);
}

function asXml(calls: typeof parityCalls): string {
  return calls
    .map((call) => {
      const params = Object.entries(call.arguments).map(([k, v]) => `<parameter=${k}>\n${xmlValue(v)}\n</parameter>\n`);
      return `<tool_call>\n<function=${call.name}>\n${params.join('')}</function>\n</tool_call>`;
    })
    .join('\n');
}

function asHermes(calls: typeof parityCalls): string {
  return calls.map((call) => `<tool_call>\n${JSON.stringify(call)}\n</tool_call>`).join('\n');
}

function asNative(calls: typeof parityCalls, stringify: (v: unknown) => unknown): NativeAssistantMessage {
  return {
    content: 'Working on it.',
    reasoning_content: 'plan',
    tool_calls: calls.map((call, i) => ({
      id: `call_${i}`,
      type: 'function',
      function: {
        name: call.name,
        arguments: JSON.stringify(
          Object.fromEntries(Object.entries(call.arguments).map(([k, v]) => [k, stringify(v)])),
        ),
      },
    })),
  };
}

function comparable(result: Interpretation): unknown {
  return result.toolCalls.map(({ index, name, arguments: args, parseError }) => ({
    index,
    name,
    arguments: args,
    parseError,
  }));
}

test('parity: XML, Hermes and native messages carrying the same calls give the same tool calls', () => {
  const expected = parityCalls.map((call, index) => ({
    index,
    name: call.name,
    arguments: call.name === 'unknown_tool' ? { x: 'y' } : call.arguments,
    parseError: undefined,
  }));
  const xml = interpretCompletion(`<think>plan</think>Working on it.\n${asXml(parityCalls)}`, tools);
  const hermes = interpretCompletion(`<think>plan</think>Working on it.\n${asHermes(parityCalls)}`, tools);
  const nativeTyped = interpretNativeMessage(
    asNative(parityCalls, (v) => v),
    tools,
  );
  // Native arguments with every value sent as text, as a careless server or model might.
  const nativeText = interpretNativeMessage(asNative(parityCalls, xmlValue), tools);
  for (const [label, result] of [
    ['xml', xml],
    ['hermes', hermes],
    ['native', nativeTyped],
    ['native as text', nativeText],
  ] as const) {
    assert.deepEqual(comparable(result), expected, label);
    assert.equal(result.text, 'Working on it.', label);
    assert.equal(result.reasoning, 'plan', label);
  }
  assert.deepEqual([xml.format, hermes.format, nativeTyped.format], ['qwen3_xml', 'hermes_json', 'native']);
});

test('parity: a malformed call fails the same way in a completion and in a native message', () => {
  const fromText = interpretCompletion(
    '<tool_call>{"name": "get_order", "arguments": "{\\"order_id\\": 4"}</tool_call>',
    tools,
  );
  const fromNative = interpretNativeMessage(
    { tool_calls: [{ function: { name: 'get_order', arguments: '{"order_id": 4' } }] },
    tools,
  );
  assert.equal(fromText.toolCalls[0]?.name, 'get_order');
  assert.equal(fromText.toolCalls[0]?.parseError, fromNative.toolCalls[0]?.parseError);
  assert.match(fromText.toolCalls[0]?.parseError ?? '', /not valid JSON/);
});
