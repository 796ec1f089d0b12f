import { BadInputError, InfrastructureError, errorMessage } from '../core/errors.ts';
import { longRequestDispatcher } from '../infra/long-request-dispatcher.ts';

/**
 * The learner's control API as this side calls it: JSON over HTTP to rank 0, with the run's bearer token. A
 * failed connection is an InfrastructureError (retryable); an error answer is a LearnerHttpError with the
 * learner's own code.
 */

/** Where a running learner listens, and the run's token; the token stays inside this process. */
export interface LearnerEndpoint {
  url: string;
  token: string;
}

export class LearnerHttpError extends Error {
  /** A 5xx answer: the learner failed, not the request (core/errors.ts reads this as infrastructure). */
  readonly infrastructureStatus?: number;
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
    if (status >= 500) this.infrastructureStatus = status;
  }
}

export async function learnerRequest<T>(
  endpoint: LearnerEndpoint,
  method: 'GET' | 'POST',
  route: string,
  body?: unknown,
  timeoutMs = 60_000,
): Promise<T> {
  let response: Response;
  try {
    response = await fetch(`${endpoint.url}${route}`, {
      method,
      headers: { 'content-type': 'application/json', authorization: `Bearer ${endpoint.token}` },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(timeoutMs),
      dispatcher: longRequestDispatcher, // a step answers after hours: only timeoutMs bounds it
    } as RequestInit);
  } catch (err) {
    throw new InfrastructureError(`learner ${route}: ${errorMessage(err)}`, { cause: err });
  }
  const payload = (await response.json().catch(() => ({}))) as { error?: string; code?: string };
  if (!response.ok)
    throw new LearnerHttpError(
      response.status,
      payload.code ?? 'unknown',
      `learner ${route}: HTTP ${response.status}: ${payload.error ?? 'no message'}`,
    );
  return payload as T;
}

/**
 * Rethrows a learner's refusal (a 4xx answer other than `not_ready` and `cancelled`) as bad input, so that
 * Temporal does not retry it; `cancelled` becomes an infrastructure error (retried), `disk_full` one that is not
 * retried (the campaign pauses at once); anything else is rethrown.
 */
export function rethrowRefusalAsBadInput(err: unknown): never {
  // A full checkpoint volume: retrying the save cannot help until space is freed, so the campaign pauses at once.
  if (err instanceof LearnerHttpError && err.code === 'disk_full')
    throw new InfrastructureError(err.message, { cause: err, retryable: false });
  // `cancelled`: an earlier attempt's cancel landed on this step (a worker replaced mid-step); the retry runs it.
  if (err instanceof LearnerHttpError && err.code === 'cancelled')
    throw new InfrastructureError(`${err.message} (cancelled by an earlier attempt; retried)`, { cause: err });
  if (err instanceof LearnerHttpError && err.status >= 400 && err.status < 500 && err.code !== 'not_ready') {
    throw new BadInputError(err.message);
  }
  throw err;
}
