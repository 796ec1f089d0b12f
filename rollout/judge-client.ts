import OpenAI from 'openai';
import { InfrastructureError, errorMessage } from '../core/errors.ts';
import { judgeSaysYes } from '../core/judge-verdict.ts';
import { NO_API_KEY, resolveApiKey } from './api-key.ts';

/**
 * The judge behind an OpenAI-compatible endpoint. A yes/no judgement uses the reference's prompt (below) at
 * temperature 0 with at most 128 completion tokens, and its yes/no parser (core/judge-verdict.ts); test code
 * may also ask for a plain completion (`Judge._get_text_completion`). Any failure to get an answer is an
 * infrastructure error: a judge outage must never grade an episode 0. `signal` aborts the judge's requests in
 * flight (the episode was abandoned).
 */

export interface JudgeConfig {
  baseUrl: string;
  model: string;
  /** Name of the environment variable holding the API key; read at call time, never stored. */
  apiKeyEnv?: string;
  timeoutMs?: number;
}

export interface JudgeVerdict {
  question: string;
  answer: string;
  yes: boolean;
  usage: { input: number; output: number };
}

export interface JudgeCompletion {
  text: string;
  usage: { input: number; output: number };
}

export interface JudgeMessage {
  role: string;
  content: string;
}

export interface Judge {
  /** A yes/no judgement of `assistantMessage` (the reference's `judge.text_yesno`). */
  ask(question: string, assistantMessage: string): Promise<JudgeVerdict>;
  /** One chat completion with the caller's messages (test code's own judge prompts). */
  complete(
    messages: JudgeMessage[],
    settings?: { temperature?: number; max_completion_tokens?: number },
  ): Promise<JudgeCompletion>;
}

/** The reference's yes/no judge prompt, one sentence a line (the same text as the Python shim's judge). */
export const JUDGE_SYSTEM_PROMPT =
  'You are a judge, your task is to read the contents of a message and answer a question about the message.\n' +
  'A message will be presented between <message> and </message> tags, and a question will be asked afterwards.\n' +
  'Answer the question with a single word: Yes or No.';

/** `<` and `>` encoded as the reference does (`&` is left as it is, so an encoded tag stays ambiguous there too). */
const escapeTags = (text: string) => text.replaceAll('<', '&lt;').replaceAll('>', '&gt;');

export function judgeMessages(question: string, assistantMessage: string): JudgeMessage[] {
  return [
    { role: 'system', content: JUDGE_SYSTEM_PROMPT },
    { role: 'user', content: `<message>\n${escapeTags(assistantMessage)}\n</message>\n${question}` },
  ];
}

/** A judge from its two calls: `ask` is `complete` with the yes/no prompt and parser. */
export function judgeFrom(complete: Judge['complete']): Judge {
  return {
    complete,
    async ask(question, assistantMessage) {
      const answer = await complete(judgeMessages(question, assistantMessage), {
        temperature: 0,
        max_completion_tokens: 128,
      });
      return { question, answer: answer.text, yes: judgeSaysYes(answer.text), usage: answer.usage };
    },
  };
}

export function createJudge(config: JudgeConfig, signal?: AbortSignal): Judge {
  return judgeFrom(async (messages, settings) => {
    const client = new OpenAI({
      baseURL: config.baseUrl,
      apiKey: resolveApiKey(config) ?? NO_API_KEY,
      timeout: config.timeoutMs ?? 60_000,
      maxRetries: 2,
    });
    try {
      const completion = await client.chat.completions.create(
        {
          model: config.model,
          temperature: settings?.temperature ?? 0,
          max_completion_tokens: settings?.max_completion_tokens ?? 128,
          messages: messages.map((m) => ({ role: m.role as 'system' | 'user' | 'assistant', content: m.content })),
        },
        signal ? { signal } : undefined,
      );
      const text = completion.choices[0]?.message?.content;
      if (typeof text !== 'string') throw new Error('the judge returned no message content');
      return {
        text,
        usage: { input: completion.usage?.prompt_tokens ?? 0, output: completion.usage?.completion_tokens ?? 0 },
      };
    } catch (err) {
      throw new InfrastructureError(`judge unavailable: ${errorMessage(err)}`, { cause: err });
    }
  });
}
