import type { Task } from '../config/task-schema.ts';
import { buildUserSimulatorPrompt, USER_SIMULATOR_SYSTEM, type VisibleTurn } from '../core/user-simulator-prompt.ts';
import { chatComplete, type Endpoint } from './policy-client.ts';

/**
 * The simulated user: `scripted` replays the task's `user_replies` in order (tests, the offline default);
 * `llm` asks an OpenAI-compatible model, statelessly, at temperature 0.3. A null reply ends the episode.
 * An endpoint failure propagates as an InfrastructureError (never graded).
 */

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
        { temperature: config.temperature ?? 0.3, topP: 1, maxTokens: config.maxTokens ?? 512 },
      );
      return { text: result.content.trim(), modelCall: true, usage: result.usage };
    },
  };
}
