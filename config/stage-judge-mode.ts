import type { EpisodeConfig, JudgeMode } from './episode-config.ts';

/**
 * The episode config of one campaign stage, with that stage's judge mode (`probe`, `training` or
 * `evaluation.judge_mode`). A config recorded before the field existed has none: its episodes are left exactly as
 * recorded histories have them (the legacy judge). Pure: workflows call it.
 */
export function withJudgeMode(episode: EpisodeConfig, mode: JudgeMode | undefined): EpisodeConfig {
  return mode === undefined ? episode : { ...episode, judge_mode: mode };
}
