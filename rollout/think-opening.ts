import { InfrastructureError } from '../core/errors.ts';
import { generationPromptOpensThink } from '../core/interpret/think-blocks.ts';
import { detokenize, tryRenderMessages, type ChatMessage, type Endpoint } from './policy-client.ts';
import { decisionKey, isTransientRenderFailure } from './system-message-handling.ts';

/**
 * Does the policy's chat template open a `<think>` in its generation prompt (Qwen3.5's ends with `<think>\n`)?
 * Then every completion starts inside reasoning with no opening tag of its own, and one cut before its `</think>`
 * is all reasoning: never text for the user or `x.response`. Decided by rendering, never by model name: one user
 * message with and without the generation prompt (`/tokenize`, which applies the template a chat completion
 * uses), compared as text. A server that cannot render (a hosted API has no `/tokenize`) counts as not
 * pre-opened. A decision is kept per server and model for the life of the process once made; until then each
 * caller renders with its own signal, so an abandoned episode stops its own requests and no one else's.
 */

export interface ThinkOpeningDecision {
  thinkPreopened: boolean;
  /** False when the server could not render the probe and completions are read as they are. */
  rendered: boolean;
  /** Why nothing was rendered. */
  detail?: string;
}

const PROBE: ChatMessage[] = [{ role: 'user', content: 'hello' }];

const decisions = new Map<string, ThinkOpeningDecision>();

async function renderedText(
  endpoint: Endpoint,
  addGenerationPrompt: boolean,
  signal?: AbortSignal,
): Promise<string | ThinkOpeningDecision> {
  const answer = await tryRenderMessages(endpoint, PROBE, addGenerationPrompt, signal);
  const refusal = `HTTP ${answer.status}: ${answer.text.slice(0, 300)}`;
  if (!answer.ok) {
    if (isTransientRenderFailure(answer.status))
      throw new InfrastructureError(`policy server: cannot render a probe conversation: ${refusal}`);
    return { thinkPreopened: false, rendered: false, detail: `no template rendering at /tokenize: ${refusal}` };
  }
  let tokens: unknown;
  try {
    tokens = (JSON.parse(answer.text) as { tokens?: unknown }).tokens;
  } catch {
    tokens = undefined;
  }
  if (!Array.isArray(tokens))
    return { thinkPreopened: false, rendered: false, detail: `/tokenize answered without tokens: ${refusal}` };
  return detokenize(endpoint, tokens as number[], signal);
}

async function decide(endpoint: Endpoint, signal?: AbortSignal): Promise<ThinkOpeningDecision> {
  const withPrompt = await renderedText(endpoint, true, signal);
  if (typeof withPrompt !== 'string') return withPrompt;
  const withoutPrompt = await renderedText(endpoint, false, signal);
  if (typeof withoutPrompt !== 'string') return withoutPrompt;
  return { thinkPreopened: generationPromptOpensThink(withPrompt, withoutPrompt), rendered: true };
}

/** The decision for this policy server and model, rendered until one is made, then kept. */
export async function thinkOpeningDecision(endpoint: Endpoint, signal?: AbortSignal): Promise<ThinkOpeningDecision> {
  const key = decisionKey(endpoint);
  const known = decisions.get(key);
  if (known) return known;
  const decision = await decide(endpoint, signal);
  decisions.set(key, decision);
  return decision;
}
