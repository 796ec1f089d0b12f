import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import { episodeConfigSchema } from '../../config/episode-config.ts';
import { chatComplete, tokenizeText } from '../../rollout/policy-client.ts';
import { keyOrigins, resolveApiKey } from '../../rollout/api-key.ts';
import { formatOrigin } from '../../core/endpoint-origin.ts';

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
        await assert.rejects(tokenizeText(endpoint('OPENAI_API_KEY'), 'x'), /not tied to http:\/\/127\.0\.0\.1:/);
        await assert.rejects(
          chatComplete(endpoint('OPENAI_API_KEY'), [{ role: 'user', content: 'hi' }], {
            temperature: 0,
            topP: 1,
            maxTokens: 1,
          }),
          /not tied to/,
        );
        // A named but unset variable is a configuration error, not the placeholder 'not-needed'.
        await assert.rejects(
          tokenizeText(endpoint('TBT_POLICY_API_KEY'), 'x'),
          /TBT_POLICY_API_KEY: the variable is not set/,
        );
        // Tied to https://127.0.0.1 only (a bare host): not sent to this http server.
        await assert.rejects(tokenizeText(endpoint('TBT_JUDGE_API_KEY'), 'x'), /not tied to/);
        assert.deepEqual(server.seen, [], 'no request carried any of those');
        // No api_key_env (embedded / loopback server): no key at all.
        assert.deepEqual(await tokenizeText(endpoint(), 'x'), [1, 2]);
      },
    );
    // Tied (built in: the policy key to loopback on any port): sent.
    await withEnv({ TBT_POLICY_API_KEY: 'policy-secret' }, async () => {
      assert.deepEqual(await tokenizeText(endpoint('TBT_POLICY_API_KEY'), 'x'), [1, 2]);
    });
    assert.deepEqual(server.seen, [undefined, 'Bearer policy-secret']);
  } finally {
    await server.close();
  }
});

test('second review, finding 7 (api key origins): a key goes only to its scheme, host and port', async () => {
  const env = {
    OPENAI_API_KEY: 'sk-openai-secret',
    TBT_POLICY_API_KEY: 'policy-secret',
    TBT_JUDGE_API_KEY: 'judge-secret',
    TBT_API_KEY_HOSTS: 'TBT_JUDGE_API_KEY=judge.example.com;TBT_GRADER_API_KEY=grader.example.com:8443',
    TBT_GRADER_API_KEY: 'grader-secret',
  };
  const key = (name: string, baseUrl: string) => resolveApiKey({ baseUrl, apiKeyEnv: name }, env);
  assert.equal(key('OPENAI_API_KEY', 'https://api.openai.com/v1'), 'sk-openai-secret');
  // The https key must not go in clear text, nor to another port of the same host.
  for (const url of ['http://api.openai.com/v1', 'http://api.openai.com:8080/v1', 'https://api.openai.com:8443/v1'])
    assert.throws(() => key('OPENAI_API_KEY', url), /OPENAI_API_KEY: not tied to/, url);
  // A bare host in TBT_API_KEY_HOSTS is https on 443; host:port is https on that port.
  assert.equal(key('TBT_JUDGE_API_KEY', 'https://judge.example.com/v1'), 'judge-secret');
  assert.throws(() => key('TBT_JUDGE_API_KEY', 'http://judge.example.com:8000/v1'), /not tied to/);
  assert.equal(key('TBT_GRADER_API_KEY', 'https://grader.example.com:8443/v1'), 'grader-secret');
  assert.throws(() => key('TBT_GRADER_API_KEY', 'http://grader.example.com:8443/v1'), /not tied to/);
  // Built in: the compose vLLM on http://policy-server:8000 and loopback on any port (embedded servers).
  assert.equal(key('TBT_POLICY_API_KEY', 'http://policy-server:8000/v1'), 'policy-secret');
  assert.equal(key('TBT_POLICY_API_KEY', 'http://127.0.0.1:41234/v1'), 'policy-secret');
  assert.equal(key('TBT_POLICY_API_KEY', 'http://[::1]:8000/v1'), 'policy-secret');
  assert.throws(() => key('TBT_POLICY_API_KEY', 'http://policy-server:9000/v1'), /not tied to/);
});

test('second review, finding 7 (api key origins): TBT_API_KEY_HOSTS names http origins with scheme and port', () => {
  const ties = keyOrigins('TBT_JUDGE_API_KEY=http://judge.internal:8000,https://judge.example.com:8443');
  assert.deepEqual(ties.get('TBT_JUDGE_API_KEY')?.map(formatOrigin), [
    'http://judge.internal:8000',
    'https://judge.example.com:8443',
  ]);
  assert.throws(() => keyOrigins('TBT_JUDGE_API_KEY=ftp://judge'), /TBT_API_KEY_HOSTS: TBT_JUDGE_API_KEY=ftp:/);
});

test('second review, finding 7 (api key origins): a bare host tie does not send the key over http', async () => {
  const server = await recordingServer();
  try {
    await withEnv({ TBT_JUDGE_API_KEY: 'judge-secret', TBT_API_KEY_HOSTS: 'TBT_JUDGE_API_KEY=127.0.0.1' }, async () => {
      const endpoint = { baseUrl: server.baseUrl, model: 'm', apiKeyEnv: 'TBT_JUDGE_API_KEY' };
      await assert.rejects(tokenizeText(endpoint, 'x'), /TBT_JUDGE_API_KEY: not tied to http:\/\/127\.0\.0\.1:/);
      assert.deepEqual(server.seen, [], 'the key was not sent');
    });
  } finally {
    await server.close();
  }
});
