/**
 * Standalone SVG charts (bar, line, scatter, histogram) as strings: axes, ticks, labels, a title and a
 * legend, styled with presentation attributes only, so a chart renders the same inline in HTML, opened
 * as a file, or pasted anywhere, with no script, stylesheet or font to fetch.
 *
 * Every data mark carries a class (`bar`, `point`, `line`) so tests and readers can count them.
 */

export type AxisFormat = (value: number) => string;

export const PALETTE = ['#64748b', '#2563eb', '#0d9488', '#d97706', '#9333ea', '#dc2626'] as const;
const TEXT = '#1f2937';
const MUTED_TEXT = '#4b5563';
const AXIS = '#9ca3af';
const GRID = '#e5e7eb';
const FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif";

export const formats = {
  /** 0.25 -> "25%" (a tick label; whole percent unless the ticks are finer). */
  percent: ((v: number) => `${Number((100 * v).toFixed(1))}%`) satisfies AxisFormat,
  number: ((v: number) => {
    if (v === 0) return '0';
    const abs = Math.abs(v);
    if (abs >= 1e6 || abs < 1e-3) return v.toExponential(1);
    if (abs >= 1e4) return `${Number((v / 1000).toFixed(1))}k`;
    return String(Number(v.toPrecision(4)));
  }) satisfies AxisFormat,
  integer: ((v: number) => String(Math.round(v))) satisfies AxisFormat,
  dollars: ((v: number) => {
    if (v === 0) return '$0';
    const abs = Math.abs(v);
    return abs >= 1 ? `$${Number(v.toFixed(2))}` : `$${Number(v.toPrecision(2))}`;
  }) satisfies AxisFormat,
};

export function escapeXml(text: string): string {
  return text
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;')
    .replace(/'/g, '&#39;');
}

function num(x: number): string {
  return String(Math.round(x * 100) / 100);
}

function truncate(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max - 1)}…`;
}

/** Roughly how wide a label renders at a given font size (average glyph of a sans-serif face). */
function textWidth(text: string, fontSize: number): number {
  return text.length * fontSize * 0.58;
}

function niceStep(rough: number, integer: boolean): number {
  const exponent = Math.floor(Math.log10(rough));
  const fraction = rough / 10 ** exponent;
  const nice = fraction <= 1 ? 1 : fraction <= 2 ? 2 : fraction <= 2.5 ? 2.5 : fraction <= 5 ? 5 : 10;
  const step = nice * 10 ** exponent;
  if (!integer) return step;
  return step < 1 ? 1 : Number.isInteger(step) ? step : Math.floor(step);
}

/**
 * Round tick values covering [min, max] with about `target` intervals; the domain widens to the outer
 * ticks. `integer` keeps every tick a whole number (for counts).
 */
export function niceTicks(
  min: number,
  max: number,
  target = 5,
  integer = false,
): { ticks: number[]; domain: [number, number] } {
  if (!Number.isFinite(min) || !Number.isFinite(max))
    throw new RangeError(`niceTicks: non-finite range [${min}, ${max}]`);
  if (max < min) [min, max] = [max, min];
  if (max === min) {
    const pad = min === 0 ? 1 : Math.abs(min) * 0.1;
    min -= pad;
    max += pad;
  }
  const step = niceStep((max - min) / target, integer);
  const start = Math.floor(min / step + 1e-9) * step;
  const end = Math.ceil(max / step - 1e-9) * step;
  // Ticks are whole multiples of the step, rounded to the step's decimals: summing steps drifts (0.1 * 3), and a
  // drifted zero prints as 4e-17.
  const stepText = String(Number(step.toPrecision(12)));
  const decimals = stepText.includes('e')
    ? Math.max(0, 2 - Math.floor(Math.log10(step)))
    : (stepText.split('.')[1] ?? '').length;
  const ticks: number[] = [];
  for (let k = Math.round(start / step); k <= Math.round(end / step); k++) {
    const v = Number((k * step).toFixed(Math.min(20, decimals)));
    ticks.push(Object.is(v, -0) ? 0 : v);
  }
  return { ticks, domain: [ticks[0]!, ticks[ticks.length - 1]!] };
}

interface Frame {
  width: number;
  height: number;
  left: number;
  right: number;
  top: number;
  bottom: number;
}

const plotWidth = (f: Frame) => f.width - f.left - f.right;
const plotHeight = (f: Frame) => f.height - f.top - f.bottom;

function scale(domain: readonly [number, number], range: readonly [number, number]): (v: number) => number {
  const [d0, d1] = domain;
  const [r0, r1] = range;
  const span = d1 - d0 || 1;
  return (v) => r0 + ((v - d0) / span) * (r1 - r0);
}

function openSvg(kind: string, title: string, frame: Frame, marks: number): string {
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" class="chart chart-${kind}" data-marks="${marks}" viewBox="0 0 ` +
      `${frame.width} ${frame.height}" width="${frame.width}" height="${frame.height}" role="img" ` +
      `aria-label="${escapeXml(title)}" font-family="${escapeXml(FONT)}" font-size="12" fill="${TEXT}">`,
    `<title>${escapeXml(title)}</title>`,
    `<rect x="0" y="0" width="${frame.width}" height="${frame.height}" fill="#ffffff"/>`,
    `<text x="${frame.left}" y="20" font-size="14" font-weight="600">${escapeXml(title)}</text>`,
  ].join('\n');
}

