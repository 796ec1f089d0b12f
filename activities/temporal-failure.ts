import { ApplicationFailure } from '@temporalio/common';
import { BadInputError, InfrastructureError } from '../core/errors.ts';

/**
 * The one mapping from our error classes to Temporal failures: the failure type is the class name, bad input
 * is non-retryable, an infrastructure error is retryable under the activity's retry policy. Anything else
 * passes through unchanged (the SDK turns it into a retryable failure of its own class name).
 */
export function toTemporalFailure(err: unknown): unknown {
  if (err instanceof ApplicationFailure) return err;
  if (err instanceof BadInputError)
    return ApplicationFailure.create({ message: err.message, type: err.name, nonRetryable: true, cause: err });
  if (err instanceof InfrastructureError)
    return ApplicationFailure.create({ message: err.message, type: err.name, nonRetryable: false, cause: err });
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
