import { count, decimal, duration, percent, reward } from './format.ts';
import type { Figure, Headline, SectionPart, StepsInput, Table, TrainingStep } from './report-model.ts';
import { formats, lineChart, type LineSeries } from './svg-charts.ts';

/** Training progress per step: reward, the share of groups that carry a signal, and the loss. */

/** Window of the trailing mean: 5 steps, or a twentieth of the run when that is longer. */
export function smoothingWindow(steps: number): number {
  return Math.max(5, Math.round(steps / 20));
}

/** Trailing mean over the last `window` values (fewer at the start). */
export function rollingMean(values: readonly number[], window: number): number[] {
  const out: number[] = [];
  let sum = 0;
  values.forEach((v, i) => {
    sum += v;
    if (i >= window) sum -= values[i - window]!;
    out.push(sum / Math.min(i + 1, window));
  });
  return out;
}

/** Every report with training points to the benchmark that tests learning on tasks never trained on. */
export const LEARNING_BENCHMARK_NOTE =
  'The reward above is measured on the training pool itself. Whether training generalizes is measured by ' +
  '`npm run bench:learning`: pass@1 on held-out tasks before and after training, with a paired bootstrap ' +
  'interval (docs/learning-benchmark.md).';

/** What the section reports of the steps: the trailing mean, totals, and the steps that made no update. */
interface TrainingStats {
  steps: readonly TrainingStep[];
  first: TrainingStep;
  last: TrainingStep;
  n: number;
  window: number;
  smoothed: number[];
  /** Whether the run is long enough (two windows) to draw and quote the trailing mean. */
  smooth: boolean;
  groups: number;
  refilled: number;
  replaced: number;
  wall: number;
  meanInformative: number;
  idle: number[];
  gradNorms: number[];
}

function trainingStats(steps: readonly TrainingStep[]): TrainingStats {
  const n = steps.length;
  const window = smoothingWindow(n);
  const smoothed = rollingMean(
    steps.map((s) => s.mean_reward),
    window,
  );
  const sum = (f: (s: TrainingStep) => number) => steps.reduce((acc, s) => acc + f(s), 0);
  return {
    steps,
    first: steps[0]!,
    last: steps[steps.length - 1]!,
    n,
    window,
    smoothed,
    smooth: n >= 2 * window,
    groups: sum((s) => s.groups),
    refilled: sum((s) => s.infra_errors_refilled),
    replaced: sum((s) => s.zero_variance_replaced),
    wall: sum((s) => s.wall_s),
    meanInformative: sum((s) => s.informative_group_fraction) / n,
    // A step whose groups all had zero variance makes no update (the learner skips it); its reward is still what
    // the rollouts got, so the curve keeps it, but it must not read as a measured update.
    idle: steps.filter((s) => s.informative_group_fraction === 0).map((s) => s.step),
    gradNorms: steps.filter((s) => s.informative_group_fraction > 0).map((s) => s.grad_norm),
  };
}

function trainingHeadline(t: TrainingStats): Headline[] {
  const { first, last, n, window, smooth } = t;
  const rewardRange =
    t.steps.length > 1
      ? `step ${first.step}: ${reward(first.mean_reward)} → step ${last.step}: ${reward(last.mean_reward)}`
      : `step ${last.step}`;
  return [
    {
      label: 'Training reward',
      value: reward(smooth ? t.smoothed[n - 1]! : last.mean_reward),
      detail: `${smooth ? `mean of the last ${window} steps; ` : ''}${rewardRange} (${count(n)} steps)`,
    },
    {
      label: 'Weights trained',
      value: last.training_mode === 'lora' ? 'LoRA adapters' : 'all (full fine-tuning)',
      detail:
        last.training_mode === 'lora'
          ? "learner.lora: the base model frozen; the policy servers hot-load each step's adapter"
          : 'every weight updated; the policy servers load the full weights each step',
    },
    {
      label: 'Informative groups',
      value: percent(t.meanInformative),
      detail:
        `of the groups drawn, mean over steps; ${count(t.replaced)} zero-variance groups replaced, ` +
        `${count(t.refilled)} infrastructure errors refilled`,
    },
  ];
}

function rewardFigure(t: TrainingStats): Figure {
  const { steps, window, smooth, idle } = t;
  const rewardSeries: LineSeries[] = [
    { name: 'mean reward', points: steps.map((s) => ({ x: s.step, y: s.mean_reward })) },
  ];
  if (smooth) {
    rewardSeries.push({
      name: `trailing mean of ${window} steps`,
      points: steps.map((s, i) => ({ x: s.step, y: t.smoothed[i]! })),
      markers: false,
      dashed: true,
      color: '#d97706',
    });
  }
  const idleNote = idle.length
    ? ` ${idle.length === 1 ? 'Step' : 'Steps'} ${idle.join(', ')} made no update: every group's rollouts got ` +
      'the same reward.'
    : '';
  return {
    id: 'training-reward',
    caption:
      `Mean reward of the rollouts in each ` +
      `step${smooth ? `, with a trailing mean over ${window} steps` : ''}.${idleNote}`,
    svg: lineChart({
      title: 'Mean reward per step',
      series: rewardSeries,
      xLabel: 'step',
      yLabel: 'mean reward',
      xFormat: formats.integer,
    }),
  };
}

