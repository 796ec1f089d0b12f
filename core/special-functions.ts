/**
 * Special functions for the Beta distribution: log-gamma, log-beta, the regularised incomplete beta
 * function I_x(a, b) and its inverse. Pure and deterministic (plain double arithmetic, fixed iteration
 * order), so workflow code may call them.
 */

const LANCZOS_G = 7;
const LANCZOS_COEFFICIENTS = [
  0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313, -176.61502916214059,
  12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6, 1.5056327351493116e-7,
] as const;
const HALF_LOG_TWO_PI = 0.5 * Math.log(2 * Math.PI);

/** Smallest magnitude allowed in Lentz's method before a denominator is nudged away from zero. */
const TINY = 1e-300;
const CONTINUED_FRACTION_EPSILON = 1e-15;
const CONTINUED_FRACTION_MAX_TERMS = 100_000;
const INVERSE_MAX_ITERATIONS = 400;

function requirePositiveFinite(name: string, value: number): void {
  if (!Number.isFinite(value) || value <= 0)
    throw new RangeError(`${name} must be a positive finite number, got ${value}`);
}

/** ln Γ(x) for x > 0 (Lanczos approximation, g = 7, nine terms; relative error about 1e-15). */
export function logGamma(x: number): number {
  requirePositiveFinite('logGamma: x', x);
  if (x < 0.5) {
    // Reflection keeps the series in the range where it is accurate.
    return Math.log(Math.PI / Math.sin(Math.PI * x)) - logGamma(1 - x);
  }
  const z = x - 1;
  let sum = LANCZOS_COEFFICIENTS[0];
  for (let i = 1; i < LANCZOS_COEFFICIENTS.length; i++) sum += LANCZOS_COEFFICIENTS[i]! / (z + i);
  const t = z + LANCZOS_G + 0.5;
  return HALF_LOG_TWO_PI + (z + 0.5) * Math.log(t) - t + Math.log(sum);
}

/** ln B(a, b) = ln Γ(a) + ln Γ(b) - ln Γ(a + b). */
export function logBeta(a: number, b: number): number {
  return logGamma(a) + logGamma(b) - logGamma(a + b);
}

/** Continued fraction of I_x(a, b) evaluated by the modified Lentz method (Numerical Recipes' betacf). */
function betaContinuedFraction(x: number, a: number, b: number): number {
  const qab = a + b;
  const qap = a + 1;
  const qam = a - 1;
  let c = 1;
  let d = 1 - (qab * x) / qap;
  if (Math.abs(d) < TINY) d = TINY;
  d = 1 / d;
  let h = d;
  for (let m = 1; m <= CONTINUED_FRACTION_MAX_TERMS; m++) {
    const m2 = 2 * m;
    let aa = (m * (b - m) * x) / ((qam + m2) * (a + m2));
    d = 1 + aa * d;
    if (Math.abs(d) < TINY) d = TINY;
    c = 1 + aa / c;
    if (Math.abs(c) < TINY) c = TINY;
    d = 1 / d;
    h *= d * c;
    aa = (-(a + m) * (qab + m) * x) / ((a + m2) * (qap + m2));
    d = 1 + aa * d;
    if (Math.abs(d) < TINY) d = TINY;
    c = 1 + aa / c;
    if (Math.abs(c) < TINY) c = TINY;
    d = 1 / d;
    const delta = d * c;
    h *= delta;
    if (Math.abs(delta - 1) <= CONTINUED_FRACTION_EPSILON) return h;
  }
  throw new Error(`regularizedIncompleteBeta: continued fraction did not converge for x=${x}, a=${a}, b=${b}`);
}

/**
 * Regularised incomplete beta I_x(a, b) = P(X <= x) for X ~ Beta(a, b); a, b > 0, x in [0, 1].
 * Uses the continued fraction directly where it converges fast (x below the mean-ish point
 * (a+1)/(a+b+2)) and the symmetry I_x(a,b) = 1 - I_{1-x}(b,a) elsewhere.
 */
