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
  return fittedForTemporal(mappedFailure(err));
}

function mappedFailure(err: unknown): unknown {
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

/**
 * Temporal keeps at most 4 KB of a retried activity's last failure (message, stack trace and causes together) and
 * beyond that shows only "Failure exceeds size limit." (`limit.mutableStateActivityFailureSize.error`): a learner's
 * multi-rank traceback in a message then hides the reason. So messages keep their head and their last line, stacks
 * their first frames without repeating the message, and causes below the second level keep a short message only.
 * The error is about to be thrown: it is trimmed in place.
 */
export const failureMessageLimit = 600;
const stackFrames = 8;
const shortMessageLimit = 160;

function fittedForTemporal<T>(err: T, depth = 0): T {
  if (!(err instanceof Error)) return err;
  const limit = depth < 2 ? failureMessageLimit : shortMessageLimit;
  err.message = clipped(err.message, limit);
  const frames = (err.stack ?? '').split('\n').filter((line) => line.startsWith('    at '));
  const headline = `${err.name}: ${clipped(err.message.split('\n')[0] ?? '', shortMessageLimit)}`;
  err.stack = depth < 2 ? [headline, ...frames.slice(0, stackFrames)].join('\n') : headline;
  if (depth >= 3) err.cause = undefined;
  else fittedForTemporal(err.cause, depth + 1);
  return err;
}

/** The text within `limit` characters: two thirds of its head and its tail (where an exception's last line is). */
function clipped(text: string, limit: number): string {
  if (text.length <= limit) return text;
  const marker = ` [... ${text.length - limit} characters cut ...] `;
  const tail = Math.floor((limit - marker.length) / 3);
  return text.slice(0, limit - marker.length - tail) + marker + text.slice(text.length - tail);
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
