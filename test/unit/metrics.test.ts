import assert from 'node:assert/strict';
import { test } from 'node:test';
import { dollars, percent } from '../../core/report/format.ts';
import {
  bootstrapMeanIntervals,
  campaignCost,
  clopperPearsonInterval,
  costFigures,
  costPerReliableTask,
  costPerSuccessfulAttempt,
  meanPassHatK,
  mulberry32,
  normalQuantile,
  observedAllPass,
  pairedComparison,
  passAt1,
  passAtK,
  passHatK,
  summarize,
  usageCost,
  wilsonInterval,
  type PriceTable,
  type TaskOutcome,
} from '../../core/metrics.ts';

function close(actual: number, expected: number, tolerance = 1e-12, message = ''): void {
  assert.ok(Math.abs(actual - expected) <= tolerance, `${message} expected ${expected}, got ${actual}`);
}

function binomial(n: number, k: number): bigint {
  if (k < 0 || k > n) return 0n;
  let r = 1n;
  for (let i = 0; i < k; i++) r = (r * BigInt(n - i)) / BigInt(i + 1);
  return r;
}

/** Exact ratio of two big integers as a double, via 60 digits of scaling. */
function ratio(num: bigint, den: bigint): number {
  const scale = 10n ** 60n;
  return Number((num * scale) / den) / 1e60;
}

test('pass@k by hand: n=5, c=2, k=2 gives 1 - C(3,2)/C(5,2) = 1 - 3/10', () => {
  close(passAtK(5, 2, 2), 0.7);
  close(passAtK(5, 2, 1), 0.4); // k = 1 is c/n
  assert.equal(passAtK(5, 0, 3), 0);
  assert.equal(passAtK(5, 5, 3), 1);
  assert.equal(passAtK(5, 3, 3), 1); // n - c < k: some success is certain
});

test("pass^k is C(c,k)/C(n,k), not the reference aggregator's (c/n)^k", () => {
  close(passHatK(4, 2, 2), 1 / 6);
  assert.notEqual(passHatK(4, 2, 2), (2 / 4) ** 2); // (c/n)^k = 0.25
  close(passHatK(20, 19, 20), 0); // cannot pass 20 of 20 when one attempt failed
  assert.ok((19 / 20) ** 20 > 0.35); // while (c/n)^k claims 36%
  close(passHatK(4, 3, 1), 0.75);
  assert.equal(passHatK(4, 4, 4), 1);
});

test('pass@k and pass^k stay exact for n = 1000 (compared with big-integer binomials)', () => {
  for (const [n, c, k] of [
    [1000, 10, 500],
    [1000, 990, 500],
    [1000, 500, 20],
    [1000, 3, 1000],
    [1000, 1000, 1000],
  ] as const) {
    const hat = ratio(binomial(c, k), binomial(n, k));
    const miss = ratio(binomial(n - c, k), binomial(n, k));
    close(passHatK(n, c, k), hat, 1e-12 * Math.max(hat, 1e-300), `pass^${k} n=${n} c=${c}`);
    close(passAtK(n, c, k), 1 - miss, 1e-12, `pass@${k} n=${n} c=${c}`);
  }
  assert.throws(() => passAtK(10, 11, 1), /0 <= c <= n/);
  assert.throws(() => passAtK(10, 5, 11), /k must be an integer/);
});

test('pass@1 and observed k/k per task', () => {
  const tasks: TaskOutcome[] = [
    { uid: 'a', domain: 'x', n: 4, c: 4 },
    { uid: 'b', domain: 'x', n: 4, c: 2 },
    { uid: 'c', domain: 'y', n: 4, c: 0 },
    { uid: 'd', domain: 'y', n: 5, c: 5 }, // 5/5 is not 4/4
  ];
  close(passAt1(tasks), (1 + 0.5 + 0 + 1) / 4);
  assert.equal(observedAllPass(tasks, 4), 1);
  assert.equal(observedAllPass(tasks, 5), 1);
  close(meanPassHatK(tasks.slice(0, 3), 2), (1 + 1 / 6 + 0) / 3);
});

