import assert from 'node:assert/strict';
import { test } from 'node:test';
import { episodeRunOptions } from '../../rollout/episode-setup.ts';
import { chatComplete } from '../../rollout/policy-client.ts';
import path from 'node:path';
import { loadCampaignConfig } from '../../config/campaign-config.ts';
import { repoRoot } from '../../config/environment.ts';
import { OpenAIWireProtocolDouble } from '../helpers/openai-wire-double.ts';

/**
 * `episode.sampling.parallel_tool_calls` reaches every chat request that offers tools (the reference's client sends
 * false), and nothing is sent when it is unset or when no tool is offered.
 */
const tool = { type: 'function', function: { name: 'lookup', parameters: { type: 'object', properties: {} } } };

test('parallel_tool_calls: sent from the config with tools, never without tools or when unset', async () => {
  const api = new OpenAIWireProtocolDouble(() => 'ok');
  const endpoint = { baseUrl: await api.start(), model: 'double' };
  try {
    const base = loadCampaignConfig(path.join(repoRoot, 'config', 'local.yaml')).episode;
    const configured = episodeRunOptions({ ...base, sampling: { ...base.sampling, parallel_tool_calls: false } });
    const unset = episodeRunOptions(base);
    const sampling = { ...configured.sampling, maxTokens: 8 };
    await chatComplete(endpoint, [{ role: 'user', content: 'hi' }], sampling, [tool]);
    await chatComplete(endpoint, [{ role: 'user', content: 'hi' }], sampling);
    await chatComplete(endpoint, [{ role: 'user', content: 'hi' }], { ...unset.sampling, maxTokens: 8 }, [tool]);
    const sent = api.requests.map((r) => (r as { parallel_tool_calls?: boolean }).parallel_tool_calls);
    assert.deepEqual(sent, [false, undefined, undefined]);
  } finally {
    await api.stop();
  }
});
