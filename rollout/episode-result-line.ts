import type { EpisodeRecord } from './episode-runner.ts';

/**
 * One episode as a result line that `tbt eval aggregate` and `tbt prepare` read with their default
 * fields: uid, repetition, success, infrastructure_error, task_error, domain, tokens {role: {input, output,
 * cached_input}}
 * (input = uncached input tokens). The same line also carries the reference's result shape (`test_result`,
 * `is_system_error`, reference `finish_reason` names in `metadata.finish_reason`, `usage`, `metadata`), so
 * `tbt eval aggregate --format thinkingbox` and tools written for the reference read it too.
 */
export interface EpisodeResultLine {
  id: string;
  uid: string;
  repetition: number;
  domain: string;
  success: boolean;
  infrastructure_error: boolean;
  /** The task's own test code raised the same exception twice: not scored, listed apart (a system error to the
   * reference's tools). */
  task_error: boolean;
  finish_reason: string;
  cause?: string;
  tokens: Record<'policy' | 'user' | 'judge', { input: number; output: number; cached_input: number }>;
  test_result: { result: boolean; reward: number; is_system_error: boolean } | null;
  is_system_error: boolean;
  /** The agent's usage in the reference's OpenAI-style form (one entry: our counts are per episode). */
  usage: { input_tokens: number; output_tokens: number; input_tokens_details: { cached_tokens: number } }[];
  metadata: {
    scenario?: string;
    test_case_file: string;
    test_case_name: string;
    repetition: number;
    /** The reference's finish reason: done, end_turn_tool, no_user_llm, user_limit, agent_limit, agent_error. */
    finish_reason: string;
  };
}

/** Our finish reasons in the reference's names. */
export function referenceFinishReason(finish: string): string {
  const names: Record<string, string> = {
    done: 'done',
    end_turn: 'end_turn_tool',
    single_turn: 'no_user_llm',
    // The scripted user had no reply left: no simulated user went on, as the reference's end without a user model.
    user_script_ended: 'no_user_llm',
    user_finished: 'no_user_llm',
    user_turn_limit: 'user_limit',
    agent_turn_limit: 'agent_limit',
  };
  return names[finish] ?? 'agent_error';
}

export function resultLine(
  id: string,
  uid: string,
  repetition: number,
  domain: string,
  record: Pick<EpisodeRecord, 'outcome' | 'finishReason' | 'cause' | 'usage'> & { reward?: number },
  scenario?: string,
): EpisodeResultLine {
  const tokens = (u: EpisodeRecord['usage']['policy']) => ({
    input: u.input - u.cached,
    output: u.output,
    cached_input: u.cached,
  });
  const systemError = record.outcome === 'infrastructure_error' || record.outcome === 'task_error';
  return {
    id,
    uid,
    repetition,
    domain,
    success: record.outcome === 'success',
    infrastructure_error: record.outcome === 'infrastructure_error',
    task_error: record.outcome === 'task_error',
    finish_reason: record.finishReason,
    ...(record.cause ? { cause: record.cause.slice(0, 300) } : {}),
    tokens: { policy: tokens(record.usage.policy), user: tokens(record.usage.user), judge: tokens(record.usage.judge) },
    test_result: systemError
      ? null
      : { result: record.outcome === 'success', reward: record.reward ?? 0, is_system_error: false },
    is_system_error: systemError,
    usage: [
      {
        input_tokens: record.usage.policy.input,
        output_tokens: record.usage.policy.output,
        input_tokens_details: { cached_tokens: record.usage.policy.cached },
      },
    ],
    metadata: {
      ...(scenario ? { scenario } : {}),
      test_case_file: uid.includes(':') ? uid.slice(0, uid.lastIndexOf(':')) : uid,
      test_case_name: uid.includes(':') ? uid.slice(uid.lastIndexOf(':') + 1) : uid,
      repetition,
      finish_reason: referenceFinishReason(record.finishReason),
    },
  };
}
