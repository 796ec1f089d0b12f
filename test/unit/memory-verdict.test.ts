import assert from 'node:assert/strict';
import { test } from 'node:test';
import { loadCampaignConfig } from '../../config/campaign-config.ts';
import { defaultLengths, dryRunMemoryVerdict, memoryRefusal, parseMemoryLine } from '../../cli/memory-verdict.ts';

const line = 'memory: params_b=26.90 ranks=24 peak_gpu_gib=91.3 peak_host_gib=1100.2 max_episode_tokens=81234 fits=no';

test('the memory line parses, and a budget over the longest fitting episode is refused with both numbers', () => {
  const summary = parseMemoryLine(`tokens=106496: ...\n${line}\n`);
  assert.deepEqual(summary, {
    paramsB: 26.9,
    ranks: 24,
    peakGpuGib: 91.3,
    peakHostGib: 1100.2,
    maxEpisodeTokens: 81234,
    fits: false,
  });
  const refusal = memoryRefusal(summary!, 106496, 75);
  assert.match(refusal!, /^episode\.limits\.episode_token_budget: 106496 tokens do not fit/);
  assert.match(refusal!, /longest episode that fits is 81234 tokens/);
  assert.equal(memoryRefusal({ ...summary!, fits: true }, 106496, 75), undefined);
  assert.equal(parseMemoryLine('memory: garbled'), undefined);
});

test('the dry-run verdict refuses only a cuda learner whose model ran and said no', () => {
  const config = loadCampaignConfig('config/reference-q38.yaml'); // cuda, 3 x 8, budget 106496
  const ran = (text: string) => () => ({ output: text, summary: parseMemoryLine(text) });
  assert.match(dryRunMemoryVerdict(config, ran(line)).refusal!, /81234/);
  assert.equal(dryRunMemoryVerdict(config, ran(line.replace('fits=no', 'fits=yes'))).refusal, undefined);
  const failed = dryRunMemoryVerdict(config, () => ({ output: '', problem: 'the memory model did not run (exit 1)' }));
  assert.equal(failed.refusal, undefined);
  assert.match(failed.lines[0]!, /not checked: the memory model did not run/);
  const cpu = dryRunMemoryVerdict({ ...config, learner: { ...config.learner, device: 'cpu' } }, () => {
    throw new Error('must not run');
  });
  assert.equal(cpu.refusal, undefined);
  assert.deepEqual(defaultLengths(106496), [13312, 53248, 106496]);
});