interface LegendEntry {
  name: string;
  color: string;
  shape: 'square' | 'line' | 'dashed' | 'circle';
}

/** One row of legend entries under the title, right-aligned to the plot. */
function legend(entries: readonly LegendEntry[], frame: Frame): string {
  if (entries.length === 0) return '';
  const widths = entries.map((e) => 18 + textWidth(e.name, 11) + 14);
  let x = frame.width - frame.right - widths.reduce((s, w) => s + w, 0);
  x = Math.max(frame.left, x);
  const y = 38;
  const parts: string[] = ['<g class="legend" font-size="11">'];
  entries.forEach((e, i) => {
    const swatch =
      e.shape === 'square'
        ? `<rect x="${num(x)}" y="${y - 9}" width="11" height="11" rx="2" fill="${e.color}"/>`
        : e.shape === 'circle'
          ? `<circle cx="${num(x + 5.5)}" cy="${y - 3.5}" r="4.5" fill="${e.color}"/>`
          : `<line x1="${num(x)}" x2="${num(x + 13)}" y1="${y - 3.5}" y2="${y - 3.5}" stroke="${e.color}" ` +
            `stroke-width="2.5"${e.shape === 'dashed' ? ' stroke-dasharray="4 3"' : ''}/>`;
    parts.push(`${swatch}<text x="${num(x + 17)}" y="${y}" fill="${MUTED_TEXT}">${escapeXml(e.name)}</text>`);
    x += widths[i]!;
  });
  parts.push('</g>');
  return parts.join('');
}

function yAxis(
  frame: Frame,
  ticks: readonly number[],
  y: (v: number) => number,
  format: AxisFormat,
  label: string,
): string {
  const parts: string[] = ['<g class="axis axis-y">'];
  for (const t of ticks) {
    const py = num(y(t));
    parts.push(`<line x1="${frame.left}" x2="${frame.width - frame.right}" y1="${py}" y2="${py}" stroke="${GRID}"/>`);
    parts.push(
      `<text x="${frame.left - 8}" y="${py}" dy="0.32em" text-anchor="end" fill="${MUTED_TEXT}" ` +
        `font-size="11">${escapeXml(format(t))}</text>`,
    );
  }
  parts.push(
    `<line x1="${frame.left}" x2="${frame.left}" y1="${frame.top}" y2="${frame.height - frame.bottom}" ` +
      `stroke="${AXIS}"/>`,
  );
  const cy = frame.top + plotHeight(frame) / 2;
  parts.push(
    `<text transform="translate(16 ${num(cy)}) rotate(-90)" text-anchor="middle" ` +
      `fill="${MUTED_TEXT}">${escapeXml(label)}</text>`,
  );
  parts.push('</g>');
  return parts.join('');
}

function xAxisLine(frame: Frame, label: string): string {
  const base = frame.height - frame.bottom;
  return [
    `<line x1="${frame.left}" x2="${frame.width - frame.right}" y1="${base}" y2="${base}" stroke="${AXIS}"/>`,
    label
      ? `<text x="${num(frame.left + plotWidth(frame) / 2)}" y="${frame.height - 10}" text-anchor="middle" ` +
        `fill="${MUTED_TEXT}">${escapeXml(label)}</text>`
      : '',
  ].join('');
}