test("the reference's published arithmetic: 38 of 507 tasks = 7.50%, $925.80 / 38 = $24.36 per reliable task", () => {
  // 507 tasks x 20 repeats: 38 pass 20/20, 415 pass sometimes, 54 never; 5,242 passing attempts.
  const tasks: TaskOutcome[] = [];
  for (let i = 0; i < 507; i++) {
    const c = i < 38 ? 20 : i < 38 + 332 ? 11 : i < 38 + 415 ? 10 : 0;
    tasks.push({ uid: `t${i}`, domain: 'bench', n: 20, c });
  }
  const successes = tasks.reduce((s, t) => s + t.c, 0);
  assert.equal(successes, 5242);
  const reliable = observedAllPass(tasks, 20);
  assert.equal(reliable, 38);
  assert.equal(percent(reliable / 507), '7.50%');
  assert.equal(percent(passAt1(tasks)), '51.70%');
  assert.equal(percent(tasks.filter((t) => t.c > 0).length / 507), '89.35%');
  assert.equal(dollars(costPerReliableTask(925.8, reliable)), '$24.36');
  assert.equal(dollars(costPerSuccessfulAttempt(925.8, successes)), '$0.177');
  // After RL: $855.58 over 107 reliable tasks and 6,163 passing attempts.
  assert.equal(dollars(costPerReliableTask(855.58, 107)), '$8.00');
  assert.equal(dollars(costPerSuccessfulAttempt(855.58, 6163)), '$0.139');
  assert.equal(costPerReliableTask(925.8, 0), null);
  const summary = summarize(tasks, { ks: [1, 20] });
  assert.equal(summary.observed_all_pass.count, 38);
  assert.equal(summary.solved_at_least_once.count, 453);
  close(summary.pass_at_k.find((x) => x.k === 20)!.estimate, 453 / 507);
  close(summary.pass_hat_k.find((x) => x.k === 20)!.estimate, 38 / 507);
});

test(
  'Wilson and Clopper-Pearson intervals match values computed in Python (Wilson formula, scipy binomtest ' + 'exact)',
  () => {
    const w = wilsonInterval(38, 507);
    close(w[0], 0.0550907279284147);
    close(w[1], 0.10120327961947022);
    const w0 = wilsonInterval(0, 10);
    close(w0[0], 0);
    close(w0[1], 0.2775327998628892);
    const cases: [number, number, number, number][] = [
      [38, 507, 0.05358269795984307, 0.10142638208398548],
      [0, 10, 0, 0.30849710781876294],
      [10, 10, 0.6915028921812371, 1],
      [3, 8, 0.08523341413759308, 0.7551367836335001],
    ];
    for (const [x, n, lo, hi] of cases) {
      const [l, h] = clopperPearsonInterval(x, n);
      close(l, lo, 1e-10, `CP lower ${x}/${n}`);
      close(h, hi, 1e-10, `CP upper ${x}/${n}`);
    }
    close(normalQuantile(0.975), 1.959963984540054, 1e-8);
    const w90 = wilsonInterval(38, 507, 0.9);
    assert.ok(w90[1] - w90[0] < w[1] - w[0], 'a 90% interval is narrower than a 95% one');
  },
);

test('cost: tokens x price per million, per role and for the campaign', () => {
  const price = { input_per_million: 1, output_per_million: 4, cached_input_per_million: 0.25 };
  close(usageCost({ input: 1_000_000, output: 500_000, cached_input: 2_000_000 }, price), 1 + 2 + 0.5);
  const prices: PriceTable = {
    policy: price,
    user: { ...price, input_per_million: 0.5 },
    judge: { input_per_million: 2, output_per_million: 8, cached_input_per_million: 1 },
  };
  const cost = campaignCost(
    [
      { policy: { input: 1000, output: 100, cached_input: 0 }, judge: { input: 10, output: 1, cached_input: 0 } },
      { policy: { input: 1000, output: 100, cached_input: 400 }, user: { input: 200, output: 20, cached_input: 0 } },
    ],
    prices,
  );
  close(cost.by_role.policy.cost, (2000 * 1 + 200 * 4 + 400 * 0.25) / 1e6);
  close(cost.by_role.user.cost, (200 * 0.5 + 20 * 4) / 1e6);
  close(cost.by_role.judge.cost, (10 * 2 + 8) / 1e6);
  close(cost.total, cost.by_role.policy.cost + cost.by_role.user.cost + cost.by_role.judge.cost);
  assert.deepEqual(cost.by_role.policy.tokens, { input: 2000, output: 200, cached_input: 400 });
});

