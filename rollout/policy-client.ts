import OpenAI from 'openai';
import { ContextOverflowError, InfrastructureError, errorMessage, isContextOverflowText } from '../core/errors.ts';
import { NO_API_KEY, resolveApiKey } from './api-key.ts';
import { longRequestDispatcher } from '../infra/long-request-dispatcher.ts';
import { checkServed, type ServedWeightsWatch } from './served-weights.ts';

/**
 * Client of an OpenAI-compatible policy server (vLLM in production, the embedded CPU server locally).
 * Chat completions serve evaluation against any API; the token endpoints (`/v1/completions` with token ids,
 * `/tokenize`, `/detokenize`) serve token-exact training rollouts. Every failure is an InfrastructureError.
 */

export interface Endpoint {
  /** Base URL including `/v1`. */
  baseUrl: string;
  model: string;
  /** Environment variable holding the API key; read at call time, never stored. */
  apiKeyEnv?: string;
  timeoutMs?: number;
  /** The weights this episode's completions must be served with (rollout/served-weights.ts); checked on each. */
  servedWeights?: ServedWeightsWatch;
}

export interface ChatMessage {
  role: 'system' | 'user' | 'assistant' | 'tool';
  content: string;
  tool_call_id?: string;
  name?: string;
  tool_calls?: { id?: string; type?: string; function: { name: string; arguments: string } }[];
}

export interface ChatResult {
  content: string;
  reasoning?: string;
  nativeToolCalls?: { id?: string; type?: string; function: { name: string; arguments: string } }[];
  finishReason: string;
  usage: { input: number; output: number; cached: number };
  /** The weight version the server sampled it with, as checked against `Endpoint.servedWeights`. */
  servedVersion?: number;
}

export interface TokenCompletion {
  tokenIds: number[];
  logprobs: number[];
  text: string;
  finishReason: string;
  /** The weight version the server sampled it with, as checked against `Endpoint.servedWeights`. */
  servedVersion?: number;
}

export interface SamplingParams {
  temperature: number;
  topP: number;
  /** -1 or absent: no top-k cut. */
  topK?: number;
  maxTokens: number;
  seed?: number;
  /** Stop strings (token mode), kept in the output so a stopped tool call stays parseable. */
  stop?: string[];
  /** Per-call timeout overriding the endpoint's (the episode passes what is left of its wall clock). */
  timeoutMs?: number;
  /** `parallel_tool_calls` of a chat request with tools; absent: not sent. */
  parallelToolCalls?: boolean;
  /** Aborts the request (the episode was abandoned); the server sees the client go and can stop generating. */
  signal?: AbortSignal;
}

function apiKey(endpoint: Endpoint): string {
  return resolveApiKey(endpoint) ?? NO_API_KEY;
}

function serverRoot(endpoint: Endpoint): string {
  return endpoint.baseUrl.replace(/\/v1\/?$/, '');
}

/** A POST answered with any HTTP status; only a failure to reach the server throws (an InfrastructureError). */
async function postRaw(
  endpoint: Endpoint,
  url: string,
  body: unknown,
  what: string,
  timeoutMs?: number,
  signal?: AbortSignal,
): Promise<{ status: number; ok: boolean; text: string; headers: Headers }> {
  const key = resolveApiKey(endpoint);
  const authorization: Record<string, string> = key ? { authorization: `Bearer ${key}` } : {};
  const timeout = AbortSignal.timeout(timeoutMs ?? endpoint.timeoutMs ?? 300_000);
  try {
    const response = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...authorization },
      body: JSON.stringify(body),
      signal: signal ? AbortSignal.any([timeout, signal]) : timeout,
      dispatcher: longRequestDispatcher, // a long generation answers after minutes: only the signal bounds it
    } as RequestInit);
    return { status: response.status, ok: response.ok, text: await response.text(), headers: response.headers };
  } catch (err) {
    throw new InfrastructureError(`policy server ${what}: ${errorMessage(err)}`, { cause: err });
  }
}

async function postJson<T>(
  endpoint: Endpoint,
  url: string,
  body: unknown,
  what: string,
  timeoutMs?: number,
  signal?: AbortSignal,
): Promise<T> {
  return (await postAnswer<T>(endpoint, url, body, what, timeoutMs, signal)).body;
}