function numericXAxis(
  frame: Frame,
  ticks: readonly number[],
  x: (v: number) => number,
  format: AxisFormat,
  label: string,
): string {
  const base = frame.height - frame.bottom;
  const parts: string[] = ['<g class="axis axis-x">'];
  for (const t of ticks) {
    const px = num(x(t));
    parts.push(`<line x1="${px}" x2="${px}" y1="${base}" y2="${base + 5}" stroke="${AXIS}"/>`);
    parts.push(
      `<text x="${px}" y="${base + 18}" text-anchor="middle" fill="${MUTED_TEXT}" ` +
        `font-size="11">${escapeXml(format(t))}</text>`,
    );
  }
  parts.push(xAxisLine(frame, label), '</g>');
  return parts.join('');
}

function emptyNote(frame: Frame, text: string): string {
  return (
    `<text x="${num(frame.left + plotWidth(frame) / 2)}" y="${num(frame.top + plotHeight(frame) / 2)}" ` +
    `text-anchor="middle" fill="${MUTED_TEXT}">${escapeXml(text)}</text>`
  );
}

function extent(values: readonly number[]): [number, number] {
  let lo = Infinity;
  let hi = -Infinity;
  for (const v of values) {
    if (v < lo) lo = v;
    if (v > hi) hi = v;
  }
  return values.length ? [lo, hi] : [0, 1];
}

function checkFinite(chart: string, what: string, values: readonly number[]): void {
  const bad = values.find((v) => !Number.isFinite(v));
  if (bad !== undefined) throw new RangeError(`${chart}: ${what} must be finite numbers, got ${bad}`);
}

// ---------------------------------------------------------------------------------------------------
// Bar chart (grouped)

export interface BarSeries {
  name: string;
  /** One value per category; null draws no bar (the category has no data in this series). */
  values: readonly (number | null)[];
  /** Optional interval per bar, drawn as a whisker. */
  intervals?: readonly (readonly [number, number] | null)[];
  color?: string;
}

export interface BarChartOptions {
  title: string;
  categories: readonly string[];
  series: readonly BarSeries[];
  yLabel: string;
  xLabel?: string;
  yFormat?: AxisFormat;
  /** Text printed above each bar; defaults to yFormat. Pass null for none. */
  valueFormat?: AxisFormat | null;
  /** Fixed value range of the y axis (for rates: [0, 1]). */
  yDomain?: readonly [number, number];
  /** Counts: whole-number ticks only. */
  yInteger?: boolean;
  /** Single-series charts: colour each bar by whether its category is highlighted, with a two-entry legend. */
  highlight?: {
    categories: readonly boolean[];
    label: string;
    mutedLabel: string;
    color?: string;
    mutedColor?: string;
  };
  width?: number;
  height?: number;
}

