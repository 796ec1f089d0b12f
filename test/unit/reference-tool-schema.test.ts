import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import zlib from 'node:zlib';
import { canonicalJson } from '../../core/canonical-json.ts';
import { BadInputError } from '../../core/errors.ts';
import { typeArguments } from '../../core/interpret/argument-typing.ts';
import { referenceToolSchema } from '../../core/reference-tool-schema.ts';

/**
 * Tool schemas reach the model as the reference's MCP client converts them (docs/reference-rules.md §2). The fixture
 * (test/fixtures/reference-tool-schemas/README.md) holds every tool the public ThinkingBox dataset's servers list,
 * as the official `mcp` client received it, with the reference's own conversion of each, run once outside this
 * repository, and synthetic edge cases through the same reference code. Each is compared as canonical JSON (the
 * value) and as written (the key order, which the prompt shows).
 */

type Schema = Record<string, unknown>;
interface ListedTool {
  name: string;
  description: string | null;
  inputSchema: Schema;
}
interface Fixture {
  reference: { repository: string; commit: string; file: string };
  servers: { server: string; bench: boolean; tools: ListedTool[]; expected: ListedTool[] }[];
  edge_cases: { name: string; inputSchema: Schema; expected?: Schema; error?: string }[];
}

const FIXTURE = path.join(import.meta.dirname, '../fixtures/reference-tool-schemas/tools.json.gz');
const fixture = JSON.parse(zlib.gunzipSync(fs.readFileSync(FIXTURE)).toString('utf8')) as Fixture;
const BENCH_SERVERS = [
  'external_booking_v1',
  'sandbox_auto_insurance',
  'sandbox_consulting',
  'sandbox_external_retail',
  'sandbox_neobank_support_v1',
];

function toolsOf(bench: boolean) {
  return fixture.servers
    .filter((s) => s.bench === bench)
    .flatMap((s) => s.tools.map((tool, i) => ({ server: s.server, tool, expected: s.expected[i] })));
}
const benchTools = toolsOf(true);
const otherTools = toolsOf(false);

/** Our conversion of each tool against the reference's; returns how many were compared. */
function compareAll(tools: ReturnType<typeof toolsOf>): number {
  let compared = 0;
  for (const { server, tool, expected } of tools) {
    const where = `${server}.${tool.name}`;
    assert.equal(expected?.name, tool.name, `${where}: the reference converted the same tool`);
    assert.equal(expected.description, tool.description, `${where}: the description is not converted`);
    const ours = referenceToolSchema(tool.inputSchema);
    assert.equal(canonicalJson(ours), canonicalJson(expected.inputSchema), where);
    assert.equal(JSON.stringify(ours), JSON.stringify(expected.inputSchema), `${where}: key order`);
    compared++;
  }
  return compared;
}

test(`ThinkingBox-Bench: all ${benchTools.length} tools of its servers convert as the reference converts them`, (t) => {
  assert.deepEqual(
    fixture.servers
      .filter((s) => s.bench)
      .map((s) => s.server)
      .sort(),
    BENCH_SERVERS,
  );
  for (const s of fixture.servers) assert.equal(s.expected.length, s.tools.length, `${s.server}: one conversion each`);
  const compared = compareAll(benchTools);
  const changed = benchTools.filter(
    ({ tool }) => canonicalJson(referenceToolSchema(tool.inputSchema)) !== canonicalJson(tool.inputSchema),
  ).length;
  const reserved = benchTools.filter(({ tool }) => tool.name.startsWith('__reserved__')).length;
  t.diagnostic(
    `compared ${compared} tools of ${BENCH_SERVERS.length} bench servers (${reserved} reserved), ` +
      `${changed} changed by the conversion (reference ${fixture.reference.file} @ ${fixture.reference.commit})`,
  );
  assert.ok(compared > 100, `the fixture holds every bench tool, not ${compared}`);
  assert.ok(changed > 0, 'the bench schemas carry titles: a conversion that changes none of them is not the reference');
});

test(`the dataset's other servers: all ${otherTools.length} tools, some with $ref, convert as the reference's`, (t) => {
  const withRef = otherTools.filter(({ tool }) => JSON.stringify(tool.inputSchema).includes('"$ref"')).length;
  const compared = compareAll(otherTools);
  t.diagnostic(`compared ${compared} tools of the non-bench servers, ${withRef} of them with a $ref`);
  assert.ok(withRef > 0, 'the fixture exercises $ref resolution on real schemas');
});

