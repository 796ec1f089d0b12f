import { InfrastructureError } from '../core/errors.ts';
import { mergeSystemMessages, systemMessageCount, type SystemMessageHandling } from '../core/system-message-merge.ts';
import {
  chatComplete,
  completeTokens,
  tokenizeMessages,
  tokenizeText,
  type ChatMessage,
  type ChatResult,
  type Endpoint,
  type SamplingParams,
} from './policy-client.ts';
import { systemMessageDecision } from './system-message-handling.ts';
import { thinkOpeningDecision } from './think-opening.ts';

/**
 * How an episode talks to the policy. `chat`: messages in, text out (evaluation against any OpenAI-compatible
 * API). `tokens`: token ids in, token ids out (training): the prompt and every observation are rendered by
 * the server's own tokenizer and chat template; each observation delta is rendered behind a fixed anchor
 * conversation whose tokens are checked, so the learner trains on exactly the ids that were sampled.
 * In both modes, an opening with several system messages is merged into one when the server's template takes
 * only one (rollout/system-message-handling.ts), and a completion whose template opened its `<think>` says so
 * (rollout/think-opening.ts). A driver's `signal` aborts its requests in flight: the episode was abandoned, and
 * the server should stop generating for it.
 */

export interface Generation {
  raw: string;
  native?: ChatResult['nativeToolCalls'];
  reasoning?: string;
  /**
   * `raw` starts inside a reasoning block the chat template's generation prompt opened (no `<think>` of its own):
   * until its `</think>` it is reasoning. Never set when the server split the reasoning out itself.
   */
  thinkPreopened?: boolean;
  finishReason: string;
  usage: { input: number; output: number; cached: number };
  /** Tokens in the context after this generation (prompt + output), for the episode budget. */
  contextTokens: number;
}

export interface Trajectory {
  tokenIds: number[];
  lossMask: number[];
  logprobs: number[];
  /**
   * The weight version that sampled each token, as long as tokenIds; NO_VERSION where the mask is 0. With
   * `training.partial_rollouts` one episode, even one turn, may carry two versions. Absent when the episode ran on
   * weights without a version (evaluation) and in trajectories recorded before versions were kept.
   */
  versions?: number[];
}

/** The version of a token no policy sampled (prompt, observation, template tokens: mask 0). */
export const NO_VERSION = -1;

/**
 * The version a completion was sampled on: the label the server reported with it (`<campaign>@<n>` or `n`), else
 * `fallback` (the episode config's `policy.weight_version`, plus one per sync that interrupted the episode).
 */
export function tokenVersion(served: unknown, fallback: number | undefined): number | undefined {
  const text = typeof served === 'number' ? String(served) : typeof served === 'string' ? served : '';
  const match = /(?:^|@)(\d+)$/.exec(text);
  return match ? Number(match[1]) : fallback;
}

/** The weights label a completion reports, where the server reports one. */
const servedOf = (completion: object): unknown => (completion as { servedVersion?: unknown }).servedVersion;

/** Continuations of one turn after syncs interrupted it (finish_reason `abort`) before the turn is given up. */
export const MAX_TURN_CONTINUATIONS = 8;

/** How the opening was sent: `systemMessages` is set when it had several system messages. */
export interface PromptStart {
  systemMessages?: SystemMessageHandling;
}

export interface PolicyDriver {
  /**
   * `tools` (OpenAI function specs) go to the server, whose chat template renders them; omit when the prompt lists
   * them.
   */
  start(messages: ChatMessage[], tools?: unknown[]): Promise<PromptStart>;
  generate(sampling: SamplingParams): Promise<Generation>;
  /** Appends what the agent observes after its turn: tool results and/or the user's reply. */
  observe(messages: ChatMessage[]): Promise<void>;
  /** Tokens of the episode after its opening prompt so far, which the episode token budget counts. */
  tokensAfterPrompt(): number;
  trajectory(): Trajectory | undefined;
}

/**
 * The opening as this policy takes it: several system messages merged into one when its template refuses a
 * second (the caller's conversation is left as it is: ThinkingBox tests read the reference's two messages).
 */
async function openingFor(endpoint: Endpoint, initial: ChatMessage[]): Promise<PromptStart & { sent: ChatMessage[] }> {
  if (systemMessageCount(initial) <= 1) return { sent: initial };
  const { systemMessages } = await systemMessageDecision(endpoint);
  return { sent: systemMessages === 'merged' ? mergeSystemMessages(initial) : initial, systemMessages };
}