export function barChart(options: BarChartOptions): string {
  const { categories, series } = options;
  if (series.length === 0) throw new RangeError('barChart: no series');
  for (const s of series) {
    if (s.values.length !== categories.length)
      throw new RangeError(
        `barChart: series '${s.name}' has ${s.values.length} values for ${categories.length} categories`,
      );
    checkFinite(
      'barChart',
      `values of '${s.name}'`,
      s.values.filter((v): v is number => v !== null),
    );
  }
  if (options.highlight && options.highlight.categories.length !== categories.length)
    throw new RangeError('barChart: highlight needs one flag per category');
  const yFormat = options.yFormat ?? formats.number;
  const valueFormat = options.valueFormat === undefined ? yFormat : options.valueFormat;
  const width = options.width ?? 640;
  const slot = (width - 84) / Math.max(1, categories.length);
  const shown = categories.map((c) => truncate(c, 22));
  const rotate = shown.some((c) => textWidth(c, 11) > slot - 6);
  const longest = Math.max(0, ...shown.map((c) => textWidth(c, 11)));
  const labelRoom = rotate ? Math.min(110, 20 + longest * 0.6) : 28;
  const frame: Frame = {
    width,
    height: 0,
    left: 64,
    right: 20,
    top: 56,
    bottom: labelRoom + (options.xLabel ? 24 : 4),
  };
  frame.height = options.height ?? 240 + frame.top + frame.bottom;

  const all = series.flatMap((s) => [
    ...s.values.filter((v): v is number => v !== null),
    ...(s.intervals ?? []).flatMap((i) => (i ? [i[0], i[1]] : [])),
  ]);
  const [lo, hi] = options.yDomain ?? [Math.min(0, ...all), Math.max(0, ...all)];
  const integer = options.yInteger ?? false;
  const { ticks, domain } = options.yDomain
    ? {
        ticks: niceTicks(lo, hi, 5, integer).ticks.filter((t) => t >= lo - 1e-9 && t <= hi + 1e-9),
        domain: [lo, hi] as [number, number],
      }
    : niceTicks(lo, hi === lo ? lo + 1 : hi, 5, integer);
  const y = scale(domain, [frame.height - frame.bottom, frame.top]);
  const base = y(Math.max(domain[0], Math.min(0, domain[1])));
  const marks = series.reduce((s, x) => s + x.values.filter((v) => v !== null).length, 0);

  const parts: string[] = [openSvg('bar', options.title, frame, marks)];
  const colorOf = (i: number) => series[i]!.color ?? PALETTE[i % PALETTE.length]!;
  const hl = options.highlight;
  const hlColor = hl?.color ?? PALETTE[1];
  const hlMuted = hl?.mutedColor ?? '#cbd5e1';
  parts.push(
    legend(
      hl
        ? [
            { name: hl.label, color: hlColor, shape: 'square' },
            { name: hl.mutedLabel, color: hlMuted, shape: 'square' },
          ]
        : series.length > 1
          ? series.map((s, i) => ({ name: s.name, color: colorOf(i), shape: 'square' as const }))
          : [],
      frame,
    ),
  );
  parts.push(yAxis(frame, ticks, y, yFormat, options.yLabel));

  const groupWidth = plotWidth(frame) / Math.max(1, categories.length);
  const inner = groupWidth * (series.length > 1 ? 0.8 : 0.66);
  const barWidth = inner / series.length;
  const labelSize = barWidth < 30 ? 9 : 10;
  parts.push('<g class="marks">');
  categories.forEach((category, ci) => {
    const gx = frame.left + ci * groupWidth + (groupWidth - inner) / 2;
    series.forEach((s, si) => {
      const value = s.values[ci];
      const bx = gx + si * barWidth;
      if (value === null || value === undefined) {
        parts.push(
          `<text x="${num(bx + barWidth / 2)}" y="${num(base - 4)}" text-anchor="middle" fill="${AXIS}" ` +
            `font-size="10">n/a</text>`,
        );
        return;
      }
      const vy = y(Math.max(domain[0], Math.min(domain[1], value)));
      const top = Math.min(vy, base);
      const fill = hl ? (hl.categories[ci] ? hlColor : hlMuted) : colorOf(si);
      const tip = `${s.name === '' ? '' : `${s.name}, `}${category}: ${(valueFormat ?? yFormat)(value)}`;
      parts.push(
        `<rect class="bar" x="${num(bx + 1)}" y="${num(top)}" width="${num(Math.max(1, barWidth - 2))}" ` +
          `height="${num(Math.abs(base - vy))}" rx="2" fill="${fill}"><title>${escapeXml(tip)}</title></rect>`,
      );
      let labelY = top;
      const interval = s.intervals?.[ci];
      if (interval) {
        const cx = num(bx + barWidth / 2);
        const y0 = y(Math.max(domain[0], interval[0]));
        const y1 = y(Math.min(domain[1], interval[1]));
        parts.push(
          `<g class="whisker" stroke="${TEXT}" stroke-width="1.2"><line x1="${cx}" x2="${cx}" y1="${num(y0)}" ` +
            `y2="${num(y1)}"/><line x1="${num(bx + barWidth / 2 - 4)}" x2="${num(bx + barWidth / 2 + 4)}" ` +
            `y1="${num(y1)}" y2="${num(y1)}"/><line x1="${num(bx + barWidth / 2 - 4)}" ` +
            `x2="${num(bx + barWidth / 2 + 4)}" y1="${num(y0)}" y2="${num(y0)}"/></g>`,
        );
        labelY = Math.min(labelY, y1);
      }
      if (valueFormat) {
        parts.push(
          `<text class="value" x="${num(bx + barWidth / 2)}" y="${num(labelY - 4)}" text-anchor="middle" ` +
            `font-size="${labelSize}" fill="${TEXT}">${escapeXml(valueFormat(value))}</text>`,
        );
      }
    });
  });
  parts.push('</g>');

  const axisBase = frame.height - frame.bottom;
  parts.push(
    '<g class="axis axis-x">',
    `<line x1="${frame.left}" x2="${frame.width - frame.right}" y1="${num(base)}" y2="${num(base)}" stroke="${AXIS}"/>`,
  );
  shown.forEach((label, ci) => {
    const cx = frame.left + (ci + 0.5) * groupWidth;
    const full = categories[ci]!;
    const tip = label === full ? '' : `<title>${escapeXml(full)}</title>`;
    parts.push(
      rotate
        ? `<text transform="translate(${num(cx + 4)} ${axisBase + 14}) rotate(-35)" text-anchor="end" ` +
            `fill="${MUTED_TEXT}" font-size="11">${tip}${escapeXml(label)}</text>`
        : `<text x="${num(cx)}" y="${axisBase + 18}" text-anchor="middle" fill="${MUTED_TEXT}" ` +
            `font-size="11">${tip}${escapeXml(label)}</text>`,
    );
  });
  if (options.xLabel)
    parts.push(
      `<text x="${num(frame.left + plotWidth(frame) / 2)}" y="${frame.height - 10}" text-anchor="middle" ` +
        `fill="${MUTED_TEXT}">${escapeXml(options.xLabel)}</text>`,
    );
  parts.push('</g>');
  if (marks === 0) parts.push(emptyNote(frame, 'no data'));
  parts.push('</svg>');
  return parts.join('\n');
}

