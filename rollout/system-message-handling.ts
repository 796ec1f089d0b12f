import { SYSTEM_MESSAGE_PROBES, type SystemMessageHandling } from '../core/system-message-merge.ts';
import { InfrastructureError } from '../core/errors.ts';
import { tryRenderMessages, type Endpoint } from './policy-client.ts';

/**
 * Does the policy's chat template take a second system message? Decided by rendering, never by model name:
 * the server's own template renders a conversation with one system message, then one with two (`/tokenize`
 * with `messages`, which vLLM and the embedded server both serve, in chat and in token mode alike, and which
 * applies the very template a chat completion uses). One renders and two are refused (4xx): `merged`. Both
 * render: `separate`. A server that cannot render at `/tokenize` (a hosted API has no such route) gets the
 * messages as they are, `separate` with `rendered: false`: those APIs take several system messages.
 * The answer is kept per server and model for the life of the process; a failure is not kept.
 */

export interface SystemMessageDecision {
  systemMessages: SystemMessageHandling;
  /** False when the server could not render the probe and the messages go as they are. */
  rendered: boolean;
  /** The server's refusal of two system messages, or why nothing was rendered. */
  detail?: string;
}

const decisions = new Map<string, Promise<SystemMessageDecision>>();

/** Statuses that say "not now" rather than "not this conversation": the decision waits for a later try. */
const TRANSIENT = new Set([408, 425, 429]);

/** A rendering failure that says nothing about the template (a server error, or "not now"). */
export function isTransientRenderFailure(status: number): boolean {
  return status >= 500 || TRANSIENT.has(status);
}

/** One decision per policy server and model. */
export function decisionKey(endpoint: Endpoint): string {
  return `${endpoint.baseUrl.replace(/\/+$/, '')}\n${endpoint.model}`;
}

async function decide(endpoint: Endpoint): Promise<SystemMessageDecision> {
  const one = await tryRenderMessages(endpoint, SYSTEM_MESSAGE_PROBES.one);
  const refusal = (r: { status: number; text: string }) => `HTTP ${r.status}: ${r.text.slice(0, 300)}`;
  if (!one.ok) {
    if (isTransientRenderFailure(one.status))
      throw new InfrastructureError(`policy server: cannot render a probe conversation: ${refusal(one)}`);
    return {
      systemMessages: 'separate',
      rendered: false,
      detail: `no template rendering at /tokenize: ${refusal(one)}`,
    };
  }
  const two = await tryRenderMessages(endpoint, SYSTEM_MESSAGE_PROBES.two);
  if (two.ok) return { systemMessages: 'separate', rendered: true };
  if (isTransientRenderFailure(two.status))
    throw new InfrastructureError(`policy server: cannot render a probe conversation: ${refusal(two)}`);
  return { systemMessages: 'merged', rendered: true, detail: refusal(two) };
}

/** The decision for this policy server and model, rendered once per process. */
export function systemMessageDecision(endpoint: Endpoint): Promise<SystemMessageDecision> {
  const k = decisionKey(endpoint);
  let decision = decisions.get(k);
  if (!decision) {
    decision = decide(endpoint);
    decisions.set(k, decision);
    decision.catch(() => decisions.delete(k));
  }
  return decision;
}

/** The run manifest's entry for a policy (`system_messages: merged | separate`). */
export function systemMessagesManifestEntry(decision: SystemMessageDecision): Record<string, unknown> {
  return {
    system_messages: decision.systemMessages,
    ...(decision.rendered ? {} : { system_messages_rendered: false }),
  };
}