/**
 * A chat server reports each call's prompt and output tokens. The budget counts every generated token (the
 * conversation sent back may leave earlier reasoning out, which token mode keeps) plus the growth of the prompt
 * between calls (tool results and user replies as rendered); the first call's prompt is the opening, not counted.
 */
export function createChatDriver(endpoint: Endpoint, signal?: AbortSignal): PolicyDriver {
  const messages: ChatMessage[] = [];
  let context = 0;
  let calls = 0;
  let generated = 0;
  let observedTokens = 0;
  let tools: unknown[] | undefined;
  return {
    async start(initial, offered) {
      tools = offered;
      const { sent, ...start } = await openingFor(endpoint, initial);
      messages.push(...sent);
      return start;
    },
    async generate(sampling) {
      const result = await chatComplete(endpoint, messages, { ...sampling, signal }, tools);
      // Asked after the first generation, not at the start: a server without /tokenize costs one refused request.
      const thinkPreopened = !result.reasoning && (await thinkOpeningDecision(endpoint, signal)).thinkPreopened;
      messages.push({
        role: 'assistant',
        content: result.content,
        ...(result.nativeToolCalls?.length ? { tool_calls: result.nativeToolCalls } : {}),
      });
      if (calls > 0) observedTokens += Math.max(0, result.usage.input - context);
      calls += 1;
      generated += result.usage.output;
      context = result.usage.input + result.usage.output;
      return {
        raw: result.content,
        native: result.nativeToolCalls,
        reasoning: result.reasoning,
        ...(thinkPreopened ? { thinkPreopened } : {}),
        finishReason: result.finishReason,
        usage: result.usage,
        contextTokens: context,
      };
    },
    async observe(observed) {
      messages.push(...observed);
    },
    tokensAfterPrompt: () => generated + observedTokens,
    trajectory: () => undefined,
  };
}

/**
 * Fixed anchor conversation: system + user only. Observations are rendered after it and its own tokens must
 * never change. An assistant turn in the anchor would break on Qwen3-family templates, which drop an earlier
 * assistant turn's `<think>` block once a user turn follows it.
 */
const ANCHOR_CONTENT = 'anchor';
const ANCHOR: ChatMessage[] = [
  { role: 'system', content: ANCHOR_CONTENT },
  { role: 'user', content: ANCHOR_CONTENT },
];

/**
 * The tokens the chat template puts after an assistant message's content (e.g. `<|im_end|>`, `\n`): the anchor
 * with an assistant turn as its last message, after that turn's content tokens. Rendered last, the turn keeps
 * whatever the template adds before the content (Qwen3's empty think block), but nothing after it changes.
 */
async function assistantTerminator(endpoint: Endpoint, tools?: unknown[], signal?: AbortSignal): Promise<number[]> {
  const closed = await tokenizeMessages(endpoint, [...ANCHOR, { role: 'assistant', content: ANCHOR_CONTENT }], {
    addGenerationPrompt: false,
    tools,
    signal,
  });
  const content = await tokenizeText(endpoint, ANCHOR_CONTENT, signal);
  const at = lastIndexOfSequence(closed, content);
  if (at < 0)
    throw new InfrastructureError(
      'cannot locate the assistant turn in the anchor conversation: the chat template renders an assistant turn in ' +
        'an unexpected way',
    );
  const terminator = closed.slice(at + content.length);
  if (terminator.length === 0 || terminator.length > 4)
    throw new InfrastructureError(
      `unexpected assistant terminator of ${terminator.length} tokens in the chat template`,
    );
  return terminator;
}

function lastIndexOfSequence(haystack: number[], needle: number[]): number {
  for (let at = haystack.length - needle.length; at >= 0; at--) {
    if (needle.every((t, i) => haystack[at + i] === t)) return at;
  }
  return -1;
}

/**
 * `weightVersion`: the version the episode starts on (its config's `policy.weight_version`), the version of its
 * sampled tokens unless the server reports one per completion. A completion the server interrupted for a weight sync
 * (finish_reason `abort`, `training.partial_rollouts`) keeps its partial tokens and log-probabilities, and the turn
 * goes on from them on the new weights with what is left of its max_tokens.
 */
