import { Context } from '@temporalio/activity';
import { errorMessage } from '../core/errors.ts';
import { episodeInfrastructureFailure, toTemporalFailure } from './temporal-failure.ts';
import { recordEpisode, type EpisodeRequest } from '../rollout/episode-recording.ts';
import type { EpisodeBackends } from '../rollout/episode-setup.ts';
import type { EpisodeSummary } from '../rollout/episode-store.ts';
import type { SandboxPool } from '../sandbox/sandbox-pool.ts';
import type { TerminalStateGrader } from '../sandbox/terminal-state-grader.ts';
import { thinkingboxResourcesFactory } from '../rollout/thinkingbox-resources.ts';
import { toEndpoint, type EpisodeConfig } from '../config/episode-config.ts';
import { systemMessageDecision, systemMessagesManifestEntry } from '../rollout/system-message-handling.ts';

/**
 * The episode as a Temporal activity. Its payloads carry only ids and a summary; the episode itself
 * (messages, tool calls, diff, token ids) is stored in the control database under the episode id
 * (rollout/episode-recording.ts). Idempotent: a retry of a finished episode returns the stored summary.
 * An episode that ended in an infrastructure error is stored too, and its attempt then fails, non-retryably, with
 * the stored summary in the failure (activities/temporal-failure.ts): a failed attempt in the UI, not a green one.
 * A cancelled attempt (its workflow cancelled or closed, the worker shutting down) abandons its episode within
 * moments, releasing the sandbox, and ends as cancelled with nothing stored.
 */

/** The activity's payload (workflows build it; its shape is part of their histories). */
export type EpisodeActivityInput = EpisodeRequest;

export function createEpisodeActivities(deps: {
  pool: SandboxPool;
  grader: TerminalStateGrader;
  controlUrl: string;
  thinkingbox?: EpisodeBackends['thinkingbox'];
}) {
  const backends: EpisodeBackends = {
    pool: deps.pool,
    grader: deps.grader,
    thinkingbox: deps.thinkingbox ?? thinkingboxResourcesFactory(),
  };
  return {
    async runEpisode(input: EpisodeActivityInput): Promise<EpisodeSummary> {
      const ctx = Context.current();
      let summary: EpisodeSummary;
      try {
        summary = await recordEpisode(input, backends, deps.controlUrl, {
          number: ctx.info.attempt,
          heartbeat: (details) => ctx.heartbeat(details),
          log: ctx.log,
          signal: ctx.cancellationSignal,
        });
      } catch (err) {
        const cancelled = ctx.cancellationSignal;
        if (cancelled.aborted) {
          // The SDK reports the attempt as cancelled only when it ends with the cancellation itself.
          ctx.log.info('episode abandoned: its attempt was cancelled', {
            episodeId: input.episodeId,
            reason: errorMessage(cancelled.reason),
          });
          throw cancelled.reason;
        }
        ctx.log.warn('episode attempt failed', { episodeId: input.episodeId, error: errorMessage(err) });
        throw toTemporalFailure(err);
      }
      if (summary.outcome === 'infrastructure_error') throw episodeInfrastructureFailure(summary);
      return summary;
    },

    /** The run manifest's entry for the policy: how its chat template takes system messages. */
    async policySystemMessages(input: { policy: EpisodeConfig['policy'] }): Promise<Record<string, unknown>> {
      try {
        return systemMessagesManifestEntry(await systemMessageDecision(toEndpoint(input.policy)));
      } catch (err) {
        throw toTemporalFailure(err);
      }
    },
  };
}

export type EpisodeActivities = ReturnType<typeof createEpisodeActivities>;
