import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { ListToolsRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { importedScenarioSchema, type ImportedScenario } from '../../config/thinkingbox-schema.ts';
import { BadInputError } from '../../core/errors.ts';
import { episodeToolRoutes } from '../../datasets/thinkingbox/episode-tool-routes.ts';
import type { StartedServer } from '../../datasets/thinkingbox/stdio-server-pool.ts';

/**
 * The tools a ThinkingBox episode offers the agent: each server's listed schema in the reference's converted form
 * (titles stripped, `$ref` resolved; core/reference-tool-schema.ts), then the scenario's overrides on top, in the
 * reference's order, over a real MCP client and server (in memory).
 */

async function serverListing(name: string, tools: { name: string; description?: string; inputSchema: object }[]) {
  const server = new Server({ name, version: '1.0.0' }, { capabilities: { tools: {} } });
  server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools }));
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  await server.connect(serverSide);
  const client = new Client({ name: 'test', version: '1.0.0' });
  await client.connect(clientSide);
  const started: StartedServer = {
    name,
    client,
    pid: null,
    sandbox: 'unsandboxed',
    started: 'process',
    startMs: 0,
    stderrTail: () => '',
    stop: async () => {
      await client.close();
      await server.close();
    },
  };
  return started;
}

function scenario(tools: ImportedScenario['tools']): ImportedScenario {
  return importedScenarioSchema.parse({
    name: 'shop',
    agent: 'think',
    agent_prompt: '',
    builtin_tools: [
      {
        name: 'end_chat',
        description: 'End.',
        input_schema: { type: 'object', title: 'Kept', properties: {} },
        is_end_turn: true,
      },
    ],
    parallel_tool_calls: false,
    bot_instructions: '',
    world_state: { shop: {} },
    tools,
    tags: [],
    file: 'shop.yaml',
  });
}

const ORDER_SCHEMA = {
  type: 'object',
  title: 'PlaceOrderInput',
  properties: {
    payment: { $ref: '#/$defs/Payment', description: 'lost with the $ref, as in the reference' },
    quantity: { type: 'integer', title: 'Quantity', description: 'How many.' },
  },
  required: ['payment', 'quantity'],
  $defs: { Payment: { type: 'string', enum: ['card', 'cash'], title: 'Payment' } },
};

test('schemas are converted first, then overridden: a $ref argument keeps its new description', async () => {
  const shop = await serverListing('shop', [
    { name: 'place_order', description: 'Places an order.', inputSchema: ORDER_SCHEMA },
    { name: '__reserved__init', inputSchema: { type: 'object', properties: { config: { type: 'object' } } } },
  ]);
  try {
    const routes = await episodeToolRoutes(
      scenario([
        {
          name: 'place_order',
          description: 'Order something.',
          arg_descriptions: { payment: 'How the customer pays.', coupon: 'No such argument.' },
        },
      ]),
      [shop],
      ['shop'],
      5_000,
    );
    assert.deepEqual([...routes.keys()], ['end_chat', 'place_order']);
    const order = routes.get('place_order')!.spec;
    assert.equal(order.description, 'Order something.');
    assert.equal(
      JSON.stringify(order.inputSchema),
      JSON.stringify({
        type: 'object',
        properties: {
          payment: { type: 'string', enum: ['card', 'cash'], description: 'How the customer pays.' },
          quantity: { type: 'integer', description: 'How many.' },
        },
        required: ['payment', 'quantity'],
      }),
      'converted, overridden, no argument added for an unknown name',
    );
    assert.deepEqual(
      routes.get('end_chat')!.spec.inputSchema,
      { type: 'object', title: 'Kept', properties: {} },
      'builtin tools come from the agent file, not a server: the reference does not convert them',
    );
  } finally {
    await shop.stop();
  }
});

test("a listed schema the reference cannot convert is the dataset's bad input, naming server and tool", async () => {
  const cyclic = {
    type: 'object',
    properties: { node: { $ref: '#/$defs/Node' } },
    $defs: { Node: { type: 'object', properties: { next: { $ref: '#/$defs/Node' } } } },
  };
  // Even a reserved tool's: the reference converts every tool a server lists.
  const shop = await serverListing('shop', [
    { name: 'place_order', inputSchema: ORDER_SCHEMA },
    { name: '__reserved__init', inputSchema: cyclic },
  ]);
  try {
    await assert.rejects(
      episodeToolRoutes(scenario([{ name: 'place_order' }]), [shop], ['shop'], 5_000),
      (e: Error) => e instanceof BadInputError && /'shop'.*'__reserved__init'.*circular/.test(e.message),
    );
  } finally {
    await shop.stop();
  }
});
