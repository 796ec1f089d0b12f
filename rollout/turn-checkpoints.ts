import type { Generation } from './policy-driver.ts';
import type { UserReply } from './simulated-user.ts';

/**
 * Turn-level resume (docs/episode-resume.md). Each completed agent turn of an episode is saved as a checkpoint: the
 * completion as sampled (tokens and log-probs in token mode), the results its tool calls returned and the user's
 * reply. A later attempt of the same episode (its worker died, or the infrastructure spoiled the attempt) replays the
 * saved turns instead of sampling them again: the completions come from the checkpoints, the tool calls run again on
 * a fresh backend (which brings a database or an in-memory tool server back to the recorded state) and each result
 * is compared with the recorded one, and the user's replies are taken as recorded. The episode then goes on live from
 * the next turn. A replayed result that differs (a tool that is not deterministic) ends the replay: the episode
 * starts over from the prompt and says why.
 */

export interface TurnCheckpoint {
  /** The completion's index in the episode (0 for the first). */
  turn: number;
  /** The episode's own time until this turn ended, over all attempts: a resumed episode keeps its deadline. */
  elapsedMs: number;
  /** Weight version of the policy that sampled the completion (campaign episodes). */
  weightVersion?: number;
  generation: Generation;
  /** The results of the completion's tool calls, in order (what the agent observed). */
  toolResults: { name: string; text: string; isError: boolean }[];
  /** The simulated user's reply after the completion, if one came. */
  userReply?: UserReply;
}

/** One attempt that found saved turns (`EpisodeRecord.resume`). */
export interface ResumeEntry {
  /** The attempt (host:pid:attempt:uuid) that resumed. */
  attempt: string;
  /** The first turn played live: the number of turns restored (0 when the episode started over). */
  fromTurn: number;
  /** Turns that were saved when the attempt began. */
  savedTurns: number;
  /** Tool calls run again to restore the backend's state. */
  replayedToolCalls: number;
  /** Why the replay was given up and the episode started over from the prompt. */
  restartedFromPrompt?: string;
}

/** A replayed tool result (or the state around it) did not match the recording: the episode starts over. */
export class ReplayDiverged extends Error {}

/**
 * The saved turns a new attempt can replay: a run of turns from 0 without a gap (a turn whose save failed ends it),
 * and none sampled by other weights than this attempt's; with partial rollouts (`newer`), later versions too.
 */
export function replayableTurns(
  saved: TurnCheckpoint[],
  weightVersion: number | undefined,
  newer = false,
): { turns: TurnCheckpoint[]; refused?: string } {
  const sorted = [...saved].sort((a, b) => a.turn - b.turn);
  const turns: TurnCheckpoint[] = [];
  const later = (v: number | undefined) => newer && v !== undefined && weightVersion !== undefined && v > weightVersion;
  for (const cp of sorted) {
    if (cp.turn !== turns.length) break;
    if (cp.weightVersion !== weightVersion && !later(cp.weightVersion))
      return {
        turns: [],
        refused:
          `turn ${cp.turn} was sampled by weight version ${cp.weightVersion ?? 'none'}, this attempt samples ` +
          `version ${weightVersion ?? 'none'}`,
      };
    turns.push(cp);
  }
  return { turns };
}

/** Why a replayed tool call's result differs from the recorded one, or undefined when it matches. */
export function toolReplayMismatch(
  recorded: TurnCheckpoint['toolResults'][number] | undefined,
  live: { name: string; text: string; isError: boolean },
  turn: number,
): string | undefined {
  if (!recorded) return `turn ${turn}: the replay called ${live.name}, which the recording did not`;
  if (recorded.name !== live.name)
    return `turn ${turn}: the replay called ${live.name}, the recording ${recorded.name}`;
  if (recorded.isError !== live.isError || recorded.text !== live.text)
    return (
      `turn ${turn}: ${live.name} returned ${clip(live.text)}${live.isError ? ' (error)' : ''} on replay, ` +
      `${clip(recorded.text)}${recorded.isError ? ' (error)' : ''} when recorded`
    );
  return undefined;
}

function clip(text: string): string {
  return JSON.stringify(text.length > 120 ? `${text.slice(0, 120)}...` : text);
}
