import type { Task } from '../config/task-schema.ts';
import {
  buildUserSimulatorPrompt,
  cleanUserSimulatorReply,
  USER_SIMULATOR_SYSTEM,
  type VisibleTurn,
} from '../core/user-simulator-prompt.ts';
import { chatComplete, type Endpoint } from './policy-client.ts';

/**
 * The simulated user: `scripted` replies the task's `user_replies` in order (tests, the offline default);
 * `llm` asks an OpenAI-compatible model, statelessly, with the reference's prompt (core/user-simulator-prompt.ts),
 * at the reference's temperature 0.3 and generation cap of 4,096 tokens, and cleans the reply as the reference does.
 * A null reply ends the episode. An endpoint failure propagates as an InfrastructureError (never graded). `signal`
 * aborts a reply in flight (the episode was abandoned).
 */

/** The reference's user-model completion cap (its sessions' `max_completion_tokens` default). */
export const USER_SIMULATOR_MAX_TOKENS = 4096;
export const USER_SIMULATOR_TEMPERATURE = 0.3;

export type UserSimulatorConfig =
  { mode: 'scripted' } | { mode: 'llm'; endpoint: Endpoint; temperature?: number; maxTokens?: number };

export interface UserReply {
  text: string;
  modelCall: boolean;
  usage: { input: number; output: number; cached: number };
}

export interface SimulatedUser {
  reply(transcript: VisibleTurn[], turn: number): Promise<UserReply | null>;
}

export function createSimulatedUser(
  config: UserSimulatorConfig,
  task: Pick<Task, 'user_context' | 'user_replies'>,
  signal?: AbortSignal,
): SimulatedUser {
  if (config.mode === 'scripted') {
    return {
      async reply(_transcript, turn) {
        const text = task.user_replies?.[turn];
        return text === undefined ? null : { text, modelCall: false, usage: { input: 0, output: 0, cached: 0 } };
      },
    };
  }
  return {
    async reply(transcript) {
      const result = await chatComplete(
        config.endpoint,
        [
          { role: 'system', content: USER_SIMULATOR_SYSTEM },
          { role: 'user', content: buildUserSimulatorPrompt(task.user_context ?? '', transcript) },
        ],
        {
          temperature: config.temperature ?? USER_SIMULATOR_TEMPERATURE,
          topP: 1,
          maxTokens: config.maxTokens ?? USER_SIMULATOR_MAX_TOKENS,
          signal,
        },
      );
      return { text: cleanUserSimulatorReply(result.content), modelCall: true, usage: result.usage };
    },
  };
}