async function postAnswer<T>(
  endpoint: Endpoint,
  url: string,
  body: unknown,
  what: string,
  timeoutMs?: number,
  signal?: AbortSignal,
): Promise<{ body: T; headers: Headers }> {
  const { status, ok, text, headers } = await postRaw(endpoint, url, body, what, timeoutMs, signal);
  if (!ok) {
    const message = `policy server ${what}: HTTP ${status}: ${text.slice(0, 500)}`;
    if (status === 400 && isContextOverflowText(text)) throw new ContextOverflowError(message);
    throw new InfrastructureError(message);
  }
  return { body: JSON.parse(text) as T, headers };
}

export async function chatComplete(
  endpoint: Endpoint,
  messages: ChatMessage[],
  sampling: SamplingParams,
  tools?: unknown[],
): Promise<ChatResult> {
  const timeout = Math.min(sampling.timeoutMs ?? Infinity, endpoint.timeoutMs ?? 300_000);
  // One retry inside the call, and only while the episode has time for it.
  const client = new OpenAI({
    baseURL: endpoint.baseUrl,
    apiKey: apiKey(endpoint),
    timeout,
    maxRetries: sampling.timeoutMs === undefined ? 2 : 0,
    fetchOptions: { dispatcher: longRequestDispatcher } as OpenAI.RequestOptions['fetchOptions'],
  });
  try {
    const { data: completion, response } = await client.chat.completions
      .create(
        {
          model: endpoint.model,
          messages: messages as OpenAI.Chat.ChatCompletionMessageParam[],
          temperature: sampling.temperature,
          top_p: sampling.topP,
          // top_k is not an OpenAI field: vLLM (and the built-in server) read it; only sent when set.
          ...(sampling.topK !== undefined && sampling.topK > 0 ? ({ top_k: sampling.topK } as object) : {}),
          max_tokens: sampling.maxTokens,
          ...(sampling.seed === undefined ? {} : { seed: sampling.seed }),
          ...(tools && tools.length ? { tools: tools as OpenAI.Chat.ChatCompletionTool[] } : {}),
          ...(tools?.length && sampling.parallelToolCalls !== undefined
            ? { parallel_tool_calls: sampling.parallelToolCalls }
            : {}),
        },
        sampling.signal ? { signal: sampling.signal } : undefined,
      )
      .withResponse();
    const servedVersion = await checkServed(endpoint, response.headers, sampling.signal);
    const choice = completion.choices[0];
    if (!choice) throw new Error('no choices in the response');
    // vLLM renamed `reasoning_content` (still what DeepSeek-style APIs send) to `reasoning`: either is the reasoning.
    const message = choice.message as typeof choice.message & { reasoning_content?: string; reasoning?: string };
    return {
      content: message.content ?? '',
      reasoning: message.reasoning_content ?? message.reasoning ?? undefined,
      nativeToolCalls: (message.tool_calls ?? [])
        .filter((c) => c.type === 'function')
        .map((c) => ({
          id: c.id,
          type: c.type,
          function: {
            name: (c as { function: { name: string } }).function.name,
            arguments: (c as { function: { arguments: string } }).function.arguments,
          },
        })),
      finishReason: choice.finish_reason ?? 'stop',
      usage: {
        input: completion.usage?.prompt_tokens ?? 0,
        output: completion.usage?.completion_tokens ?? 0,
        cached: completion.usage?.prompt_tokens_details?.cached_tokens ?? 0,
      },
      ...(servedVersion === undefined ? {} : { servedVersion }),
    };
  } catch (err) {
    // Other weights served it (rollout/served-weights.ts): that cause goes to the episode as it is.
    if (err instanceof InfrastructureError) throw err;
    const message = `policy chat completion failed: ${errorMessage(err)}`;
    if (err instanceof OpenAI.APIError && err.status === 400 && isContextOverflowText(err.message))
      throw new ContextOverflowError(message, { cause: err });
    throw new InfrastructureError(message, { cause: err });
  }
}