// ---------------------------------------------------------------------------------------------------
// Line chart

export interface LineSeries {
  name: string;
  points: readonly { x: number; y: number }[];
  color?: string;
  /** Draw a circle (class `point`) at each data point; default true. */
  markers?: boolean;
  dashed?: boolean;
}

export interface LineChartOptions {
  title: string;
  series: readonly LineSeries[];
  xLabel: string;
  yLabel: string;
  xFormat?: AxisFormat;
  yFormat?: AxisFormat;
  yDomain?: readonly [number, number];
  width?: number;
  height?: number;
}

export function lineChart(options: LineChartOptions): string {
  const { series } = options;
  if (series.length === 0) throw new RangeError('lineChart: no series');
  for (const s of series) {
    checkFinite(
      'lineChart',
      `x of '${s.name}'`,
      s.points.map((p) => p.x),
    );
    checkFinite(
      'lineChart',
      `y of '${s.name}'`,
      s.points.map((p) => p.y),
    );
  }
  const frame: Frame = {
    width: options.width ?? 640,
    height: options.height ?? 300,
    left: 64,
    right: 20,
    top: 56,
    bottom: 48,
  };
  const xs = series.flatMap((s) => s.points.map((p) => p.x));
  const ys = series.flatMap((s) => s.points.map((p) => p.y));
  const [x0, x1] = extent(xs);
  // An x axis of whole numbers (training steps) gets whole-number ticks, never 1, 1.2, 1.4 printed as "1 1 1".
  const xt = niceTicks(x0, x1 === x0 ? x0 + 1 : x1, 6, xs.every(Number.isInteger));
  const [y0, y1] = options.yDomain ?? extent(ys);
  const yt = options.yDomain
    ? {
        ticks: niceTicks(y0, y1).ticks.filter((t) => t >= y0 - 1e-9 && t <= y1 + 1e-9),
        domain: [y0, y1] as [number, number],
      }
    : niceTicks(y0, y1);
  const x = scale(xt.domain, [frame.left, frame.width - frame.right]);
  const y = scale(yt.domain, [frame.height - frame.bottom, frame.top]);
  const colorOf = (i: number) => series[i]!.color ?? PALETTE[(i + 1) % PALETTE.length]!;
  const marks = series.reduce((s, l) => s + (l.markers === false ? 0 : l.points.length), 0);
  const xFormat = options.xFormat ?? formats.number;
  const yFormat = options.yFormat ?? formats.number;

  const parts: string[] = [openSvg('line', options.title, frame, marks)];
  parts.push(
    legend(
      series.length > 1
        ? series.map((s, i) => ({
            name: s.name,
            color: colorOf(i),
            shape: s.dashed ? ('dashed' as const) : ('line' as const),
          }))
        : [],
      frame,
    ),
  );
  parts.push(yAxis(frame, yt.ticks, y, yFormat, options.yLabel));
  parts.push(numericXAxis(frame, xt.ticks, x, xFormat, options.xLabel));
  parts.push('<g class="marks">');
  series.forEach((s, si) => {
    const color = colorOf(si);
    const pts = s.points.map((p) => `${num(x(p.x))},${num(y(p.y))}`).join(' ');
    if (s.points.length > 1) {
      parts.push(
        `<polyline class="line" points="${pts}" fill="none" stroke="${color}" stroke-width="${s.dashed ? 1.8 : 2}" ` +
          `stroke-linejoin="round"${s.dashed ? ' stroke-dasharray="5 4"' : ''}/>`,
      );
    }
    if (s.markers !== false) {
      const r = s.points.length <= 60 ? 3 : 1.6;
      for (const p of s.points) {
        parts.push(
          `<circle class="point" cx="${num(x(p.x))}" cy="${num(y(p.y))}" r="${r}" ` +
            `fill="${color}"><title>${escapeXml(`${xFormat(p.x)}: ${yFormat(p.y)}`)}</title></circle>`,
        );
      }
    }
  });
  parts.push('</g>');
  if (xs.length === 0) parts.push(emptyNote(frame, 'no data'));
  parts.push('</svg>');
  return parts.join('\n');
}

