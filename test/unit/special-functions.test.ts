import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  inverseRegularizedIncompleteBeta,
  logBeta,
  logGamma,
  regularizedIncompleteBeta,
} from '../../core/special-functions.ts';

function close(actual: number, expected: number, relative: number, message?: string): void {
  const scale = Math.max(Math.abs(expected), 1e-300);
  assert.ok(Math.abs(actual - expected) <= relative * scale, `${message ?? ''} expected ${expected}, got ${actual}`);
}

test('logGamma matches factorials and Γ(1/2) = √π', () => {
  let factorial = 1;
  for (let n = 1; n <= 20; n++) {
    assert.ok(
      Math.abs(logGamma(n) - Math.log(factorial)) <= 1e-13 * Math.max(1, Math.log(factorial)),
      `ln Γ(${n}) = ${logGamma(n)}`,
    );
    factorial *= n;
  }
  close(logGamma(0.5), 0.5 * Math.log(Math.PI), 1e-13);
  close(logGamma(1000.5), 5908.674175848678, 1e-14); // scipy.special.gammaln
  close(logBeta(2, 3), Math.log(1 / 12), 1e-13); // B(2,3) = 1!2!/4! = 1/12
});

test('I_x(a, b) matches closed forms computed by hand', () => {
  for (const x of [0.01, 0.2, 0.37, 0.5, 0.9, 0.999]) {
    close(regularizedIncompleteBeta(x, 1, 1), x, 1e-12, `I_${x}(1,1)`);
    close(regularizedIncompleteBeta(x, 5, 1), x ** 5, 1e-12, `I_${x}(5,1)`);
    close(regularizedIncompleteBeta(x, 1, 3), 1 - (1 - x) ** 3, 1e-12, `I_${x}(1,3)`);
  }
  // I_0.4(2,3) = sum_{j=2..4} C(4,j) 0.4^j 0.6^(4-j) = 0.3456 + 0.1536 + 0.0256
  close(regularizedIncompleteBeta(0.4, 2, 3), 0.5248, 1e-12);
  // Arcsine law: I_x(1/2, 1/2) = (2/π) asin(√x)
  close(regularizedIncompleteBeta(0.3, 0.5, 0.5), (2 / Math.PI) * Math.asin(Math.sqrt(0.3)), 1e-12);
  assert.equal(regularizedIncompleteBeta(0, 2, 3), 0);
  assert.equal(regularizedIncompleteBeta(1, 2, 3), 1);
});

test('I_x(a, b) obeys the symmetry I_x(a,b) = 1 - I_{1-x}(b,a)', () => {
  for (const [a, b, x] of [
    [3.5, 5.5, 0.4],
    [0.5, 20.5, 0.02],
    [50, 7, 0.85],
  ] as const) {
    close(regularizedIncompleteBeta(x, a, b), 1 - regularizedIncompleteBeta(1 - x, b, a), 1e-12);
  }
});

// [a, b, x, I_x(a,b), quantile 0.025, quantile 0.975] from scipy.special.betainc / betaincinv.
const SCIPY: [number, number, number, number, number, number][] = [
  [0.5, 0.5, 0.3, 0.36901011956554536, 0.001541333133436012, 0.9984586668665639],
  [0.5, 8.5, 0.08, 0.7593386845818703, 5.949030289440215e-5, 0.2622172487171857],
  [100.5, 900.5, 0.1, 0.49438598785367266, 0.08256265284306004, 0.11974828092692441],
  [0.5, 1000.5, 0.001, 0.842856476634481, 4.909116947944415e-7, 0.0025081643414222978],
  [1000.5, 0.5, 0.999, 0.15714352336551876, 0.9974918356585777, 0.9999995090883053],
  [3.5, 5.5, 0.4, 0.5468204921139537, 0.1190391801541659, 0.7051765537196912],
  [20.5, 0.5, 0.95, 0.1494705049530066, 0.8833610170951246, 0.9999757535215408],
  [0.1, 0.2, 0.5, 0.6705707961028995, 4.1950938741629596e-15, 0.9999979273778029],
];

test('I_x(a, b) and its inverse match scipy, including n around 1000', () => {
  for (const [a, b, x, cdf, lo, hi] of SCIPY) {
    close(regularizedIncompleteBeta(x, a, b), cdf, 1e-9, `I_${x}(${a},${b})`);
    close(inverseRegularizedIncompleteBeta(0.025, a, b), lo, 1e-9, `quantile 0.025 of Beta(${a},${b})`);
    close(inverseRegularizedIncompleteBeta(0.975, a, b), hi, 1e-9, `quantile 0.975 of Beta(${a},${b})`);
  }
});

test('the inverse round-trips over a grid and maps 0 and 1 to the ends', () => {
  for (const [a, b] of [
    [0.5, 0.5],
    [1.5, 9.5],
    [12, 3],
    [300.5, 700.5],
  ] as const) {
    for (const p of [1e-6, 0.01, 0.025, 0.3, 0.5, 0.8, 0.975, 0.999999]) {
      const x = inverseRegularizedIncompleteBeta(p, a, b);
      close(regularizedIncompleteBeta(x, a, b), p, 1e-9, `I(inverse(${p}); ${a}, ${b})`);
    }
    assert.equal(inverseRegularizedIncompleteBeta(0, a, b), 0);
    assert.equal(inverseRegularizedIncompleteBeta(1, a, b), 1);
  }
});

test('invalid arguments are rejected, not silently answered', () => {
  assert.throws(() => regularizedIncompleteBeta(0.5, 0, 1), /a must be a positive finite number/);
  assert.throws(() => regularizedIncompleteBeta(1.5, 1, 1), /x must be in \[0, 1\]/);
  assert.throws(() => regularizedIncompleteBeta(Number.NaN, 1, 1), /x must be in \[0, 1\]/);
  assert.throws(() => inverseRegularizedIncompleteBeta(-0.1, 1, 1), /p must be in \[0, 1\]/);
  assert.throws(() => logGamma(-1), /positive finite/);
});
