import { BadInputError } from '../core/errors.ts';
import { apiKeyVariablePattern, type EpisodeConfig } from '../config/episode-config.ts';
import { readEnvironment } from '../config/environment.ts';
import {
  formatOrigin,
  loopbackOrigins,
  originOfUrl,
  parseOrigin,
  urlMatchesOrigin,
  type EndpointOrigin,
} from '../core/endpoint-origin.ts';

/**
 * The API key an endpoint sends: named by `api_key_env`, read at call time, and only ever sent to an origin
 * (scheme, host and port) tied to that variable, so a config cannot turn a key (or any other secret) into a
 * bearer token for a server of its choosing, nor send an https key in clear text to another port of its host.
 * No `api_key_env` means no key: the embedded and loopback servers need none.
 */

/**
 * Built-in ties; TBT_API_KEY_HOSTS adds to them (`NAME_API_KEY=origin,origin;OTHER_API_KEY=origin`). An origin
 * is `https://host[:port]`, `http://host[:port]` or a bare `host[:port]`, which means https (core/endpoint-origin.ts).
 */
export const builtInKeyOrigins: Readonly<Record<string, readonly EndpointOrigin[]>> = {
  OPENAI_API_KEY: [parseOrigin('https://api.openai.com')!],
  ANTHROPIC_API_KEY: [parseOrigin('https://api.anthropic.com')!],
  OPENROUTER_API_KEY: [parseOrigin('https://openrouter.ai')!],
  // The compose deployment's vLLM service, and a policy server on this machine (any port: loopback only).
  TBT_POLICY_API_KEY: [parseOrigin('http://policy-server:8000')!, ...loopbackOrigins],
};

/** The origins each key variable is tied to: the built-in ties plus those of a TBT_API_KEY_HOSTS value. */
export function keyOrigins(extra: string): Map<string, EndpointOrigin[]> {
  const ties = new Map<string, EndpointOrigin[]>();
  for (const [name, origins] of Object.entries(builtInKeyOrigins)) ties.set(name, [...origins]);
  for (const entry of extra.split(';').map((e) => e.trim())) {
    if (!entry) continue;
    const [name = '', specs = ''] = entry.split('=');
    const origins = ties.get(name) ?? [];
    for (const spec of specs.split(',').filter(Boolean)) {
      const origin = parseOrigin(spec);
      if (!origin)
        throw new BadInputError(
          `TBT_API_KEY_HOSTS: ${name}=${spec} is not an origin ` +
            '(https://host[:port], http://host[:port] or host[:port])',
        );
      origins.push(origin);
    }
    ties.set(name, origins);
  }
  return ties;
}

/** The key for a request to `baseUrl`, or undefined when the endpoint names none; bad input otherwise. */
export function resolveApiKey(
  endpoint: { baseUrl: string; apiKeyEnv?: string },
  env: NodeJS.ProcessEnv = process.env,
): string | undefined {
  const name = endpoint.apiKeyEnv;
  if (!name) return undefined;
  if (!apiKeyVariablePattern.test(name))
    throw new BadInputError(`api_key_env ${name}: only variables named *_API_KEY are sent as keys`);
  const tied = keyOrigins(readEnvironment(env).TBT_API_KEY_HOSTS).get(name) ?? [];
  if (!urlMatchesOrigin(endpoint.baseUrl, tied)) {
    const at = originOfUrl(endpoint.baseUrl);
    const origin = at ? formatOrigin(at) : 'a URL that is not http(s)';
    throw new BadInputError(
      `api_key_env ${name}: not tied to ${origin} (tied: ${tied.map(formatOrigin).join(', ') || 'none'}); ` +
        `add ${name}=${origin} to TBT_API_KEY_HOSTS if that server should receive it`,
    );
  }
  const value = env[name];
  if (!value) throw new BadInputError(`api_key_env ${name}: the variable is not set (or empty) in this process`);
  return value;
}

/** Placeholder the OpenAI client requires when no key is sent (it is no secret). */
export const NO_API_KEY = 'no-key';

/** Every endpoint of an episode config checked before the episode starts (a bad key fails it at once). */
export function checkEpisodeKeys(
  config: Pick<EpisodeConfig, 'policy' | 'user' | 'judge'>,
  env: NodeJS.ProcessEnv = process.env,
): void {
  for (const e of [config.policy, config.user.mode === 'llm' ? config.user.endpoint : undefined, config.judge])
    if (e) resolveApiKey({ baseUrl: e.base_url, apiKeyEnv: e.api_key_env }, env);
}
