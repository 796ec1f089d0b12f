import { UsageError } from './command-support.ts';

/** Numeric command-line flags, checked before anything starts; a bad value names the flag and what it expects. */

export function integerFlag(flag: string, text: string, range: { min: number; max?: number }): number {
  const value = Number(text);
  const { min, max = Number.MAX_SAFE_INTEGER } = range;
  if (!/^\s*-?\d+\s*$/.test(text) || !Number.isSafeInteger(value) || value < min || value > max) {
    const wanted = range.max === undefined ? `>= ${min}` : `from ${min} to ${max}`;
    throw new UsageError(`${flag}: expected an integer ${wanted}, got '${text}'`);
  }
  return value;
}

export function numberFlag(flag: string, text: string, range: { min: number; max: number }): number {
  const value = Number(text);
  if (!/^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$/.test(text) || value < range.min || value > range.max) {
    throw new UsageError(`${flag}: expected a number from ${range.min} to ${range.max}, got '${text}'`);
  }
  return value;
}

export function optionalIntegerFlag(
  flag: string,
  text: string | undefined,
  range: { min: number; max?: number },
): number | undefined {
  return text === undefined ? undefined : integerFlag(flag, text, range);
}
