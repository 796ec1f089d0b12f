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

/**
 * Whether a Postgres error means the server, not the statement, failed. Connection errors (no SQLSTATE, 08),
 * insufficient resources (53), operator intervention such as a shutdown or crash (57P0x), system and internal
 * errors (58, XX). A statement timeout or cancel (57014) is not among them: the statement was too slow, which
 * is the caller's doing (an agent's tool call answers it with a tool error it can see and fix).
 */
export function isInfrastructureSqlState(code: string | undefined): boolean {
  if (code === undefined) return true;
  return /^(08|53|57P|58|XX)/.test(code);
}