function informativeFigure(steps: readonly TrainingStep[]): Figure {
  return {
    id: 'training-informative',
    caption: 'Fraction of groups whose rollouts did not all get the same reward (the groups that carry a GRPO signal).',
    svg: lineChart({
      title: 'Informative-group fraction per step',
      series: [
        {
          name: 'informative groups',
          points: steps.map((s) => ({ x: s.step, y: s.informative_group_fraction })),
          color: '#0d9488',
        },
      ],
      xLabel: 'step',
      yLabel: 'fraction of groups',
      xFormat: formats.integer,
      yFormat: formats.percent,
      yDomain: [0, 1],
    }),
  };
}

function lossFigure(steps: readonly TrainingStep[]): Figure {
  return {
    id: 'training-loss',
    caption: 'Policy loss of each update step.',
    svg: lineChart({
      title: 'Loss per step',
      series: [{ name: 'loss', points: steps.map((s) => ({ x: s.step, y: s.loss })), color: '#9333ea' }],
      xLabel: 'step',
      yLabel: 'loss',
      xFormat: formats.integer,
    }),
  };
}

/** The policy lag of overlapped steps (training.max_staleness > 0); none for a synchronous run, where it is 0. */
function lagFigure(steps: readonly TrainingStep[]): Figure | undefined {
  const lagged = steps.filter((s) => typeof s.lag_max === 'number');
  if (!lagged.some((s) => s.lag_max! > 0)) return undefined;
  return {
    id: 'training-lag',
    caption:
      'Weight versions the trained episodes lagged behind the weights each update started from: the next ' +
      "step samples during this one's update (training.max_staleness, docs/async-training.md).",
    svg: lineChart({
      title: 'Policy lag per step',
      series: [
        { name: 'mean lag', points: lagged.map((s) => ({ x: s.step, y: s.lag_mean ?? 0 })), color: '#2563eb' },
        { name: 'most', points: lagged.map((s) => ({ x: s.step, y: s.lag_max! })), color: '#dc2626', dashed: true },
      ],
      xLabel: 'step',
      yLabel: 'versions',
      xFormat: formats.integer,
    }),
  };
}

function totalsTable(t: TrainingStats): Table {
  const { first, last, idle, gradNorms } = t;
  return {
    caption: 'Training totals',
    header: ['quantity', 'value'],
    align: ['left', 'right'],
    rows: [
      ['steps recorded', count(t.n)],
      ['first / last step', `${first.step} / ${last.step}`],
      ['mean reward, first / last step', `${reward(first.mean_reward)} / ${reward(last.mean_reward)}`],
      ['mean informative-group fraction', percent(t.meanInformative)],
      ['groups trained on', count(t.groups)],
      ['zero-variance groups replaced', count(t.replaced)],
      ['infrastructure errors refilled', count(t.refilled)],
      ['steps without an update (every group zero variance)', idle.length ? idle.join(', ') : 'none'],
      [
        'gradient norm of the updates, median / max',
        gradNorms.length ? `${decimal(median(gradNorms), 3)} / ${decimal(Math.max(...gradNorms), 3)}` : '—',
      ],
      ['learner update time (rollouts not included)', duration(t.wall)],
      ...versionMixRows(t.steps),
    ],
  };
}

/**
 * Trained tokens per sampler weight version over every step, and the steps that trained on more than one
 * (`training.partial_rollouts`); no rows when no step recorded a mix.
 */
function versionMixRows(steps: readonly TrainingStep[]): string[][] {
  const mixes = steps.filter((s) => s.version_mix && Object.keys(s.version_mix).length > 0);
  if (mixes.length === 0) return [];
  const mixed = mixes.filter((s) => Object.keys(s.version_mix!).length > 1);
  const tokens = mixes.reduce((n, s) => n + Object.values(s.version_mix!).reduce((a, b) => a + b, 0), 0);
  const mixedTokens = mixed.reduce((n, s) => {
    const counts = Object.values(s.version_mix!);
    return n + counts.reduce((a, b) => a + b, 0) - Math.max(...counts);
  }, 0);
  return [
    ['steps trained on tokens of several weight versions', mixed.length ? mixed.map((s) => s.step).join(', ') : 'none'],
    ["trained tokens outside their step's main version", tokens ? percent(mixedTokens / tokens) : '—'],
  ];
}

export function trainingSection(input: StepsInput): SectionPart {
  const steps = input.steps;
  const t = trainingStats(steps);
  return {
    headline: trainingHeadline(t),
    section: {
      id: 'training',
      title: 'Training',
      caption:
        `${count(t.n)} recorded steps (${t.first.step} to ${t.last.step}), ${count(t.groups)} groups in all, ` +
        `${duration(t.wall)} in learner updates (rollouts not included).`,
      figures: [rewardFigure(t), informativeFigure(steps), lossFigure(steps), lagFigure(steps)].filter(
        (f): f is Figure => f !== undefined,
      ),
      tables: [totalsTable(t)],
      notes: [LEARNING_BENCHMARK_NOTE],
    },
  };
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}
