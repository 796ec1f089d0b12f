import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { loadReportInput, report } from '../../cli/commands/report.ts';
import type { CommandIo } from '../../cli/command-support.ts';
import { renderHtml } from '../../core/report/render-html.ts';
import { buildReportModel } from '../../core/report/build-report-model.ts';
import { barChart, binValues, niceTicks, scatterChart } from '../../core/report/svg-charts.ts';
import { rollingMean } from '../../core/report/training-section.ts';
import { testTempDir } from '../helpers/temp-dir.ts';

const fixtures = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'fixtures', 'report');
const fixture = (name: string) => path.join(fixtures, name);
const tempDir = () => testTempDir('tbt-report-');

async function run(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const stdout: string[] = [];
  const stderr: string[] = [];
  const io: CommandIo = { out: (t) => stdout.push(t), err: (t) => stderr.push(t) };
  const code = await report(args, io);
  return { code, stdout: stdout.join('\n'), stderr: stderr.join('\n') };
}

async function build(args: string[]): Promise<{ html: string; md: string; stdout: string; out: string }> {
  const out = tempDir();
  const r = await run(['--out', out, ...args]);
  assert.equal(r.code, 0, r.stderr);
  return {
    html: fs.readFileSync(path.join(out, 'index.html'), 'utf8'),
    md: fs.readFileSync(path.join(out, 'summary.md'), 'utf8'),
    stdout: r.stdout,
    out,
  };
}

const FULL = [
  '--campaign',
  'c-42',
  '--probe',
  fixture('probe-aggregates.jsonl'),
  '--steps',
  fixture('steps.jsonl'),
  '--before',
  fixture('eval-before.json'),
  '--after',
  fixture('eval-after.json'),
  '--costs',
  fixture('costs.json'),
];

/** The <svg> inside <figure id="...">. */
function figureSvg(html: string, id: string): string {
  const m = new RegExp(`<figure id="${id}">\\s*(<svg[\\s\\S]*?</svg>)`).exec(html);
  assert.ok(m, `figure ${id} with an <svg>`);
  return m[1]!;
}

const countOf = (text: string, pattern: RegExp) => (text.match(pattern) ?? []).length;
const bars = (svg: string) => countOf(svg, /<rect class="bar"/g);
const pointsIn = (svg: string) => countOf(svg, /<circle class="point"/g);

test('full report: every section, one <svg> per plot with the right number of marks', async () => {
  const { html, stdout, out } = await build(FULL);
  assert.equal(stdout, `wrote ${path.join(out, 'index.html')}\nwrote ${path.join(out, 'summary.md')}`);
  for (const id of ['summary', 'probe', 'training', 'evaluation', 'cost'])
    assert.match(html, new RegExp(`<section id="${id}">`), `section ${id}`);
  assert.equal(countOf(html, /<svg\b/g), 9);
  assert.equal(countOf(html, /<figure id=/g), 9);
  assert.equal(countOf(html, /<figcaption>[^<]+<\/figcaption>/g), 9, 'every plot has a one-line caption');

  // Probe: 5 bands, 3 retained (hard, medium, easy) in the accent colour; 10 pass-rate bins.
  const bands = figureSvg(html, 'probe-bands');
  assert.equal(bars(bands), 5);
  assert.equal(countOf(bands, /<rect class="bar"[^>]*fill="#2563eb"/g), 3);
  assert.equal(countOf(bands, /<rect class="bar"[^>]*fill="#cbd5e1"/g), 2);
  assert.match(bands, /retained for training/);
  assert.equal(bars(figureSvg(html, 'probe-pass-rate')), 10);

  // Training: 24 steps in each line plot; the reward plot adds a trailing mean without markers.
  const reward = figureSvg(html, 'training-reward');
  assert.equal(pointsIn(reward), 24);
  assert.equal(countOf(reward, /<polyline class="line"/g), 2);
  assert.equal(pointsIn(figureSvg(html, 'training-informative')), 24);
  assert.equal(pointsIn(figureSvg(html, 'training-loss')), 24);

  // Evaluation: (3 domains + all) x (before, after) bars; one cost point per domain and overall per eval.
  assert.equal(bars(figureSvg(html, 'eval-pass1')), 8);
  assert.equal(countOf(figureSvg(html, 'eval-pass1'), /class="whisker"/g), 8);
  assert.equal(bars(figureSvg(html, 'eval-all-pass')), 8);
  const scatter = figureSvg(html, 'eval-cost');
  assert.equal(pointsIn(scatter), 8);
  assert.equal(countOf(scatter, /<circle class="point"[^>]*r="7"/g), 2, 'one large point per evaluation');
  const links = /<g class="links"[^>]*>([\s\S]*?)<\/g>/.exec(scatter)?.[1] ?? '';
  assert.equal(countOf(links, /<line /g), 4, 'each domain and the overall point joined from before to after');

  // Costs: probing, training, evaluation.
  assert.equal(bars(figureSvg(html, 'cost-components')), 3);

  for (const svg of html.match(/<svg[\s\S]*?<\/svg>/g)!) {
    assert.match(svg, /^<svg xmlns="http:\/\/www\.w3\.org\/2000\/svg"/, 'standalone svg');
    assert.match(svg, /<title>[^<]+<\/title>/, 'svg has a title');
    assert.match(svg, /class="axis axis-y"/, 'svg has a y axis');
  }
});

