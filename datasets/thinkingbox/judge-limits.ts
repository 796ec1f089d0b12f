import { thinkingboxSettingsSchema, type ThinkingboxSettings } from '../../config/episode-config.ts';
import { InfrastructureError } from '../../core/errors.ts';
import { judgeFrom, type Judge } from '../../rollout/judge-client.ts';

/**
 * What one test case may spend of the operator's judge (third review, finding 14). Test code asks for judge
 * completions over the grading pipe with settings of its own choosing; the calls go out on the operator's key.
 * Per test case: at most `callsPerTest` calls, one in flight at a time (requests are answered in order, so the
 * pipe's one-exchange-at-a-time holds even for a test that writes past the runner's lock), and
 * `max_completion_tokens` at most `maxCompletionTokens`, temperature within [0, 2]. Other settings (`max_tokens`,
 * ...) were never sent and still are not. A call over the count is answered with a judge error, and the test's
 * grade becomes an infrastructure error naming the cap, whatever the test then does with the error: the cap is
 * the operator's, so an episode must never be graded 0 (or 1) on answers the test did not get.
 */
export interface JudgeLimits {
  callsPerTest: number;
  maxCompletionTokens: number;
}

export function judgeLimitsFrom(
  settings: Pick<ThinkingboxSettings, 'judge_calls_per_test' | 'judge_max_completion_tokens'>,
): JudgeLimits {
  return { callsPerTest: settings.judge_calls_per_test, maxCompletionTokens: settings.judge_max_completion_tokens };
}

/** The defaults of `episode.thinkingbox`. */
export function defaultJudgeLimits(): JudgeLimits {
  return judgeLimitsFrom(thinkingboxSettingsSchema.parse(undefined));
}

/** What a completion gets when the test names no `max_completion_tokens` (the judge client's default). */
const DEFAULT_COMPLETION_TOKENS = 128;

export interface LimitedJudge extends Judge {
  /** Why a call was refused (the first refusal's message), if one was. */
  refused(): string | undefined;
}

/** `judge` within `limits` for one test case; `where` names the test in messages and log lines. */
export function limitedJudge(
  judge: Judge,
  limits: JudgeLimits,
  where: string,
  log: (line: string) => void = (line) => process.stderr.write(`${line}\n`),
): LimitedJudge {
  let calls = 0;
  let refusal: string | undefined;
  let clampLogged = false;
  let queue: Promise<unknown> = Promise.resolve();
  const complete: Judge['complete'] = (messages, settings = {}) => {
    const call = async () => {
      if (calls >= limits.callsPerTest) {
        if (!refusal) {
          refusal =
            `${where} asked the judge more than ${limits.callsPerTest} times, the cap per test case ` +
            '(episode.thinkingbox.judge_calls_per_test); later calls were refused';
          log(`[judge] ${refusal}`);
        }
        throw new InfrastructureError(refusal);
      }
      calls += 1;
      const asked = settings.max_completion_tokens;
      const valid = typeof asked === 'number' && Number.isInteger(asked) && asked >= 1;
      const tokens = Math.min(valid ? asked : DEFAULT_COMPLETION_TOKENS, limits.maxCompletionTokens);
      if (valid && asked > tokens && !clampLogged) {
        clampLogged = true;
        log(
          `[judge] ${where} asked max_completion_tokens ${asked}; sent ${tokens} ` +
            '(episode.thinkingbox.judge_max_completion_tokens)',
        );
      }
      const t = settings.temperature;
      const temperature = typeof t === 'number' && Number.isFinite(t) ? Math.min(Math.max(t, 0), 2) : 0;
      return judge.complete(messages, { temperature, max_completion_tokens: tokens });
    };
    // One call at a time, in the order asked: each waits for the one before it, whatever that one's outcome.
    const result = queue.then(call, call);
    queue = result.catch(() => undefined);
    return result;
  };
  return { ...judgeFrom(complete, judge.mode), refused: () => refusal };
}
