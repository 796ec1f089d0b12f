import { Context } from '@temporalio/activity';
import { errorMessage } from '../core/errors.ts';
import { toTemporalFailure } from './temporal-failure.ts';
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
      try {
        const ctx = Context.current();
        return await recordEpisode(input, backends, deps.controlUrl, {
          number: ctx.info.attempt,
          heartbeat: (details) => ctx.heartbeat(details),
          log: ctx.log,
        });
      } catch (err) {
        Context.current().log.warn('episode attempt failed', { episodeId: input.episodeId, error: errorMessage(err) });
        throw toTemporalFailure(err);
      }
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
