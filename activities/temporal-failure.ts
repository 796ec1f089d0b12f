import { ApplicationFailure } from '@temporalio/common';
import { BadInputError, InfrastructureError, infrastructureSystemCode } from '../core/errors.ts';
import { infrastructureErrorClass } from '../core/infrastructure-error-class.ts';
import type { EpisodeSummary } from '../rollout/episode-store.ts';

/**
 * The one mapping from our error classes to Temporal failures: the failure type is the class name, bad input
 * is non-retryable, an infrastructure error is retryable under the activity's retry policy (unless it says no retry
 * can cure it: the campaign then pauses at once), and so is an unwrapped system error whose code says the machine
 * or network failed (core/errors.ts). Anything else passes through unchanged (the SDK turns it into a retryable
 * failure of its own class name; a campaign fails on it: a bug).
 */
export function toTemporalFailure(err: unknown): unknown {
  if (err instanceof ApplicationFailure) return err;
  if (err instanceof BadInputError)
    return ApplicationFailure.create({ message: err.message, type: err.name, nonRetryable: true, cause: err });
  if (err instanceof InfrastructureError)
    return ApplicationFailure.create({
      message: err.message,
      type: err.name,
      nonRetryable: !err.retryable,
      cause: err,
    });
  // A refused connection, a full disk and the like, met where nothing wrapped them: infrastructure all the same.
  const code = infrastructureSystemCode(err);
  if (code !== undefined && err instanceof Error)
    return ApplicationFailure.create({
      message: `${code}: ${err.message}`,
      type: InfrastructureError.name,
      nonRetryable: false,
      cause: err,
    });
  return err;
}

/** Wraps every function of an activity object so what it throws goes through `toTemporalFailure`. */
export function withFailureMapping<T extends object>(activities: T): T {
  return Object.fromEntries(
    Object.entries(activities).map(([name, fn]) => [
      name,
      typeof fn === 'function'
        ? async (...args: unknown[]) => {
            try {
              return await (fn as (...a: unknown[]) => Promise<unknown>)(...args);
            } catch (err) {
              throw toTemporalFailure(err);
            }
          }
        : fn,
    ]),
  ) as T;
}

/** The failure type of an episode attempt whose episode ended in an infrastructure error. */
export const episodeInfrastructureErrorType = 'EpisodeInfrastructureError';

/**
 * An episode that ended in an infrastructure error (stored like any other), as the failure its activity ends with:
 * a failed attempt in the Temporal UI, its message led by the error's class, rather than a green completion.
 * Non-retryable: the workflows re-run such a key themselves, under a new episode id and with their own backoff, and a
 * Temporal retry of the same id would run the key twice. The stored summary travels in the details, from which
 * workflows/one-episode.ts hands it to the caller as if the activity had returned it.
 */
export function episodeInfrastructureFailure(summary: EpisodeSummary): ApplicationFailure {
  return ApplicationFailure.create({
    type: episodeInfrastructureErrorType,
    message: `${infrastructureErrorClass(summary.cause)}: ${summary.cause ?? 'infrastructure error'}`,
    nonRetryable: true,
    details: [summary],
  });
}