export function regularizedIncompleteBeta(x: number, a: number, b: number): number {
  requirePositiveFinite('regularizedIncompleteBeta: a', a);
  requirePositiveFinite('regularizedIncompleteBeta: b', b);
  if (!(x >= 0 && x <= 1)) throw new RangeError(`regularizedIncompleteBeta: x must be in [0, 1], got ${x}`);
  if (x === 0) return 0;
  if (x === 1) return 1;
  const logFront = a * Math.log(x) + b * Math.log1p(-x) - logBeta(a, b);
  if (x < (a + 1) / (a + b + 2)) {
    return Math.min(1, (Math.exp(logFront) * betaContinuedFraction(x, a, b)) / a);
  }
  return Math.max(0, 1 - (Math.exp(logFront) * betaContinuedFraction(1 - x, b, a)) / b);
}

/** Beta(a, b) density at x in (0, 1). */
export function betaDensity(x: number, a: number, b: number, lnBeta = logBeta(a, b)): number {
  if (x <= 0 || x >= 1) return 0;
  return Math.exp((a - 1) * Math.log(x) + (b - 1) * Math.log1p(-x) - lnBeta);
}

/** Starting point for the inverse (Numerical Recipes, invbetai; Abramowitz & Stegun 26.5.22 for a, b >= 1). */
function inverseStartingPoint(p: number, a: number, b: number): number {
  if (a >= 1 && b >= 1) {
    const pp = p < 0.5 ? p : 1 - p;
    const t = Math.sqrt(-2 * Math.log(pp));
    let z = (2.30753 + t * 0.27061) / (1 + t * (0.99229 + t * 0.04481)) - t;
    if (p < 0.5) z = -z;
    const al = (z * z - 3) / 6;
    const h = 2 / (1 / (2 * a - 1) + 1 / (2 * b - 1));
    const w = (z * Math.sqrt(al + h)) / h - (1 / (2 * b - 1) - 1 / (2 * a - 1)) * (al + 5 / 6 - 2 / (3 * h));
    return a / (a + b * Math.exp(2 * w));
  }
  const lna = Math.log(a / (a + b));
  const lnb = Math.log(b / (a + b));
  const t = Math.exp(a * lna) / a;
  const u = Math.exp(b * lnb) / b;
  const w = t + u;
  return p < t / w ? Math.pow(a * w * p, 1 / a) : 1 - Math.pow(b * w * (1 - p), 1 / b);
}

/**
 * Inverse of the regularised incomplete beta: the x in [0, 1] with I_x(a, b) = p.
 * Newton steps inside a shrinking bracket [lo, hi]; any step that would leave the bracket is replaced
 * by bisection, so the iteration always converges, and Newton's quadratic rate applies near the root.
 */
export function inverseRegularizedIncompleteBeta(p: number, a: number, b: number): number {
  requirePositiveFinite('inverseRegularizedIncompleteBeta: a', a);
  requirePositiveFinite('inverseRegularizedIncompleteBeta: b', b);
  if (!(p >= 0 && p <= 1)) throw new RangeError(`inverseRegularizedIncompleteBeta: p must be in [0, 1], got ${p}`);
  if (p === 0) return 0;
  if (p === 1) return 1;
  const lnBeta = logBeta(a, b);
  let lo = 0;
  let hi = 1;
  let x = inverseStartingPoint(p, a, b);
  if (!(x > 0 && x < 1)) x = 0.5;
  for (let i = 0; i < INVERSE_MAX_ITERATIONS; i++) {
    const f = regularizedIncompleteBeta(x, a, b) - p;
    if (f === 0) return x;
    if (f < 0) lo = x;
    else hi = x;
    const density = betaDensity(x, a, b, lnBeta);
    let next = density > 0 && Number.isFinite(density) ? x - f / density : Number.NaN;
    if (!(next > lo && next < hi)) next = 0.5 * (lo + hi);
    if (Math.abs(next - x) <= 1e-15 * next || hi - lo <= 1e-16 * hi) return next;
    x = next;
  }
  return x;
}
