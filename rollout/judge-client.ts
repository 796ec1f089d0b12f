import OpenAI from 'openai';
import type { JudgeMode } from '../config/episode-config.ts';
import { InfrastructureError, errorMessage } from '../core/errors.ts';
import { judgeSaysYes, motivatedJudgeSaysYes } from '../core/judge-verdict.ts';
import { NO_API_KEY, resolveApiKey } from './api-key.ts';

/**
 * The judge behind an OpenAI-compatible endpoint. A yes/no judgement asks as the reference's `judge.text_yesno` in
 * the judge's mode: `legacy` with its bare yes/no prompt at temperature 0 with at most 128 completion tokens and its
 * yes/no parser, `motivation` with its JSON prompt and parser at temperature 0 with at most 512 (core/judge-verdict.ts;
 * the settings are the Python shim's, so both grading paths make the same calls). Test code may also ask for a plain
 * completion (`Judge._get_text_completion`). Any failure to get an answer is an infrastructure error: a judge outage
 * must never grade an episode 0. `signal` aborts the judge's requests in flight (the episode was abandoned).
 */

export interface JudgeConfig {
  baseUrl: string;
  model: string;
  /** Name of the environment variable holding the API key; read at call time, never stored. */
  apiKeyEnv?: string;
  timeoutMs?: number;
  /** How yes/no questions are asked; default legacy. */
  mode?: JudgeMode;
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
  /** How `ask` asks, and the judge type test code's `judge` gets (the reference's `judge_type`). */
  mode: JudgeMode;
  /** A yes/no judgement of `assistantMessage` (the reference's `judge.text_yesno`). */
  ask(question: string, assistantMessage: string): Promise<JudgeVerdict>;
  /** One chat completion with the caller's messages (test code's own judge prompts). */
  complete(
    messages: JudgeMessage[],
    settings?: { temperature?: number; max_completion_tokens?: number },
  ): Promise<JudgeCompletion>;
}

/** The reference's legacy yes/no judge prompt (`SYSTEM_TEXT_YESNO`, the same text as the Python shim's judge). */
export const JUDGE_SYSTEM_PROMPT =
  'You are a judge, your task is to read the contents of a message and answer a question about the message.\n' +
  'A message will be presented between <message> and </message> tags, and a question will be asked afterwards.\n' +
  'Answer the question with a single word: Yes or No.';

/** The reference's motivation judge prompt (`SYSTEM_TEXT_YESNO_MOTIVATION`), ending in a newline as it does. */
export const JUDGE_MOTIVATION_SYSTEM_PROMPT =
  'You are a judge, your task is to read the contents of a message and answer a question about the message.\n' +
  'The message may contain a brief interaction between the assistant and the user. When answering, consider\n' +
  'only the assistant responses across the conversation.\n' +
  'A message will be presented between <message> and </message> tags, and a question will be asked afterwards.\n' +
  'Answer the question as follows:\n' +
  '\n' +
  '{\n' +
  '    "motivation": a brief explanation of your answer (1-2 sentences) in quotes,\n' +
  '    "answer": a single word: Yes or No in quotes.\n' +
  '}\n';

/** Completion settings per mode: the Python shim's (thinkingbox/shim/thinkingbox/common/judge.py). */
const ASK_SETTINGS = {
  legacy: { temperature: 0, max_completion_tokens: 128 },
  motivation: { temperature: 0, max_completion_tokens: 512 },
} as const satisfies Record<JudgeMode, { temperature: number; max_completion_tokens: number }>;

/** `<` and `>` encoded as the reference does (`&` is left as it is, so an encoded tag stays ambiguous there too). */
const escapeTags = (text: string) => text.replaceAll('<', '&lt;').replaceAll('>', '&gt;');

/** The system and user message of a yes/no question; the user message (`USER_TEXT_YESNO`) is the same in both modes. */
export function judgeMessages(question: string, assistantMessage: string, mode: JudgeMode = 'legacy'): JudgeMessage[] {
  return [
    { role: 'system', content: mode === 'motivation' ? JUDGE_MOTIVATION_SYSTEM_PROMPT : JUDGE_SYSTEM_PROMPT },
    { role: 'user', content: `<message>\n${escapeTags(assistantMessage)}\n</message>\n${question}` },
  ];
}

/** A judge from its two calls: `ask` is `complete` with the mode's yes/no prompt, settings and parser. */
export function judgeFrom(complete: Judge['complete'], mode: JudgeMode = 'legacy'): Judge {
  return {
    mode,
    complete,
    async ask(question, assistantMessage) {
      const answer = await complete(judgeMessages(question, assistantMessage, mode), { ...ASK_SETTINGS[mode] });
      const yes = mode === 'motivation' ? motivatedJudgeSaysYes(answer.text) : judgeSaysYes(answer.text);
      return { question, answer: answer.text, yes, usage: answer.usage };
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
  }, config.mode);
}
