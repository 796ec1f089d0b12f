import assert from 'node:assert/strict';
import { test } from 'node:test';
import { formats, lineChart, niceTicks } from '../../core/report/svg-charts.ts';

test('ticks are exact multiples of the step: a zero tick is 0, never 4e-17', () => {
  assert.deepEqual(niceTicks(-0.3, 0.3, 6).ticks, [-0.3, -0.2, -0.1, 0, 0.1, 0.2, 0.3]);
  assert.deepEqual(niceTicks(0, 1, 4).ticks, [0, 0.25, 0.5, 0.75, 1]);
  assert.deepEqual(niceTicks(0, 10, 4).ticks, [0, 2.5, 5, 7.5, 10]);
  for (const t of niceTicks(-0.7, 0.5, 5).ticks) assert.ok(t === 0 || Math.abs(t) >= 0.05, `tick ${t}`);
});

test('a line chart over whole-number steps labels each step once', () => {
  const svg = lineChart({
    title: 'reward per step',
    series: [{ name: 'reward', points: [1, 2].map((x) => ({ x, y: x / 4 })) }],
    xLabel: 'step',
    yLabel: 'reward',
    xFormat: formats.integer,
  });
  const xAxis = /<g class="axis axis-x">(.*?)<\/g>/.exec(svg)?.[1] ?? '';
  const labels = [...xAxis.matchAll(/<text[^>]*>([^<]*)<\/text>/g)].map((m) => m[1]).filter((l) => l !== 'step');
  assert.ok(labels.length >= 2, svg);
  assert.equal(new Set(labels).size, labels.length, `duplicated tick labels: ${labels.join(' ')}`);
});