test(`edge cases: all ${fixture.edge_cases.length} give what the reference gives, or fail where it fails`, (t) => {
  let failures = 0;
  for (const c of fixture.edge_cases) {
    if (c.error !== undefined) {
      failures++;
      assert.throws(
        () => referenceToolSchema(c.inputSchema),
        BadInputError,
        `${c.name}: the reference raised ${c.error}`,
      );
      continue;
    }
    assert.equal(JSON.stringify(referenceToolSchema(c.inputSchema)), JSON.stringify(c.expected), c.name);
  }
  t.diagnostic(`compared ${fixture.edge_cases.length} edge cases, ${failures} of them errors in the reference`);
  assert.ok(failures > 0 && failures < fixture.edge_cases.length);
});

test('a property named title survives; titles go from the schema and its top-level properties only', () => {
  const input = {
    type: 'object',
    title: 'RenameInput',
    properties: {
      title: { type: 'string', title: 'Title' },
      owner: { type: 'object', title: 'Owner', properties: { title: { type: 'string', title: 'Title' } } },
      tags: { type: 'array', title: 'Tags', items: { type: 'string', title: 'Tag' } },
    },
    required: ['title'],
  };
  assert.deepEqual(referenceToolSchema(input), {
    type: 'object',
    properties: {
      title: { type: 'string' },
      owner: { type: 'object', properties: { title: { type: 'string', title: 'Title' } } },
      tags: { type: 'array', items: { type: 'string', title: 'Tag' } },
    },
    required: ['title'],
  });
});

test('$ref resolves where it stands: nested, in array items and in anyOf; the $ref object loses its other keys', () => {
  const input = {
    type: 'object',
    properties: {
      address: { $ref: '#/$defs/Address', description: 'not kept' },
      lines: { type: 'array', items: { $ref: '#/$defs/Country' } },
      backup: { anyOf: [{ $ref: '#/$defs/Address' }, { type: 'null' }], default: null },
    },
    $defs: {
      Address: { type: 'object', title: 'Address', properties: { country: { $ref: '#/$defs/Country' } } },
      Country: { type: 'string', enum: ['NL', 'US'], title: 'Country' },
    },
  };
  const country = { type: 'string', enum: ['NL', 'US'], title: 'Country' };
  const address = { type: 'object', properties: { country } };
  assert.deepEqual(referenceToolSchema(input), {
    type: 'object',
    properties: {
      address,
      lines: { type: 'array', items: country },
      backup: { anyOf: [{ ...address, title: 'Address' }, { type: 'null' }], default: null },
    },
  });
});

test('a cycle or a missing target is bad input, naming the $ref; the input is never changed', () => {
  const cyclic = {
    type: 'object',
    properties: { node: { $ref: '#/$defs/Node' } },
    $defs: { Node: { type: 'object', properties: { next: { $ref: '#/$defs/Node' } } } },
  };
  assert.throws(
    () => referenceToolSchema(cyclic),
    (e: Error) => e instanceof BadInputError && /#\/\$defs\/Node/.test(e.message),
  );
  const missing = { type: 'object', properties: { a: { $ref: '#/$defs/Gone' } } };
  assert.throws(() => referenceToolSchema(missing), /#\/\$defs\/Gone/);
  const input = {
    type: 'object',
    title: 'T',
    properties: { a: { $ref: '#/$defs/A' } },
    $defs: { A: { type: 'integer' } },
  };
  const before = structuredClone(input);
  const converted = referenceToolSchema(input);
  assert.deepEqual(input, before);
  (converted.properties as Record<string, Schema>).a!.type = 'string';
  assert.deepEqual(input.$defs.A, { type: 'integer' }, 'a resolved $ref is a copy of its target');
});

test('keys that are Object.prototype names stay ordinary keys', () => {
  const input = JSON.parse(
    '{"type":"object","properties":{"__proto__":{"type":"string","title":"P"},"constructor":{}}}',
  );
  const converted = referenceToolSchema(input);
  assert.equal(
    JSON.stringify(converted),
    '{"type":"object","properties":{"__proto__":{"type":"string"},"constructor":{}}}',
  );
});

test('argument typing reads the converted schema: a $ref-typed argument written as text gets its type', () => {
  const listed = {
    type: 'object',
    properties: { count: { $ref: '#/$defs/Count' }, pay: { anyOf: [{ $ref: '#/$defs/Flag' }, { type: 'null' }] } },
    $defs: { Count: { type: 'integer' }, Flag: { type: 'boolean' } },
  };
  const written = { count: ' 3 ', pay: 'True' };
  assert.deepEqual(typeArguments(written, listed), written, 'unresolved, a $ref declares no type');
  assert.deepEqual(typeArguments(written, referenceToolSchema(listed)), { count: 3, pay: true });
});
