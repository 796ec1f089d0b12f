/**
 * The two error classes that decide what happens next: an infrastructure error is never graded (it is
 * retried, refilled or re-run), bad input is never retried (it fails at once, naming what is wrong).
 * Their class names are the Temporal failure types (activities/temporal-failure.ts converts an error into its
 * failure), so a workflow tells them apart by `failure.type === BadInputError.name` and retry policies list
 * `nonRetryableErrorTypes` (below) instead of repeating string literals.
 */

export class InfrastructureError extends Error {
  override readonly name = 'InfrastructureError';
  /**
   * False for a failure no retry can cure until someone acts (a full checkpoint volume): the activity is not
   * retried, so the campaign pauses at once with the reason instead of after its activity's retries.
   */
  readonly retryable: boolean;
  constructor(message: string, options?: { cause?: unknown; retryable?: boolean }) {
    super(message, options);
    this.retryable = options?.retryable ?? true;
  }
}

export class BadInputError extends Error {
  override readonly name = 'BadInputError';
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/**
 * The policy server refused a request because the conversation no longer fits the model's context (HTTP 400,
 * "maximum context length"). The agent's conversation did that, not the infrastructure: the episode runner ends
 * the episode there and grades its terminal state (finish `context_overflow`, the reference's `agent_error`).
 * Anywhere else (a simulated user, a judge) it stays what its parent class says: an infrastructure error.
 */
export class ContextOverflowError extends InfrastructureError {}

/**
 * Whether an HTTP 400 body is a context-length refusal: vLLM's OpenAI server ("This model's maximum context
 * length is N tokens", "... is longer than the maximum model length of N") and our built-in server (same text).
 */
export function isContextOverflowText(text: string): boolean {
  return /maximum context length|longer than the maximum model length/i.test(text);
}

/** Our error classes and whether Temporal may retry an activity that failed with one. */
export const errorClasses = [
  { type: 'InfrastructureError', retryable: true },
  { type: 'BadInputError', retryable: false },
] as const satisfies readonly { type: string; retryable: boolean }[];

/**
 * Failure types no retry policy retries. 'BadInput' is the type activities used before the class names
 * became the types: an activity task already running old worker code during a deploy may still throw it.
 */
export const nonRetryableErrorTypes: string[] = [
  ...errorClasses.filter((c) => !c.retryable).map((c) => c.type),
  'BadInput',
];

/** Whether a Temporal failure type names bad input (never retried, never turned into an infrastructure error). */
export function isBadInputType(type: string | undefined | null): boolean {
  return type === 'BadInputError' || type === 'BadInput';
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

/**
 * Node and undici error codes that mean the machine or the network failed, not the request: a refused or reset
 * connection, a timeout, a name that did not resolve (yet), a full disk or quota, an I/O error, no file handles
 * or memory left. An activity that fails with one of these is an infrastructure error (retried, then the campaign
 * pauses), even where the code that met it did not wrap it.
 */
const infrastructureSystemCodes = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ECONNABORTED',
  'ETIMEDOUT',
  'EPIPE',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENETDOWN',
  'EAI_AGAIN',
  // A name that does not resolve: in compose, the DNS of a container that is being restarted.
  'ENOTFOUND',
  'ENOSPC',
  'EDQUOT',
  'EIO',
  'EMFILE',
  'ENFILE',
  'ENOMEM',
]);

/** node-postgres' errors that carry no SQLSTATE: the connection, not the statement, failed. */
const databaseConnectionMessage = /^(Connection terminated|timeout expired|Client has encountered a connection error)/;

/**
 * What along `err`'s cause chain says the infrastructure failed, if anything: a system code (above), a Postgres
 * SQLSTATE of a server failure (`isInfrastructureSqlState`; the error carries a `severity`), node-postgres' lost
 * connection or the Temporal client's connect timeout, or an HTTP 5xx answer of a service of ours (an error with
 * `infrastructureStatus`).
 */
export function infrastructureSystemCode(err: unknown): string | undefined {
  const seen = new Set<unknown>();
  for (let e: unknown = err; e instanceof Error && !seen.has(e) && seen.size < 20; e = e.cause) {
    seen.add(e);
    const { code, severity, infrastructureStatus } = e as {
      code?: unknown;
      severity?: unknown;
      infrastructureStatus?: unknown;
    };
    if (typeof infrastructureStatus === 'number') return `HTTP ${infrastructureStatus}`;
    if (typeof code === 'string' && typeof severity === 'string' && /^[0-9A-Z]{5}$/.test(code))
      return isInfrastructureSqlState(code) ? `SQLSTATE ${code}` : undefined;
    if (databaseConnectionMessage.test(e.message) && code === undefined) return 'database connection lost';
    // The Temporal client's connect timeout (a server restarting or unreachable) carries no code.
    if (e.message.startsWith('Failed to connect before the deadline') && code === undefined)
      return 'Temporal unreachable';
    if (typeof code !== 'string') continue;
    if (infrastructureSystemCodes.has(code) || code.startsWith('UND_ERR_')) return code;
  }
  return undefined;
}
