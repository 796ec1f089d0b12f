import { BANDS, type BandName } from '../difficulty.ts';
import { count, percent } from './format.ts';
import type { ProbeInput, SectionPart } from './report-model.ts';
import { barChart, binValues, formats, histogramChart } from './svg-charts.ts';

/** The probe before training: how many tasks fell in each difficulty band, and which bands were kept. */

const edge = (x: number) => `${Math.round(100 * x)}%`;

/** "hard (8–40%)": the band and its range of success probability. */
export function bandLabel(band: (typeof BANDS)[number]): string {
  const name = band.name.replace('_', ' ');
  if (band.lower === 0) return `${name} (<${edge(band.upper)})`;
  if (band.upper === 1) return `${name} (≥${edge(band.lower)})`;
  return `${name} (${edge(band.lower)}–${edge(band.upper)})`;
}

export function probeSection(probe: ProbeInput): SectionPart {
  const rows = probe.rows;
  const total = rows.length;
  const retained = new Set<BandName>(probe.retainedBands);
  const perBand = BANDS.map((band) => {
    const inBand = rows.filter((r) => r.difficulty === band.name);
    return {
      band,
      tasks: inBand.length,
      selected: inBand.filter((r) => r.eligible).length,
      retained: retained.has(band.name),
    };
  });
  const selected = rows.filter((r) => r.eligible).length;
  const tooFewRuns = rows.filter((r) => r.rejection_reasons.includes('insufficient_clean_runs')).length;
  const runs = rows.map((r) => r.clean_runs).sort((a, b) => a - b);
  const medianRuns = runs[Math.floor((runs.length - 1) / 2)]!;
  const retainedText = probe.retainedBands.length
    ? probe.retainedBands.map((b) => b.replace('_', ' ')).join(', ')
    : 'none';

  const bands = barChart({
    title: 'Probe tasks per difficulty band',
    categories: perBand.map((b) => bandLabel(b.band)),
    series: [{ name: 'tasks', values: perBand.map((b) => b.tasks) }],
    yLabel: 'tasks',
    xLabel: 'difficulty band (largest Jeffreys posterior mass)',
    yFormat: formats.integer,
    yInteger: true,
    highlight: { categories: perBand.map((b) => b.retained), label: 'retained for training', mutedLabel: 'dropped' },
  });
  const innerEdges = BANDS.slice(1).map((b) => b.lower);
  const histogram = histogramChart({
    title: 'Observed probe pass rate',
    bins: binValues(
      rows.map((r) => r.pass_rate),
      0,
      1,
      10,
    ),
    xLabel: 'pass rate in probing (successes / clean runs); dashed lines: band edges',
    yLabel: 'tasks',
    xFormat: formats.percent,
    markers: innerEdges.map((x) => ({ x, label: edge(x) })),
  });

  return {
    headline: [
      {
        label: 'Tasks selected by probing',
        value: `${count(selected)} of ${count(total)}`,
        detail: `${percent(selected / total)} of probed tasks; retained bands: ${retainedText}`,
      },
    ],
    section: {
      id: 'probe',
      title: 'Probe difficulty',
      caption:
        `${count(total)} probed tasks (median ${medianRuns} clean runs each), assigned to the band holding ` +
        `the largest Jeffreys posterior mass; ${count(selected)} selected for training.`,
      figures: [
        {
          id: 'probe-bands',
          caption: 'Number of probed tasks in each difficulty band; highlighted bands are kept for training.',
          svg: bands,
        },
        {
          id: 'probe-pass-rate',
          caption:
            'Distribution of the observed probe pass rate, with the band edges marked (bands use the posterior, so a ' +
            'task can sit across an edge).',
          svg: histogram,
        },
      ],
      tables: [
        {
          caption: 'Tasks per difficulty band',
          header: ['band', 'tasks', 'share', 'retained', 'selected'],
          align: ['left', 'right', 'right', 'left', 'right'],
          rows: [
            ...perBand.map((b) => [
              bandLabel(b.band),
              count(b.tasks),
              percent(total ? b.tasks / total : 0),
              b.retained ? 'yes' : 'no',
              count(b.selected),
            ]),
            ['all', count(total), percent(1), '', count(selected)],
          ],
        },
      ],
      notes: tooFewRuns
        ? [`${count(tooFewRuns)} task(s) were rejected for too few clean runs, whatever their band.`]
        : [],
    },
  };
}
