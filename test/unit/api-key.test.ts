import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import { episodeConfigSchema } from '../../config/episode-config.ts';
import { chatComplete, tokenizeText } from '../../rollout/policy-client.ts';

/** A loopback stand-in for a policy server speaking the tokenize wire format; it records what it was sent. */
async function recordingServer() {
  const seen: (string | undefined)[] = [];
  const server = http.createServer((req, res) => {
    seen.push(req.headers.authorization);
    req.resume();
    req.on('end', () => {
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ tokens: [1, 2] }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
  return { seen, baseUrl, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}

function withEnv<T>(vars: Record<string, string | undefined>, fn: () => Promise<T>): Promise<T> {
  const saved = Object.fromEntries(Object.keys(vars).map((k) => [k, process.env[k]]));
  for (const [k, v] of Object.entries(vars))
    if (v === undefined) delete process.env[k];
    else process.env[k] = v;
  return fn().finally(() => {
    for (const [k, v] of Object.entries(saved))
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
  });
}

test('finding 13: api_key_env names only *_API_KEY variables in configs (never DATABASE_URL or a password)', () => {
  for (const name of ['DATABASE_URL', 'TBT_AGENT_DB_PASSWORD', 'HOME', 'openai_api_key']) {
    const r = episodeConfigSchema.safeParse({
      policy: { base_url: 'http://127.0.0.1:1/v1', model: 'm', api_key_env: name },
    });
    assert.equal(r.success, false, name);
    assert.deepEqual(r.error!.issues[0]!.path, ['policy', 'api_key_env']);
  }
  assert.ok(
    episodeConfigSchema.safeParse({
      policy: { base_url: 'http://h/v1', model: 'm', api_key_env: 'TBT_POLICY_API_KEY' },
    }).success,
  );
});

test('finding 13: a key goes only to its tied hosts; an unset key is an error; no key needs no variable', async () => {
  const server = await recordingServer();
  try {
    const endpoint = (apiKeyEnv?: string) => ({
      baseUrl: server.baseUrl,
      model: 'm',
      ...(apiKeyEnv ? { apiKeyEnv } : {}),
    });
    await withEnv(
      {
        DATABASE_URL: 'postgres://tbt:control-secret@127.0.0.1:1/tbt',
        OPENAI_API_KEY: 'sk-openai-secret',
        TBT_POLICY_API_KEY: undefined,
        TBT_JUDGE_API_KEY: 'judge-secret',
        TBT_API_KEY_HOSTS: 'TBT_JUDGE_API_KEY=127.0.0.1',
      },
      async () => {
        // A config that bypassed the schema still cannot send the control database URL.
        await assert.rejects(tokenizeText(endpoint('DATABASE_URL'), 'x'), { name: 'BadInputError' });
        // OpenAI's key goes to api.openai.com only, never to whatever base_url a config names.
        await assert.rejects(tokenizeText(endpoint('OPENAI_API_KEY'), 'x'), /not tied to host 127\.0\.0\.1/);
        await assert.rejects(
          chatComplete(endpoint('OPENAI_API_KEY'), [{ role: 'user', content: 'hi' }], {
            temperature: 0,
            topP: 1,
            maxTokens: 1,
          }),
          /not tied to host/,
        );
        // A named but unset variable is a configuration error, not the placeholder 'not-needed'.
        await assert.rejects(
          tokenizeText(endpoint('TBT_POLICY_API_KEY'), 'x'),
          /TBT_POLICY_API_KEY: the variable is not set/,
        );
        assert.deepEqual(server.seen, [], 'no request carried any of those');
        // Tied by TBT_API_KEY_HOSTS: sent. No api_key_env (embedded / loopback server): no key at all.
        assert.deepEqual(await tokenizeText(endpoint('TBT_JUDGE_API_KEY'), 'x'), [1, 2]);
        assert.deepEqual(await tokenizeText(endpoint(), 'x'), [1, 2]);
        assert.deepEqual(server.seen, ['Bearer judge-secret', undefined]);
      },
    );
  } finally {
    await server.close();
  }
});
