import type { EpisodeRecord } from './episode-runner.ts';

/**
 * One episode as a result line that `tbt eval aggregate` and `tbt prepare` read with their default
 * fields: uid, repetition, success, infrastructure_error, domain, tokens {role: {input, output, cached_input}}
 * (input = uncached input tokens).
 */
export interface EpisodeResultLine {
  id: string;
  uid: string;
  repetition: number;
  domain: string;
  success: boolean;
  infrastructure_error: boolean;
  finish_reason: string;
  cause?: string;
  tokens: Record<'policy' | 'user' | 'judge', { input: number; output: number; cached_input: number }>;
}

export function resultLine(
  id: string,
  uid: string,
  repetition: number,
  domain: string,
  record: Pick<EpisodeRecord, 'outcome' | 'finishReason' | 'cause' | 'usage'>,
): EpisodeResultLine {
  const tokens = (u: EpisodeRecord['usage']['policy']) => ({
    input: u.input - u.cached,
    output: u.output,
    cached_input: u.cached,
  });
  return {
    id,
    uid,
    repetition,
    domain,
    success: record.outcome === 'success',
    infrastructure_error: record.outcome === 'infrastructure_error',
    finish_reason: record.finishReason,
    ...(record.cause ? { cause: record.cause.slice(0, 300) } : {}),
    tokens: { policy: tokens(record.usage.policy), user: tokens(record.usage.user), judge: tokens(record.usage.judge) },
  };
}