// ---------------------------------------------------------------------------------------------------
// Scatter

export interface ScatterPoint {
  x: number;
  y: number;
  label?: string;
  /** Points of different series with the same key are joined by a faint line (the same domain before and after). */
  key?: string;
  /** Larger, outlined marker for summary points (for example a whole evaluation among its domains). */
  emphasis?: boolean;
}

export interface ScatterSeries {
  name: string;
  points: readonly ScatterPoint[];
  color?: string;
}

export interface ScatterChartOptions {
  title: string;
  series: readonly ScatterSeries[];
  xLabel: string;
  yLabel: string;
  xFormat?: AxisFormat;
  yFormat?: AxisFormat;
  xDomain?: readonly [number, number];
  yDomain?: readonly [number, number];
  width?: number;
  height?: number;
}

interface Box {
  x0: number;
  y0: number;
  x1: number;
  y1: number;
}

const overlaps = (a: Box, b: Box) => a.x0 < b.x1 && b.x0 < a.x1 && a.y0 < b.y1 && b.y0 < a.y1;

export function scatterChart(options: ScatterChartOptions): string {
  const { series } = options;
  if (series.length === 0) throw new RangeError('scatterChart: no series');
  for (const s of series) {
    checkFinite(
      'scatterChart',
      `x of '${s.name}'`,
      s.points.map((p) => p.x),
    );
    checkFinite(
      'scatterChart',
      `y of '${s.name}'`,
      s.points.map((p) => p.y),
    );
  }
  const frame: Frame = {
    width: options.width ?? 640,
    height: options.height ?? 340,
    left: 64,
    right: 28,
    top: 56,
    bottom: 48,
  };
  const xs = series.flatMap((s) => s.points.map((p) => p.x));
  const ys = series.flatMap((s) => s.points.map((p) => p.y));
  let [x0, x1] = options.xDomain ?? extent(xs);
  if (!options.xDomain) {
    // Room on both sides for the point labels.
    const pad = (x1 - x0 || Math.abs(x1) || 1) * 0.15;
    x0 = Math.max(0, x0 - pad);
    x1 += pad;
  }
  const xt = options.xDomain
    ? {
        ticks: niceTicks(x0, x1).ticks.filter((t) => t >= x0 - 1e-12 && t <= x1 + 1e-12),
        domain: [x0, x1] as [number, number],
      }
    : niceTicks(x0, x1);
  const [y0, y1] = options.yDomain ?? extent(ys);
  const yt = options.yDomain
    ? {
        ticks: niceTicks(y0, y1).ticks.filter((t) => t >= y0 - 1e-9 && t <= y1 + 1e-9),
        domain: [y0, y1] as [number, number],
      }
    : niceTicks(y0, y1);
  const x = scale(xt.domain, [frame.left, frame.width - frame.right]);
  const y = scale(yt.domain, [frame.height - frame.bottom, frame.top]);
  const colorOf = (i: number) => series[i]!.color ?? PALETTE[i % PALETTE.length]!;
  const xFormat = options.xFormat ?? formats.number;
  const yFormat = options.yFormat ?? formats.number;
  const marks = xs.length;

  const placed = series.flatMap((s, si) =>
    s.points.map((p) => ({ p, si, px: x(p.x), py: y(p.y), r: p.emphasis ? 7 : 4.5 })),
  );
  const parts: string[] = [openSvg('scatter', options.title, frame, marks)];
  parts.push(
    legend(
      series.map((s, i) => ({ name: s.name, color: colorOf(i), shape: 'circle' as const })),
      frame,
    ),
  );
  parts.push(yAxis(frame, yt.ticks, y, yFormat, options.yLabel));
  parts.push(numericXAxis(frame, xt.ticks, x, xFormat, options.xLabel));

  parts.push(`<g class="links" stroke="${AXIS}" stroke-width="1.2" stroke-dasharray="2 3">`);
  for (let si = 1; si < series.length; si++) {
    for (const b of placed.filter((q) => q.si === si && q.p.key !== undefined)) {
      const a = placed.find((q) => q.si === si - 1 && q.p.key === b.p.key);
      if (a) parts.push(`<line x1="${num(a.px)}" y1="${num(a.py)}" x2="${num(b.px)}" y2="${num(b.py)}"/>`);
    }
  }
  parts.push('</g>');

  parts.push('<g class="marks">');
  for (const { p, si, px, py } of placed) {
    const color = colorOf(si);
    const tip = `${series[si]!.name}${p.label ? ` ${p.label}` : ''}: ${xFormat(p.x)}, ${yFormat(p.y)}`;
    parts.push(
      p.emphasis
        ? `<circle class="point" cx="${num(px)}" cy="${num(py)}" r="7" fill="${color}" stroke="#ffffff" ` +
            `stroke-width="2"><title>${escapeXml(tip)}</title></circle>`
        : `<circle class="point" cx="${num(px)}" cy="${num(py)}" r="4.5" fill="${color}" ` +
            `fill-opacity="0.75"><title>${escapeXml(tip)}</title></circle>`,
    );
  }
  parts.push('</g>');

  // Labels go to the first free spot around their point (right, left, above, below), emphasised ones first.
  const occupied: Box[] = placed.map((q) => ({ x0: q.px - q.r, y0: q.py - q.r, x1: q.px + q.r, y1: q.py + q.r }));
  const bounds: Box = {
    x0: frame.left,
    y0: frame.top - 10,
    x1: frame.width - frame.right + 20,
    y1: frame.height - frame.bottom,
  };
  const inside = (b: Box) => b.x0 >= bounds.x0 && b.x1 <= bounds.x1 && b.y0 >= bounds.y0 && b.y1 <= bounds.y1;
  parts.push('<g class="labels">');
  for (const q of [...placed].sort((a, b) => Number(b.p.emphasis ?? false) - Number(a.p.emphasis ?? false))) {
    if (!q.p.label) continue;
    const size = q.p.emphasis ? 12 : 10;
    const w = textWidth(q.p.label, size);
    const h = size + 2;
    const gap = q.r + 4;
    const candidates: (Box & { anchor: 'start' | 'end' | 'middle'; tx: number; ty: number })[] = [
      {
        x0: q.px + gap,
        x1: q.px + gap + w,
        y0: q.py - h / 2,
        y1: q.py + h / 2,
        anchor: 'start',
        tx: q.px + gap,
        ty: q.py,
      },
      {
        x0: q.px - gap - w,
        x1: q.px - gap,
        y0: q.py - h / 2,
        y1: q.py + h / 2,
        anchor: 'end',
        tx: q.px - gap,
        ty: q.py,
      },
      {
        x0: q.px - w / 2,
        x1: q.px + w / 2,
        y0: q.py - gap - h,
        y1: q.py - gap,
        anchor: 'middle',
        tx: q.px,
        ty: q.py - gap - h / 2,
      },
      {
        x0: q.px - w / 2,
        x1: q.px + w / 2,
        y0: q.py + gap,
        y1: q.py + gap + h,
        anchor: 'middle',
        tx: q.px,
        ty: q.py + gap + h / 2,
      },
    ];
    const free = candidates.find((c) => inside(c) && !occupied.some((o) => overlaps(c, o)));
    const spot = free ?? candidates.find(inside) ?? candidates[0]!;
    occupied.push(spot);
    parts.push(
      `<text x="${num(spot.tx)}" y="${num(spot.ty)}" dy="0.32em" text-anchor="${spot.anchor}" ` +
        `font-size="${size}"${q.p.emphasis ? ' font-weight="600"' : ''} ` +
        `fill="${q.p.emphasis ? TEXT : MUTED_TEXT}">${escapeXml(q.p.label)}</text>`,
    );
  }
  parts.push('</g>');
  if (marks === 0) parts.push(emptyNote(frame, 'no data'));
  parts.push('</svg>');
  return parts.join('\n');
}