export function createTokenDriver(endpoint: Endpoint, signal?: AbortSignal, weightVersion?: number): PolicyDriver {
  let tools: unknown[] | undefined;
  const ids: number[] = [];
  const mask: number[] = [];
  const logprobs: number[] = [];
  const versions: number[] = [];
  // Every sampled token's version known (else the trajectory carries none); syncs that interrupted the episode.
  let versionsKnown = true;
  let interruptions = 0;
  let anchorTokens: number[] | undefined;
  let terminator: number[] = [];
  let opening = 0;
  let thinkPreopened = false;
  // A sampled turn that ended (stop token or string, or cut at its token cap), waiting for its observation.
  let turnOpen = false;
  const push = (tokens: number[], m: 0 | 1, lp?: number[], version?: number) => {
    ids.push(...tokens);
    mask.push(...tokens.map(() => m));
    logprobs.push(...(lp ?? tokens.map(() => 0)));
    if (m === 1 && version === undefined && tokens.length > 0) versionsKnown = false;
    versions.push(...tokens.map(() => (m === 1 ? (version ?? NO_VERSION) : NO_VERSION)));
  };
  return {
    async start(initial, offered) {
      tools = offered;
      const { sent, ...start } = await openingFor(endpoint, initial);
      thinkPreopened = (await thinkOpeningDecision(endpoint, signal)).thinkPreopened;
      push(await tokenizeMessages(endpoint, sent, { addGenerationPrompt: true, tools, signal }), 0);
      opening = ids.length;
      anchorTokens = await tokenizeMessages(endpoint, ANCHOR, { addGenerationPrompt: false, tools, signal });
      terminator = await assistantTerminator(endpoint, tools, signal);
      return start;
    },
    async generate(sampling) {
      const prompt = ids.length;
      let out = await completeTokens(endpoint, ids, { ...sampling, signal });
      const fallback = () => (weightVersion === undefined ? undefined : weightVersion + interruptions);
      push(out.tokenIds, 1, out.logprobs, tokenVersion(servedOf(out), fallback()));
      let text = out.text;
      // Interrupted by a weight sync: the turn goes on from its partial tokens on the new weights.
      for (let n = 0; out.finishReason === 'abort' && !signal?.aborted && n < MAX_TURN_CONTINUATIONS; n++) {
        interruptions += 1;
        const left = sampling.maxTokens - (ids.length - prompt);
        if (left <= 0) {
          out = { ...out, tokenIds: [], logprobs: [], text: '', finishReason: 'length' };
          break;
        }
        out = await completeTokens(endpoint, ids, { ...sampling, maxTokens: left, signal });
        push(out.tokenIds, 1, out.logprobs, tokenVersion(servedOf(out), fallback()));
        text += out.text;
      }
      turnOpen = out.finishReason === 'stop' || out.finishReason === 'length';
      return {
        raw: text,
        ...(thinkPreopened ? { thinkPreopened } : {}),
        finishReason: out.finishReason,
        usage: { input: prompt, output: ids.length - prompt, cached: 0 },
        contextTokens: ids.length,
      };
    },
    async observe(observed) {
      if (!turnOpen)
        throw new InfrastructureError(
          'observe() needs a sampled turn that ended with a stop token or at its token cap before it',
        );
      turnOpen = false;
      const anchor = anchorTokens!;
      const rendered = await tokenizeMessages(endpoint, [...ANCHOR, ...observed], {
        addGenerationPrompt: true,
        tools,
        signal,
      });
      const mismatch = anchor.findIndex((t, i) => rendered[i] !== t);
      if (mismatch >= 0 || rendered.length <= anchor.length) {
        throw new InfrastructureError(
          `token anchor mismatch at position ${mismatch}: the chat template renders the anchor conversation ` +
            `differently when messages follow it; token-exact rollouts are impossible with this template`,
        );
      }
      // The template closes the assistant turn after its content. A turn that ended on the end-of-turn token
      // sampled it already; one cut by a stop string or the token cap did not. What was not sampled goes in with
      // mask 0.
      const closing = ids[ids.length - 1] === terminator[0] ? terminator.slice(1) : terminator;
      push([...closing, ...rendered.slice(anchor.length)], 0);
    },
    tokensAfterPrompt: () => ids.length - opening,
    trajectory: () => ({
      tokenIds: [...ids],
      lossMask: [...mask],
      logprobs: [...logprobs],
      ...(versionsKnown ? { versions: [...versions] } : {}),
    }),
  };
}
