import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { canonicalJson } from '../../core/canonical-json.ts';
import {
  interpretCompletion,
  interpretNativeMessage,
  typeArguments,
  type Interpretation,
  type ToolSpecForTyping,
} from '../../core/interpret/index.ts';

/**
 * Argument typing and reasoning equal to vLLM's own Qwen3 parsers (`--tool-call-parser qwen3_xml`, the
 * `qwen3_coder` one is the same class; `--reasoning-parser qwen3`), which evaluation through vLLM uses. The
 * expected side is vLLM's output, recorded offline by test/fixtures/vllm-qwen3-xml/generate.py from inputs.json:
 * every property of a probe tool (each kind of declared type) with every value, representative whole calls, and
 * completions that start inside a `<think>` the template opened. Equal means equal as the JSON the tool receives.
 */

interface OpenAITool {
  function: { name: string; parameters: Record<string, unknown> };
}
interface VllmCall {
  name: string;
  arguments: Record<string, unknown>;
}
const fixture = (name: string) =>
  JSON.parse(readFileSync(new URL(`../fixtures/vllm-qwen3-xml/${name}`, import.meta.url), 'utf8')) as unknown;
const inputs = fixture('inputs.json') as {
  tools: OpenAITool[];
  values: string[];
  calls: { name: string; text: string }[];
  reasoning: { name: string; text: string }[];
};
const vllm = fixture('vllm-outputs.json') as {
  vllm: string;
  matrix: Record<string, unknown[]>;
  calls: { name: string; tool_calls: VllmCall[]; content: string | null }[];
  reasoning: { name: string; reasoning: string | null; content: string | null }[];
};
const tools: ToolSpecForTyping[] = inputs.tools.map((t) => ({
  name: t.function.name,
  inputSchema: t.function.parameters,
}));
const probeSchema = tools.find((t) => t.name === 'probe')!.inputSchema;
const same = (a: unknown, b: unknown) => canonicalJson(a) === canonicalJson(b);

/** Training: the raw completion as sampled. */
function training(text: string): Interpretation {
  return interpretCompletion(text, tools);
}

/** Evaluation: vLLM's parsed calls as a chat message, typed once more as every native message is. */
function evaluation(calls: VllmCall[]): Interpretation {
  const toolCalls = calls.map((c) => ({ function: { name: c.name, arguments: JSON.stringify(c.arguments) } }));
  return interpretNativeMessage({ content: null, tool_calls: toolCalls }, tools);
}

function probeCall(property: string, value: string): string {
  return `<tool_call>\n<function=probe>\n<parameter=${property}>\n${value}\n</parameter>\n</function>\n</tool_call>`;
}

test('the fixture is vLLM output over every property and value of the inputs', () => {
  assert.match(vllm.vllm, /^\d+\.\d+/);
  const properties = Object.keys(probeSchema.properties as object);
  assert.deepEqual(Object.keys(vllm.matrix), properties);
  for (const property of properties) assert.equal(vllm.matrix[property]!.length, inputs.values.length, property);
  assert.deepEqual(
    vllm.calls.map((c) => c.name),
    inputs.calls.map((c) => c.name),
  );
});

test('every property x value: training types a raw call to what vLLM gives, and evaluation agrees', () => {
  const decodedTwice: string[] = [];
  let converted = 0;
  for (const [property, row] of Object.entries(vllm.matrix)) {
    inputs.values.forEach((value, i) => {
      const expected = row[i];
      const where = `${property} = ${JSON.stringify(value)}: vLLM ${JSON.stringify(expected)}`;
      const [call] = training(probeCall(property, value)).toolCalls;
      assert.equal(call?.parseError, undefined, where);
      const ours = call!.arguments[property];
      if (!same(expected, value)) converted += 1;
      const [viaVllm] = evaluation([{ name: 'probe', arguments: { [property]: expected } }]).toolCalls;
      assert.ok(same(viaVllm!.arguments[property], ours), `evaluation differs from training: ${where}`);
      if (same(ours, expected)) return;
      // vLLM decodes a JSON string literal once and hands back text that converts again; typing here converts
      // until nothing changes, so both paths land where vLLM's text would be typed next.
      assert.ok(typeof expected === 'string' && value.trim().startsWith('"'), `training differs: ${where}`);
      assert.ok(same(typeArguments({ [property]: expected }, probeSchema)[property], ours), where);
      decodedTwice.push(`${property}=${value}`);
    });
  }
  assert.ok(converted > 500, `only ${converted} values converted: the matrix does not exercise typing`);
  assert.ok(decodedTwice.length > 0 && decodedTwice.length < 60, decodedTwice.join(', '));
});

test('representative calls: the same names and arguments from the raw text and from vLLM', () => {
  inputs.calls.forEach((input, i) => {
    const expected = vllm.calls[i]!.tool_calls;
    const fromText = training(input.text).toolCalls.map((c) => ({ name: c.name, arguments: c.arguments }));
    assert.ok(same(fromText, expected), `${input.name}: ${JSON.stringify(fromText)}`);
    const fromVllm = evaluation(expected).toolCalls.map((c) => ({ name: c.name, arguments: c.arguments }));
    assert.ok(same(fromVllm, fromText), input.name);
  });
});

test('a completion inside a pre-opened <think>: reasoning, text and calls as vLLM splits them', () => {
  inputs.reasoning.forEach((input, i) => {
    const split = vllm.reasoning[i]!;
    const ours = interpretCompletion(input.text, tools, { thinkPreopened: true });
    assert.equal(ours.reasoning, (split.reasoning ?? '').trim(), input.name);
    const evaluated = interpretNativeMessage({ content: split.content, reasoning_content: split.reasoning }, tools, {
      thinkPreopened: true,
    });
    assert.equal(evaluated.reasoning, ours.reasoning, input.name);
    assert.equal(evaluated.text, ours.text, input.name);
    assert.ok(same(evaluated.toolCalls, ours.toolCalls), input.name);
  });
  const cut = interpretCompletion(inputs.reasoning[0]!.text, tools, { thinkPreopened: true });
  assert.equal(cut.text, '', 'a completion cut inside reasoning shows nothing');
  assert.equal(vllm.reasoning[0]!.content, null);
});