/** Token-in/token-out: the prompt is the exact id sequence; the sampled ids and their logprobs come back. */
export async function completeTokens(
  endpoint: Endpoint,
  prompt: number[],
  sampling: SamplingParams,
): Promise<TokenCompletion> {
  const { body, headers } = await postAnswer<{
    choices: { text: string; token_ids?: number[]; finish_reason: string; logprobs?: { token_logprobs?: number[] } }[];
  }>(
    endpoint,
    `${endpoint.baseUrl}/completions`,
    {
      model: endpoint.model,
      prompt,
      max_tokens: sampling.maxTokens,
      temperature: sampling.temperature,
      top_p: sampling.topP,
      ...(sampling.topK !== undefined && sampling.topK > 0 ? { top_k: sampling.topK } : {}),
      ...(sampling.seed === undefined ? {} : { seed: sampling.seed }),
      ...(sampling.stop?.length ? { stop: sampling.stop, include_stop_str_in_output: true } : {}),
      logprobs: 0,
      return_token_ids: true,
      skip_special_tokens: false,
    },
    'token completion',
    sampling.timeoutMs === undefined ? undefined : Math.min(sampling.timeoutMs, endpoint.timeoutMs ?? 300_000),
    sampling.signal,
  );
  const choice = body.choices[0];
  if (!choice?.token_ids)
    throw new InfrastructureError(
      'policy server token completion: no token_ids in the response (is return_token_ids supported?)',
    );
  const logprobs = choice.logprobs?.token_logprobs ?? [];
  if (logprobs.length !== choice.token_ids.length)
    throw new InfrastructureError(
      `policy server token completion: ${choice.token_ids.length} token ids but ${logprobs.length} logprobs`,
    );
  const servedVersion = await checkServed(endpoint, headers, sampling.signal);
  return {
    tokenIds: choice.token_ids,
    logprobs,
    text: choice.text,
    finishReason: choice.finish_reason,
    ...(servedVersion === undefined ? {} : { servedVersion }),
  };
}

export async function tokenizeMessages(
  endpoint: Endpoint,
  messages: ChatMessage[],
  options: { addGenerationPrompt: boolean; tools?: unknown[]; signal?: AbortSignal },
): Promise<number[]> {
  const body = await postJson<{ tokens: number[] }>(
    endpoint,
    `${serverRoot(endpoint)}/tokenize`,
    {
      model: endpoint.model,
      messages,
      add_generation_prompt: options.addGenerationPrompt,
      ...(options.tools?.length ? { tools: options.tools } : {}),
    },
    'tokenize',
    undefined,
    options.signal,
  );
  return body.tokens;
}

/**
 * Renders `messages` with the server's chat template (`/tokenize`) and reports the HTTP status instead of
 * throwing on it: a template that raises answers 400, a server without the route 404. The generation prompt is
 * added unless `addGenerationPrompt` is false.
 */
export async function tryRenderMessages(
  endpoint: Endpoint,
  messages: ChatMessage[],
  addGenerationPrompt = true,
  signal?: AbortSignal,
): Promise<{ status: number; ok: boolean; text: string }> {
  return postRaw(
    endpoint,
    `${serverRoot(endpoint)}/tokenize`,
    { model: endpoint.model, messages, add_generation_prompt: addGenerationPrompt },
    'tokenize',
    Math.min(endpoint.timeoutMs ?? 60_000, 60_000),
    signal,
  );
}

export async function tokenizeText(endpoint: Endpoint, text: string, signal?: AbortSignal): Promise<number[]> {
  const body = await postJson<{ tokens: number[] }>(
    endpoint,
    `${serverRoot(endpoint)}/tokenize`,
    { model: endpoint.model, prompt: text, add_special_tokens: false },
    'tokenize',
    undefined,
    signal,
  );
  return body.tokens;
}

export async function detokenize(endpoint: Endpoint, tokens: number[], signal?: AbortSignal): Promise<string> {
  const body = await postJson<{ prompt: string }>(
    endpoint,
    `${serverRoot(endpoint)}/detokenize`,
    { model: endpoint.model, tokens },
    'detokenize',
    undefined,
    signal,
  );
  return body.prompt;
}