// ---------------------------------------------------------------------------------------------------
// Histogram

export interface HistogramBin {
  lower: number;
  upper: number;
  count: number;
}

/** Equal-width bins over [lower, upper]; the last bin includes its upper edge. */
export function binValues(values: readonly number[], lower: number, upper: number, bins: number): HistogramBin[] {
  if (!(upper > lower) || !Number.isInteger(bins) || bins < 1)
    throw new RangeError(`binValues: need lower < upper and bins >= 1, got [${lower}, ${upper}] in ${bins}`);
  const width = (upper - lower) / bins;
  const out = Array.from({ length: bins }, (_, i) => ({
    lower: lower + i * width,
    upper: i === bins - 1 ? upper : lower + (i + 1) * width,
    count: 0,
  }));
  for (const v of values) {
    if (!(v >= lower && v <= upper)) throw new RangeError(`binValues: ${v} lies outside [${lower}, ${upper}]`);
    out[Math.min(bins - 1, Math.floor((v - lower) / width + 1e-9))]!.count += 1;
  }
  return out;
}

export interface HistogramOptions {
  title: string;
  bins: readonly HistogramBin[];
  xLabel: string;
  yLabel: string;
  xFormat?: AxisFormat;
  /** Vertical reference lines, for example band edges. */
  markers?: readonly { x: number; label: string }[];
  color?: string;
  width?: number;
  height?: number;
}