test("two cost figures: policy only (the reference's $8.00) and all roles, over the same divisors", () => {
  // After RL in the reference: $855.58 of policy inference, 6,163 passing attempts, 107 tasks at 20/20. Our
  // simulated user and judge add $42.79 and $101.63 (tokens at $1 per million).
  const usd = { input_per_million: 1, output_per_million: 0, cached_input_per_million: 0 };
  const prices: PriceTable = { policy: usd, user: usd, judge: usd };
  const breakdown = campaignCost(
    [
      { policy: { input: 855_580_000, output: 0, cached_input: 0 } },
      {
        user: { input: 42_790_000, output: 0, cached_input: 0 },
        judge: { input: 101_630_000, output: 0, cached_input: 0 },
      },
    ],
    prices,
  );
  const f = costFigures(breakdown, 6163, 107);
  close(f.policy_only.campaign, 855.58, 1e-9);
  assert.equal(dollars(f.policy_only.per_reliable_task), '$8.00');
  assert.equal(dollars(f.policy_only.per_successful_attempt), '$0.139');
  close(f.all_roles.campaign, 1000, 1e-9);
  assert.equal(f.all_roles.campaign, breakdown.total, 'all roles is the breakdown total, to the bit');
  close(f.all_roles.per_reliable_task!, 1000 / 107, 1e-9);
  assert.equal(dollars(f.all_roles.per_reliable_task), '$9.35');
  assert.equal(dollars(f.all_roles.per_successful_attempt), '$0.162');
  const none = costFigures(breakdown, 0, 0);
  assert.deepEqual(
    [none.policy_only.per_successful_attempt, none.policy_only.per_reliable_task, none.all_roles.per_reliable_task],
    [null, null, null],
  );
});

test('mulberry32 and the bootstrap are deterministic under a seed', () => {
  const a = mulberry32(42);
  const b = mulberry32(42);
  const xs = Array.from({ length: 5 }, () => a());
  assert.deepEqual(
    xs,
    Array.from({ length: 5 }, () => b()),
  );
  assert.ok(xs.every((x) => x >= 0 && x < 1));
  assert.notDeepEqual(xs, Array.from({ length: 5 }, mulberry32(43)));
  const values = [0, 1, 1, 0, 1, 0.5, 0.25, 1, 0, 0.75];
  const one = bootstrapMeanIntervals([values], { resamples: 500, seed: 1 });
  assert.deepEqual(one, bootstrapMeanIntervals([values], { resamples: 500, seed: 1 }));
  const mean = values.reduce((s, x) => s + x) / values.length;
  assert.ok(one[0]![0] < mean && mean < one[0]![1]);
  assert.deepEqual(bootstrapMeanIntervals([[0.3, 0.3, 0.3]], { resamples: 50 }), [[0.3, 0.3]]);
});

test('paired comparison: per-task differences B - A with a seeded bootstrap interval', () => {
  const a: TaskOutcome[] = [
    { uid: 't1', domain: 'x', n: 4, c: 2 },
    { uid: 't2', domain: 'x', n: 4, c: 0 },
    { uid: 't3', domain: 'y', n: 4, c: 4 },
  ];
  const b: TaskOutcome[] = [
    { uid: 't3', domain: 'y', n: 4, c: 4 },
    { uid: 't1', domain: 'x', n: 4, c: 4 },
    { uid: 't2', domain: 'x', n: 4, c: 0 },
  ];
  const cmp = pairedComparison(a, b, { resamples: 1000, seed: 3 });
  close(cmp.pass_at_1.a, 0.5);
  close(cmp.pass_at_1.b, 2 / 3);
  close(cmp.pass_at_1.difference, 1 / 6);
  close(cmp.all_pass_rate.difference, 1 / 3);
  assert.equal(cmp.b_better, 1);
  assert.equal(cmp.equal, 2);
  assert.equal(cmp.b_worse, 0);
  const [lo, hi] = cmp.pass_at_1.interval;
  assert.ok(lo >= 0 && lo <= 1 / 6 && hi >= 1 / 6 && hi <= 0.5, `${lo} ${hi}`);
  assert.deepEqual(pairedComparison(a, b, { resamples: 1000, seed: 3 }), cmp);
  close(cmp.domains.x!.pass_at_1.difference, 0.25);
  assert.throws(() => pairedComparison(a, b.slice(1), { resamples: 10 }), /1 only in A \(t3\)/);
});