test('the page is static and self-contained: no scripts, no external references, deterministic', async () => {
  const { html } = await build(FULL);
  assert.doesNotMatch(html, /<script|<link|<img|<iframe|\bsrc=|url\(|@import/i);
  const urls = html.match(/https?:\/\/[^\s"'<)]+/g) ?? [];
  assert.deepEqual([...new Set(urls)], ['http://www.w3.org/2000/svg'], 'only the SVG namespace');
  assert.match(
    html,
    /<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">/,
  );
  assert.match(html, /<style>/);
  const again = await build(FULL);
  assert.equal(again.html, html, 'same inputs, same page');
});

test('headline numbers: the same formatting in the summary cards, the tables and summary.md', async () => {
  const { html, md } = await build(FULL);
  // after: pass@1 = 42/60; 6 of 12 tasks at 5/5; pass@5 = 11/12; pass^5 = mean C(c,5)/C(5,5) = 6/12.
  const cards: [string, string][] = [
    ['pass@1 (after)', '70.00%'],
    ['Observed 5/5 (after)', '6 of 12'],
    ['pass@5 (after)', '91.67%'],
    ['pass^5 (after)', '50.00%'],
    // (18.40 + 212.75 + 0.313... + 0.291...) / 6
    ['All-in cost per reliable task', '$38.63'],
    ['Training reward', '0.630'],
    ['Tasks selected by probing', '22 of 32'],
  ];
  for (const [label, value] of cards) {
    assert.ok(
      html.includes(`<div class="label">${label.replace(/&/g, '&amp;')}</div><div class="value">${value}</div>`),
      `card ${label} = ${value}`,
    );
    assert.ok(md.includes(`| ${label} | ${value} |`), `summary.md row ${label} = ${value}`);
  }
  assert.match(
    html,
    /<div class="detail">before: 53\.33%; change \+16\.67 pts, 95% paired bootstrap \[\+[\d.]+, \+[\d.]+\] pts<\/div>/,
  );
  // The same numbers in the tables.
  assert.match(md, /^\| pass@1 \| 53\.33% \| 70\.00% \| \+16\.67 pts \| \[/m);
  assert.match(md, /^\| observed 5\/5 \| 3 \(25\.00%\) \| 6 \(50\.00%\) \| \+3 tasks \|/m);
  assert.match(
    md,
    new RegExp(
      String.raw`^\| all \| 12 \| 60 \| 70\.00% \| \[57\.5, 80\.1\] \| 91\.67% \| 50\.00% \| ` +
        String.raw`6 \(50\.00%\) \| \[25\.4, 74\.6\] \| 11 \(91\.67%\) \| \$0\.0048 \|$`,
      'm',
    ),
  );
  assert.ok(html.includes('<td class="num">70.00%</td>'));
});

test(
  'pass^k is the unbiased C(c,k)/C(n,k), never (c/n)^k, and is reported apart from the observed k/k ' + 'count',
  async () => {
    const { html, md } = await build(['--eval', fixture('eval-after.json')]);
    // after successes out of 5: neobank 5 5 1 4, retail 5 5 3 0, travel 3 1 5 5.
    // mean (c/n)^5 = (6 + 2 (0.2^5) + 0.8^5 + 2 (0.6^5)) / 12 = 54.03% would be the biased figure.
    assert.ok(!html.includes('54.03%') && !md.includes('54.03%'), 'the biased (c/n)^k never appears');
    assert.match(md, /^\| pass\^5 \(evaluation\) \| 50\.00% \| unbiased C\(c,k\)\/C\(n,k\), not \(c\/n\)\^k \|$/m);
    assert.match(md, /^\| Observed 5\/5 \(evaluation\) \| 6 of 12 \|/m);
    assert.match(
      md,
      new RegExp(
        String.raw`\| domain \| tasks \| attempts \| pass@1 \| Wilson 95% \| pass@5 \| pass\^5 \| ` +
          String.raw`observed 5\/5 \| Wilson 95% \| solved ≥ 1 \| cost \/ attempt, all roles \|`,
      ),
    );
  },
);

test('markdown summary: the headline table and every table of the page', async () => {
  const { html, md } = await build(FULL);
  assert.match(md, /^# Campaign c-42$/m);
  assert.match(md, /^\| metric \| value \| detail \|\n\|:---\|---:\|:---\|$/m);
  for (const heading of ['## Summary', '## Probe difficulty', '## Training', '## Evaluation', '## Cost'])
    assert.ok(md.includes(`\n${heading}\n`), heading);
  const tablesInHtml = countOf(html, /<table>/g);
  assert.equal(countOf(md, /^\|:---/gm), tablesInHtml + 1, 'each table of the page, plus the headline table');
  assert.match(md, /^\| hard \(8%–40%\) \| 11 \| 34\.38% \| yes \| 9 \|$/m);
  assert.match(md, /^\| probing \| \$18\.40 \| .*costs\.json \|$/m);
  assert.match(md, /^\| training \| \$212\.75 \|/m);
  assert.match(md, /^\| evaluation \| \$0\.604 \| all-roles campaign cost of before \+ after \|$/m);
  assert.match(md, /^\| steps recorded \| 24 \|$/m);
  assert.match(md, /^\| neobank \| 4 \| 50\.00% \| 75\.00% \| \+25\.00 pts \| \[/m);
});

test("two cost figures: policy only (the reference's) and all roles, in the tables and the headline", async () => {
  const { md } = await build(FULL);
  // before: policy $0.255, all roles $0.3126 over 32 passing attempts and 3 tasks at 5/5;
  // after: policy $0.2334, all roles $0.291 over 42 and 6.
  for (const row of [
    '| before | policy only | $0.255 | 60 | 32 | $0.008 | 3 (k = 5) | $0.085 |',
    '| before | all roles | $0.313 | 60 | 32 | $0.0098 | 3 (k = 5) | $0.104 |',
    '| after | policy only | $0.233 | 60 | 42 | $0.0056 | 6 (k = 5) | $0.039 |',
    '| after | all roles | $0.291 | 60 | 42 | $0.0069 | 6 (k = 5) | $0.048 |',
    '| cost per successful attempt, policy only | $0.008 | $0.0056 | -$0.0024 |  |',
    '| cost per successful attempt, all roles | $0.0098 | $0.0069 | -$0.0028 |  |',
    '| cost per reliable task, policy only | $0.085 | $0.039 | -$0.046 |  |',
    '| cost per reliable task, all roles | $0.104 | $0.048 | -$0.056 |  |',
  ])
    assert.ok(md.split('\n').includes(row), `summary.md row: ${row}`);
  assert.match(
    md,
    /\| All-in cost per reliable task \| \$38\.63 \| .*evaluation only: policy only \$0\.039, all roles \$0\.048 \|$/m,
  );
  assert.match(
    md,
    /policy only counts the evaluated model's inference tokens of the evaluation, as the reference's \$8\.00/,
  );
  assert.doesNotMatch(md, /not recorded/);

  const single = await build(['--eval', fixture('eval-after.json')]);
  assert.ok(
    single.md.includes(
      "| Cost per reliable task (evaluation, policy only) | $0.039 | $0.233 (the evaluated model's inference tokens, " +
        'as the reference counts) / 6 tasks at 5/5; all roles $0.048; per successful attempt: policy only $0.0056, ' +
        'all roles $0.0069; training and probing not given |',
    ),
    single.md,
  );
});

test('an aggregate written before the policy-only figures: read, its policy-only figures "not recorded"', async () => {
  const old = fixture('eval-after-schema1.json');
  assert.equal(JSON.parse(fs.readFileSync(old, 'utf8')).schema_version, 1, 'a file the old code wrote');
  const { md } = await build(['--before', fixture('eval-before.json'), '--after', old]);
  for (const row of [
    '| after | policy only | not recorded | 60 | 42 | not recorded | 6 (k = 5) | not recorded |',
    '| after | all roles | $0.291 | 60 | 42 | $0.0069 | 6 (k = 5) | $0.048 |',
    '| cost per reliable task, policy only | $0.085 | not recorded | n/a |  |',
    '| cost per reliable task, all roles | $0.104 | $0.048 | -$0.056 |  |',
  ])
    assert.ok(md.split('\n').includes(row), `summary.md row: ${row}`);
  assert.match(md, /Policy-only cost not recorded in after: .*run 'tbt eval aggregate' again/);
  const single = await build(['--eval', old]);
  assert.match(
    single.md,
    /^\| Cost per reliable task \(evaluation, all roles\) \| \$0\.048 \| .*policy only not recorded;/m,
  );
});

test('a single evaluation without prices: no cost plot, a note on how to get one', async () => {
  const { html } = await build(['--eval', fixture('eval-no-cost.json')]);
  assert.equal(countOf(html, /<svg\b/g), 2);
  assert.doesNotMatch(html, /id="eval-cost"/);
  assert.doesNotMatch(html, /<section id="cost">/);
  assert.match(html, /No cost in evaluation \(run &#39;tbt eval aggregate&#39; with --prices/);
  assert.match(html, /<div class="detail">Wilson 95% \[57\.5, 80\.1\]; 42 of 60 attempts<\/div>/);
});

test('training steps alone: three line plots, no other section', async () => {
  const { html } = await build(['--steps', fixture('steps.jsonl'), '--title', 'Steps <only>']);
  assert.equal(countOf(html, /<section id=/g), 2);
  assert.equal(countOf(html, /<svg\b/g), 3);
  assert.match(html, /<h1>Steps &lt;only&gt;<\/h1>/);
});

function writeTemp(name: string, content: string): string {
  const file = path.join(tempDir(), name);
  fs.writeFileSync(file, content);
  return file;
}

const goodStep = (step: number, extra: Record<string, unknown> = {}) =>
  JSON.stringify({
    step,
    mean_reward: 0.5,
    informative_group_fraction: 0.7,
    loss: 0.01,
    grad_norm: 1,
    groups: 18,
    infra_errors_refilled: 0,
    zero_variance_replaced: 2,
    wall_s: 600,
    ...extra,
  });

test('a step without an update (every group zero variance) is named, and its zero gradient norm left out', async () => {
  const steps = [
    goodStep(1, { grad_norm: 2 }),
    goodStep(2, { informative_group_fraction: 0, grad_norm: 0, loss: 0 }),
    goodStep(3, { grad_norm: 4 }),
  ];
  const { md } = await build(['--steps', writeTemp('steps.jsonl', steps.join('\n'))]);
  assert.match(md, /^\| steps without an update \(every group zero variance\) \| 2 \|$/m);
  assert.match(md, /^\| gradient norm of the updates, median \/ max \| 3(\.0+)? \/ 4(\.0+)? \|$/m);
  assert.match(md, /Step 2 made no update: every group's rollouts got the same reward\./);
  const { md: none } = await build(['--steps', writeTemp('steps.jsonl', [goodStep(1), goodStep(2)].join('\n'))]);
  assert.match(none, /^\| steps without an update \(every group zero variance\) \| none \|$/m);
});

test('overlapped steps: a policy-lag plot, the mean and the most per step; none for a synchronous run', async () => {
  const lagged = [
    goodStep(1, { lag_mean: 0, lag_max: 0 }),
    goodStep(2, { lag_mean: 0.75, lag_max: 1 }),
    goodStep(3, { lag_mean: 0.5, lag_max: 1 }),
  ];
  const { html } = await build(['--steps', writeTemp('steps.jsonl', lagged.join('\n'))]);
  const lag = figureSvg(html, 'training-lag');
  assert.equal(countOf(lag, /<polyline class="line"/g), 2, 'mean and most');
  assert.equal(pointsIn(lag), 6);
  const synchronous = [goodStep(1, { lag_mean: 0, lag_max: 0 }), goodStep(2, { lag_mean: null, lag_max: null })];
  const { html: plain } = await build(['--steps', writeTemp('steps.jsonl', synchronous.join('\n'))]);
  assert.doesNotMatch(plain, /id="training-lag"/);
  assert.equal(countOf(plain, /<svg\b/g), 3);
});

async function fails(args: string[], expected: RegExp): Promise<void> {
  const out = tempDir();
  const r = await run(['--out', out, ...args]);
  assert.equal(r.code, 1, `exit 1 expected, stderr: ${r.stderr}`);
  assert.match(r.stderr, expected);
  assert.ok(!fs.existsSync(path.join(out, 'index.html')), 'nothing written');
}

test('malformed inputs: the error names the file, the line for JSONL, and the field', async () => {
  const { loss: _loss, ...noLoss } = JSON.parse(goodStep(3));
  let file = writeTemp('steps.jsonl', [goodStep(1), goodStep(2), JSON.stringify(noLoss)].join('\n'));
  await fails(
    ['--steps', file],
    new RegExp(`^${file.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}:3: field loss: missing \\(expected number\\)$`),
  );
  file = writeTemp('steps.jsonl', [goodStep(1), goodStep(2, { informative_group_fraction: 1.5 })].join('\n'));
  await fails(['--steps', file], /steps\.jsonl:2: field informative_group_fraction: .*\(got 1\.5\)/);
  file = writeTemp('steps.jsonl', [goodStep(1), '{"step": 2,'].join('\n'));
  await fails(['--steps', file], /steps\.jsonl:2: invalid JSON/);
  file = writeTemp('steps.jsonl', [goodStep(1), '', goodStep(1)].join('\n'));
  await fails(['--steps', file], /steps\.jsonl:3: field step: step 1 already appeared on line 1/);
  file = writeTemp('steps.jsonl', [goodStep(1), goodStep(2, { mean_reward: 'high' })].join('\n'));
  await fails(['--steps', file], /steps\.jsonl:2: field mean_reward: .*expected number.*\(got "high"\)/);

  const probeLines = fs.readFileSync(fixture('probe-aggregates.jsonl'), 'utf8').trim().split('\n');
  const bad = JSON.parse(probeLines[4]!);
  bad.difficulty = 'impossible';
  file = writeTemp('aggregates.jsonl', [...probeLines.slice(0, 4), JSON.stringify(bad)].join('\n'));
  await fails(['--probe', file], /aggregates\.jsonl:5: field difficulty: .*\(got "impossible"\)/);

  const aggregate = JSON.parse(fs.readFileSync(fixture('eval-after.json'), 'utf8'));
  aggregate.domains.retail.pass_at_1.estimate = '65%';
  file = writeTemp('after.json', JSON.stringify(aggregate));
  await fails(
    ['--before', fixture('eval-before.json'), '--after', file],
    new RegExp(
      String.raw`after\.json: field domains\.retail\.pass_at_1\.estimate: .*\(got "65%"\) ` +
        String.raw`\(expected the output of 'tbt eval aggregate --out'\)`,
    ),
  );
  const noPolicyOnly = JSON.parse(fs.readFileSync(fixture('eval-after.json'), 'utf8'));
  delete noPolicyOnly.cost.domains.travel.policy_only;
  file = writeTemp('after.json', JSON.stringify(noPolicyOnly));
  await fails(['--eval', file], /after\.json: field cost\.domains\.travel\.policy_only: missing \(expected object\)/);
  file = writeTemp('manifest.json', JSON.stringify({ tool: 'tbt prepare' }));
  await fails(['--eval', file], /manifest\.json: field kind: /);
  file = writeTemp('eval.json', '{"kind": ');
  await fails(['--eval', file], /eval\.json: invalid JSON/);

  file = writeTemp('costs.json', JSON.stringify({ probing: 10, traning: 200 }));
  await fails(['--costs', file], /costs\.json: field traning: unknown field/);
  file = writeTemp('costs.json', JSON.stringify({ probing: -1 }));
  await fails(['--costs', file], /costs\.json: field probing: .*\(got -1\)/);
  await fails(['--steps', path.join(tempDir(), 'absent.jsonl')], /absent\.jsonl: cannot read \(no such file\)/);
});

test('flags: at least one input, --before with --after, --out required', async () => {
  const noInput = await run(['--out', tempDir()]);
  assert.equal(noInput.code, 2);
  assert.match(noInput.stderr, /at least one input is required/);
  const half = await run(['--out', tempDir(), '--before', fixture('eval-before.json')]);
  assert.equal(half.code, 2);
  assert.match(half.stderr, /--before and --after go together/);
  const noOut = await run(['--eval', fixture('eval-after.json')]);
  assert.equal(noOut.code, 2);
  assert.match(noOut.stderr, /--out DIR is required/);
  const help = await run(['--help']);
  assert.equal(help.code, 0);
  assert.match(help.stdout, /usage: tbt report/);
});

test('before and after over different tasks: no paired interval, a note that says why', () => {
  const input = loadReportInput({ before: fixture('eval-before.json'), after: fixture('eval-after.json') });
  input.after!.aggregate.tasks = input.after!.aggregate.tasks.filter((t) => t.uid !== 'retail/t4');
  const html = renderHtml(buildReportModel(input));
  assert.match(
    html,
    /No paired comparison: paired comparison needs the same tasks on both sides: 1 only in A \(retail\/t4\)/,
  );
  assert.doesNotMatch(html, /Paired per-task comparison by domain/);
});

test('charts: nice ticks, bins, escaping and validation', () => {
  assert.deepEqual(niceTicks(0, 1).ticks, [0, 0.2, 0.4, 0.6, 0.8, 1]);
  assert.deepEqual(niceTicks(0, 11, 5, true).ticks, [0, 2, 4, 6, 8, 10, 12]);
  assert.deepEqual(niceTicks(0, 3, 5, true).ticks, [0, 1, 2, 3]);
  assert.deepEqual(
    binValues([0, 0.05, 0.1, 0.99, 1], 0, 1, 10).map((b) => b.count),
    [2, 1, 0, 0, 0, 0, 0, 0, 0, 2],
  );
  assert.throws(() => binValues([1.2], 0, 1, 10), /outside/);
  const svg = barChart({
    title: 'A & B',
    categories: ['<x>', 'y'],
    series: [{ name: 's', values: [1, null] }],
    yLabel: 'n',
  });
  assert.match(svg, /<title>A &amp; B<\/title>/);
  assert.match(svg, />&lt;x&gt;</);
  assert.equal(bars(svg), 1, 'a null value draws no bar');
  assert.match(svg, />n\/a</);
  assert.throws(
    () => barChart({ title: 't', categories: ['a'], series: [{ name: 's', values: [Number.NaN] }], yLabel: 'n' }),
    /finite/,
  );
  assert.throws(
    () => barChart({ title: 't', categories: ['a', 'b'], series: [{ name: 's', values: [1] }], yLabel: 'n' }),
    /1 values for 2 categories/,
  );
  assert.deepEqual(rollingMean([1, 2, 3, 4], 2), [1, 1.5, 2.5, 3.5]);
  const scatter = scatterChart({
    title: 's',
    series: [{ name: 'a', points: [{ x: 1, y: 0.5, label: 'p' }] }],
    xLabel: 'x',
    yLabel: 'y',
    yDomain: [0, 1],
  });
  assert.equal(pointsIn(scatter), 1);
});
