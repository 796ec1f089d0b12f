import { condition } from '@temporalio/workflow';
import type { EpisodeActivityInput } from '../activities/episode-activities.ts';
import type { EpisodeSummary } from '../rollout/episode-store.ts';
import type { EpisodeConfig } from '../config/episode-config.ts';
import { runEpisodeOrInfraError } from './one-episode.ts';

/**
 * Kept for replay only: probe and evaluation workflows started before the sharded runner (keyed-episodes.ts)
 * take this path (`patched('episode-shards')` is false for them), so their recorded histories replay unchanged.
 * Do not change its command order. Its bound does not hold (see concurrency-slots.ts).
 *
 * Runs `uid#rep` keys as episodes with bounded concurrency. A key whose episode ends in an infrastructure
 * error is re-run under a new episode id (`...~retry-<n>`) up to `maxReruns` times; the result per key is
 * its last attempt. Ids are deterministic, so a replay never runs or counts an episode twice.
 */

export interface KeyedEpisodesInputV1 {
  idPrefix: string;
  uids: string[];
  repeats: number;
  suiteDir: string;
  episode: EpisodeConfig;
  purpose: EpisodeActivityInput['purpose'];
  campaignId: string;
  rolloutQueue: string;
  concurrency: number;
  maxReruns: number;
}

export interface KeyedResultV1 {
  key: string;
  uid: string;
  repetition: number;
  attempts: number;
  final: EpisodeSummary;
}

export async function runKeyedEpisodesV1(input: KeyedEpisodesInputV1): Promise<KeyedResultV1[]> {
  let inFlight = 0;
  const runKey = async (uid: string, repetition: number): Promise<KeyedResultV1> => {
    const key = `${uid}#${repetition}`;
    let attempts = 0;
    for (;;) {
      await condition(() => inFlight < input.concurrency);
      inFlight += 1;
      let final: EpisodeSummary;
      try {
        final = await runEpisodeOrInfraError(input.rolloutQueue, {
          episodeId: `${input.idPrefix}/${key}${attempts ? `~retry-${attempts}` : ''}`,
          suiteDir: input.suiteDir,
          taskUid: uid,
          purpose: input.purpose,
          campaign: input.campaignId,
          repetition,
          config: input.episode,
        });
      } finally {
        inFlight -= 1;
      }
      attempts += 1;
      if (final.outcome !== 'infrastructure_error' || attempts > input.maxReruns)
        return { key, uid, repetition, attempts, final };
    }
  };
  return Promise.all(input.uids.flatMap((uid) => Array.from({ length: input.repeats }, (_, rep) => runKey(uid, rep))));
}
