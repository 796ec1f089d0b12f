import OpenAI from 'openai';
import { InfrastructureError, errorMessage } from '../core/errors.ts';
import { judgeSaysYes } from '../core/judge-verdict.ts';
import { NO_API_KEY, resolveApiKey } from './api-key.ts';

/**
 * Yes/no rubric judge behind an OpenAI-compatible endpoint, temperature 0. Any failure to get an answer
 * is an infrastructure error: a judge outage must never grade an episode 0.
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

export interface Judge {
  ask(question: string, assistantMessage: string): Promise<JudgeVerdict>;
}

const SYSTEM =
  'You are a strict grader. Answer the question about the assistant message with a single word: yes or no.';

export function createJudge(config: JudgeConfig): Judge {
  return {
    async ask(question, assistantMessage) {
      const client = new OpenAI({
        baseURL: config.baseUrl,
        apiKey: resolveApiKey(config) ?? NO_API_KEY,
        timeout: config.timeoutMs ?? 60_000,
        maxRetries: 2,
      });
      try {
        const completion = await client.chat.completions.create({
          model: config.model,
          temperature: 0,
          max_tokens: 16,
          messages: [
            { role: 'system', content: SYSTEM },
            {
              role: 'user',
              content: `Assistant message:\n<<<\n${assistantMessage.replaceAll('<<<', '< < <').replaceAll('>>>', '> > >')}\n>>>\n\nQuestion: ${question}\nAnswer yes or no.`,
            },
          ],
        });
        const answer = completion.choices[0]?.message?.content;
        if (typeof answer !== 'string') throw new Error('the judge returned no message content');
        return {
          question,
          answer,
          yes: judgeSaysYes(answer),
          usage: { input: completion.usage?.prompt_tokens ?? 0, output: completion.usage?.completion_tokens ?? 0 },
        };
      } catch (err) {
        throw new InfrastructureError(`judge unavailable: ${errorMessage(err)}`, { cause: err });
      }
    },
  };
}
