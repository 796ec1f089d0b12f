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
  /** Token mode: the sampled ids and their log-probs, which a resumed episode replays (rollout/turn-checkpoints.ts). */
  sampled?: { tokenIds: number[]; logprobs: number[]; versions?: number[] };
  /** The weight version the server sampled this turn with, checked per completion (rollout/served-weights.ts). */
  servedVersion?: number;
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
  /**
   * Takes a generation recorded by an earlier attempt of the episode as if it had been sampled now (a resumed
   * episode replays its completed turns): nothing is sent to the server, and the trajectory gets the recorded tokens.
   */
  replay(recorded: Generation): Generation;
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
  /** The generation joins the conversation and the budget's counts. */
  const taken = (g: Generation): Generation => {
    messages.push({
      role: 'assistant',
      content: g.raw,
      ...(g.native?.length ? { tool_calls: g.native } : {}),
    });
    if (calls > 0) observedTokens += Math.max(0, g.usage.input - context);
    calls += 1;
    generated += g.usage.output;
    context = g.usage.input + g.usage.output;
    return { ...g, contextTokens: context };
  };
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
      return taken({
        raw: result.content,
        native: result.nativeToolCalls,
        reasoning: result.reasoning,
        ...(thinkPreopened ? { thinkPreopened } : {}),
        finishReason: result.finishReason,
        usage: result.usage,
        contextTokens: 0,
        ...(result.servedVersion === undefined ? {} : { servedVersion: result.servedVersion }),
      });
    },
    replay: (recorded) => taken(recorded),
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
  /** `tokenVersions`: the version that sampled each token (mask 1); mask-0 tokens carry NO_VERSION. */
  const push = (tokens: number[], m: 0 | 1, lp?: number[], tokenVersions?: number[]) => {
    ids.push(...tokens);
    mask.push(...tokens.map(() => m));
    logprobs.push(...(lp ?? tokens.map(() => 0)));
    versions.push(...tokens.map((_, i) => (m === 1 ? (tokenVersions?.[i] ?? NO_VERSION) : NO_VERSION)));
  };
  /**
   * The sampled tokens join the trajectory (mask 1); the turn waits for its observation. A turn recorded before
   * tokens kept their versions takes the version its server reported, if any.
   */
  const taken = (g: Generation): Generation => {
    const { tokenIds, logprobs: lp, versions: known } = g.sampled!;
    const version = tokenVersion(g.servedVersion, undefined);
    const tokenVersions = known ?? tokenIds.map(() => version ?? NO_VERSION);
    if (tokenVersions.includes(NO_VERSION)) versionsKnown = false;
    push(tokenIds, 1, lp, tokenVersions);
    turnOpen = g.finishReason === 'stop' || g.finishReason === 'length';
    return { ...g, contextTokens: ids.length };
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
      const sampled = { tokenIds: [] as number[], logprobs: [] as number[], versions: [] as number[] };
      const fallback = () => (weightVersion === undefined ? undefined : weightVersion + interruptions);
      let text = '';
      let served: number | undefined;
      let finishReason: string;
      // Interrupted by a weight sync (`abort`): the turn goes on from its partial tokens on the new weights.
      for (let n = 0; ; n++) {
        const left = sampling.maxTokens - sampled.tokenIds.length;
        const context = sampled.tokenIds.length === 0 ? ids : [...ids, ...sampled.tokenIds];
        const out = await completeTokens(endpoint, context, { ...sampling, maxTokens: left, signal });
        const version = tokenVersion(servedOf(out), fallback());
        sampled.tokenIds.push(...out.tokenIds);
        sampled.logprobs.push(...out.logprobs);
        sampled.versions.push(...out.tokenIds.map(() => version ?? NO_VERSION));
        text += out.text;
        served ??= out.servedVersion;
        finishReason = out.finishReason;
        if (finishReason !== 'abort' || signal?.aborted || n >= MAX_TURN_CONTINUATIONS) break;
        interruptions += 1;
        if (sampling.maxTokens - sampled.tokenIds.length <= 0) {
          finishReason = 'length';
          break;
        }
      }
      return taken({
        raw: text,
        ...(thinkPreopened ? { thinkPreopened } : {}),
        finishReason,
        usage: { input: prompt, output: sampled.tokenIds.length, cached: 0 },
        contextTokens: 0,
        sampled,
        // The oldest version that sampled the turn: the one the staleness bound counts.
        ...(served === undefined ? {} : { servedVersion: served }),
      });
    },
    replay(recorded) {
      if (!recorded.sampled) throw new InfrastructureError('a recorded turn without its tokens cannot be replayed');
      return taken(recorded);
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
