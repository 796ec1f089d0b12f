import { BadInputError } from '../core/errors.ts';
import { apiKeyVariablePattern, type EpisodeConfig } from '../config/episode-config.ts';
import { readEnvironment } from '../config/environment.ts';

/**
 * The API key an endpoint sends: named by `api_key_env`, read at call time, and only ever sent to a host
 * tied to that variable, so a config cannot turn a key (or any other secret) into a bearer token for a
 * server of its choosing. No `api_key_env` means no key: the embedded and loopback servers need none.
 */

/** Built-in ties; TBT_API_KEY_HOSTS adds to them (`NAME_API_KEY=host,host;OTHER_API_KEY=host`). */
export const builtInKeyHosts: Readonly<Record<string, readonly string[]>> = {
  OPENAI_API_KEY: ['api.openai.com'],
  ANTHROPIC_API_KEY: ['api.anthropic.com'],
  OPENROUTER_API_KEY: ['openrouter.ai'],
  // The compose deployment's vLLM service, and a policy server on this machine.
  TBT_POLICY_API_KEY: ['policy-server', 'localhost', '127.0.0.1', '[::1]'],
};

export function keyHosts(extra: string): Map<string, Set<string>> {
  const ties = new Map<string, Set<string>>();
  for (const [name, hosts] of Object.entries(builtInKeyHosts)) ties.set(name, new Set(hosts));
  for (const entry of extra.split(';').map((e) => e.trim())) {
    if (!entry) continue;
    const [name, hosts = ''] = entry.split('=');
    const set = ties.get(name!) ?? new Set<string>();
    for (const h of hosts.split(',')) if (h) set.add(h.toLowerCase());
    ties.set(name!, set);
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
  const host = new URL(endpoint.baseUrl).hostname.toLowerCase();
  const tied = keyHosts(readEnvironment(env).TBT_API_KEY_HOSTS).get(name);
  if (!tied?.has(host))
    throw new BadInputError(
      `api_key_env ${name}: not tied to host ${host} (tied: ${[...(tied ?? [])].join(', ') || 'none'}); ` +
        `add ${name}=${host} to TBT_API_KEY_HOSTS if that server should receive it`,
    );
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
