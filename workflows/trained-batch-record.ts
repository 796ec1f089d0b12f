import type { StepRecord } from '../activities/campaign-activities.ts';
import type { TrainedEpisode } from '../campaign-records/trained-episodes.ts';
import { episodeLag, versionMix, type SampledEpisode, type SampledStep } from './sampled-step.ts';

/**
 * What a step's record says of the batch trained. Usually the groups the step drew; but a step that runs again (a
 * re-run of its workflow) plays its lost episodes again, and those that now succeed change the groups it draws,
 * while the learner, which never trains a step twice, answers with the batch it trained the first time
 * (`batchMatches` false and its episode ids). The record then names that batch, so it describes weights that exist.
 */

type BatchFields = Pick<StepRecord, 'groups' | 'leakedInfraEpisodes' | 'meanReward'>;

/** The record's fields that describe a trained batch, from its groups (the drawn ones, or those trained). */
export function batchFields(groups: SampledStep['groups']): BatchFields {
  const episodes = groups.flatMap((g) => g.episodes);
  const rewards = episodes.map((e) => e.reward);
  return {
    groups: groups.map((g) => ({
      uid: g.uid,
      rewards: g.episodes.map((e) => e.reward),
      episodeIds: g.episodes.map((e) => e.id),
    })),
    // Leakage check: only a graded episode (success or agent failure) may reach an advantage.
    leakedInfraEpisodes: episodes.filter((e) => e.outcome !== 'success' && e.outcome !== 'agent_failure').length,
    meanReward: rewards.length ? rewards.reduce((a, b) => a + b, 0) / rewards.length : 0,
  };
}

/** The record's `versionMix` of these groups: absent when no episode carried token versions. */
export function versionMixField(groups: SampledStep['groups']): Pick<StepRecord, 'versionMix'> {
  const mix = versionMix(groups);
  return mix ? { versionMix: mix } : {};
}

/** The trained episodes the workflow does not hold (the step drew others this time): to read from the store. */
export function episodesToRead(sample: SampledStep, trainedIds: string[]): string[] {
  const held = new Set(sample.groups.flatMap((g) => g.episodes.map((e) => e.id)));
  return trainedIds.filter((id) => !held.has(id));
}

/**
 * `record` (of the groups drawn) made to describe the batch the learner trained: its episodes come from the sample
 * where it holds them, else from `read` (the episode store), grouped by task in the order of the trained ids. An id
 * found in neither stays in `trainedEpisodeIds` only. Without the ids (a learner that had not kept them) the record
 * only says that the batch differed.
 */
export function trainedBatchRecord(
  record: StepRecord,
  sample: SampledStep,
  trainedIds: string[] | undefined,
  read: TrainedEpisode[],
): StepRecord {
  if (trainedIds === undefined) return { ...record, batchMismatch: true };
  const known = new Map<string, { uid: string; episode: SampledEpisode }>();
  for (const g of sample.groups) for (const e of g.episodes) known.set(e.id, { uid: g.uid, episode: e });
  for (const { taskUid, ...episode } of read) known.set(episode.id, { uid: taskUid, episode });
  const byTask = new Map<string, SampledEpisode[]>();
  for (const id of trainedIds) {
    const found = known.get(id);
    if (!found) continue;
    const group = byTask.get(found.uid) ?? [];
    group.push(found.episode);
    byTask.set(found.uid, group);
  }
  const groups = [...byTask].map(([uid, episodes]) => ({ uid, episodes }));
  return {
    ...record,
    ...batchFields(groups),
    episodeLag: episodeLag({ ...sample, groups }),
    ...versionMixField(groups),
    batchMismatch: true,
    trainedEpisodeIds: trainedIds,
  };
}