export function histogramChart(options: HistogramOptions): string {
  const { bins } = options;
  if (bins.length === 0) throw new RangeError('histogramChart: no bins');
  checkFinite(
    'histogramChart',
    'bin edges and counts',
    bins.flatMap((b) => [b.lower, b.upper, b.count]),
  );
  const frame: Frame = {
    width: options.width ?? 640,
    height: options.height ?? 300,
    left: 64,
    right: 20,
    top: 56,
    bottom: 48,
  };
  const x0 = bins[0]!.lower;
  const x1 = bins[bins.length - 1]!.upper;
  const x = scale([x0, x1], [frame.left, frame.width - frame.right]);
  const yt = niceTicks(0, Math.max(1, ...bins.map((b) => b.count)), 5, true);
  const ticks = yt.ticks;
  const y = scale(yt.domain, [frame.height - frame.bottom, frame.top]);
  const xFormat = options.xFormat ?? formats.number;
  const color = options.color ?? PALETTE[1];

  const parts: string[] = [openSvg('histogram', options.title, frame, bins.length)];
  parts.push(yAxis(frame, ticks, y, formats.integer, options.yLabel));
  const xTicks = [...new Set([x0, ...bins.map((b) => b.upper)])];
  const every = Math.ceil(xTicks.length / 11);
  parts.push(
    numericXAxis(
      frame,
      xTicks.filter((_, i) => i % every === 0 || i === xTicks.length - 1),
      x,
      xFormat,
      options.xLabel,
    ),
  );
  parts.push('<g class="marks">');
  const base = y(0);
  for (const b of bins) {
    const left = x(b.lower);
    const right = x(b.upper);
    const top = y(b.count);
    parts.push(
      `<rect class="bar" x="${num(left + 1)}" y="${num(top)}" width="${num(Math.max(1, right - left - 2))}" ` +
        `height="${num(base - top)}" fill="${color}" ` +
        `fill-opacity="0.85">` +
        `<title>${escapeXml(`${xFormat(b.lower)} to ${xFormat(b.upper)}: ${b.count}`)}</title></rect>`,
    );
  }
  parts.push('</g>');
  if (options.markers?.length) {
    parts.push(`<g class="markers" font-size="10" fill="${MUTED_TEXT}">`);
    for (const m of options.markers) {
      const px = num(x(m.x));
      parts.push(
        `<line x1="${px}" x2="${px}" y1="${frame.top - 4}" y2="${frame.height - frame.bottom}" stroke="${TEXT}" ` +
          `stroke-opacity="0.55" stroke-dasharray="3 3"/>`,
      );
      parts.push(`<text x="${px}" y="${frame.top - 8}" text-anchor="middle">${escapeXml(m.label)}</text>`);
    }
    parts.push('</g>');
  }
  parts.push('</svg>');
  return parts.join('\n');
}
