/**
 * Number formatting shared by every rendering of the report, so the HTML, the markdown summary and the
 * plots show the same text for the same number.
 */

/** A rate as a percentage with two decimals: 0.6078 -> "60.78%". */
export function percent(x: number): string {
  return `${(100 * x).toFixed(2)}%`;
}

/** A difference of two rates in percentage points: 0.0908 -> "+9.08 pts". */
export function points(x: number): string {
  const text = (100 * x).toFixed(2);
  return `${x >= 0 && !text.startsWith('-') ? '+' : ''}${text} pts`;
}

/** A 95% interval of a rate, in percent with one decimal: "[48.2, 55.1]". */
export function percentInterval([lo, hi]: readonly [number, number]): string {
  return `[${(100 * lo).toFixed(1)}, ${(100 * hi).toFixed(1)}]`;
}

/** An interval of a difference in points: "[+3.10, +15.02] pts". */
export function pointsInterval([lo, hi]: readonly [number, number]): string {
  return `[${points(lo).replace(' pts', '')}, ${points(hi).replace(' pts', '')}] pts`;
}

/**
 * Dollars: cents at $1 and above, tenths of a cent down to $0.10 (as `tbt eval` prints them: $24.36,
 * $0.177), two significant digits below that so small per-attempt costs stay distinguishable ($0.0052).
 */
export function dollars(x: number | null): string {
  if (x === null) return 'n/a';
  const abs = Math.abs(x);
  if (abs >= 1) return `$${x.toFixed(2)}`;
  if (abs >= 0.1 || abs === 0) return `$${x.toFixed(3)}`;
  return `$${Number(x.toPrecision(2))}`;
}

/** A count with thousands separators: 10140 -> "10,140". */
export function count(n: number): string {
  return Math.round(n)
    .toString()
    .replace(/\B(?=(\d{3})+(?!\d))/g, ',');
}

/** A count and its noun, plural unless 1: "1 task", "2,000 keys". */
export function plural(n: number, word: string): string {
  return `${count(n)} ${word}${n === 1 ? '' : 's'}`;
}

/** A plain measurement with up to `digits` significant digits, without exponent noise for common sizes. */
export function decimal(x: number, digits = 4): string {
  if (x === 0) return '0';
  const abs = Math.abs(x);
  if (abs >= 1e6 || abs < 1e-4) return x.toExponential(2);
  return Number(x.toPrecision(digits)).toString();
}

/** A mean reward: three decimals. */
export function reward(x: number): string {
  return x.toFixed(3);
}

/** Seconds as "42 s", "12.5 min" or "3.2 h". */
export function duration(seconds: number): string {
  if (seconds < 120) return `${decimal(seconds, 3)} s`;
  if (seconds < 7200) return `${(seconds / 60).toFixed(1)} min`;
  return `${(seconds / 3600).toFixed(1)} h`;
}
