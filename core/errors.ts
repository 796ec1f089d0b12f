/**
 * The two error classes that decide what happens next: an infrastructure error is never graded (it is
 * retried, refilled or re-run), bad input is never retried (it fails at once, naming what is wrong).
 */

export class InfrastructureError extends Error {
  override readonly name = 'InfrastructureError';
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

export class BadInputError extends Error {
  override readonly name = 'BadInputError';
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

export function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
