import fs from 'node:fs';
import path from 'node:path';
import { readEnvironment } from '../config/environment.ts';
import { urlMatchesOrigin } from '../core/endpoint-origin.ts';
import { BadInputError, errorMessage } from '../core/errors.ts';
import { keyOrigins } from '../rollout/api-key.ts';

/** The variable whose ties (rollout/api-key.ts) name the policy servers trusted with the external token. */
const POLICY_KEY = 'TBT_POLICY_API_KEY';

/**
 * Bearer tokens for a policy server's weight-sync routes, read from their files at call time so
 * that they never enter a Temporal payload, an activity result or a log. The campaign's embedded server gets
 * the token the GPU worker wrote at its start, and no other server does. An external server gets the token in
 * the file TBT_POLICY_SYNC_TOKEN_FILE names, when that is set (the operator starts those servers with the same
 * file), and only at an origin the operator trusts with the policy key: TBT_POLICY_API_KEY's ties (loopback
 * and http://policy-server:8000 built in, more in TBT_API_KEY_HOSTS), never wherever a campaign's
 * `sync_instances` point. vLLM takes it through tbt_gpu/vllm_route_guard.py (its own API key guards /v1 only).
 */

/** The embedded policy server's token file in a campaign folder (written 0600 at each server start). */
export function policyTokenFile(campaignDir: string): string {
  return path.join(campaignDir, 'policy-server.token');
}

/** The embedded server's address, recorded next to its pid file when the GPU worker starts it. */
export function policyServerUrlFile(campaignDir: string): string {
  return path.join(campaignDir, 'policy-server.json');
}

/** The token to send with a weight sync to `baseUrl`, or undefined when none is configured for it. */
export function policySyncToken(
  campaignDir: string,
  baseUrl: string,
  env: NodeJS.ProcessEnv = process.env,
): string | undefined {
  const urlFile = policyServerUrlFile(campaignDir);
  const known = fs.existsSync(urlFile)
    ? (JSON.parse(fs.readFileSync(urlFile, 'utf8')) as { baseUrl?: string }).baseUrl
    : undefined;
  if (known === baseUrl) {
    const tokenFile = policyTokenFile(campaignDir);
    return fs.existsSync(tokenFile) ? fs.readFileSync(tokenFile, 'utf8').trim() : undefined;
  }
  const settings = readEnvironment(env);
  const external = settings.TBT_POLICY_SYNC_TOKEN_FILE;
  if (!external) return undefined;
  const trusted = keyOrigins(settings.TBT_API_KEY_HOSTS).get(POLICY_KEY) ?? [];
  return urlMatchesOrigin(baseUrl, trusted) ? readTokenFile(external) : undefined;
}

/** A 0600 token file's content; a missing, group- or world-readable or empty file is bad input (named, not shown). */
function readTokenFile(file: string): string {
  const variable = 'TBT_POLICY_SYNC_TOKEN_FILE';
  let stat: fs.Stats;
  try {
    stat = fs.statSync(file);
  } catch (err) {
    throw new BadInputError(
      `${variable}: cannot read ${file} (${(err as NodeJS.ErrnoException).code ?? errorMessage(err)})`,
    );
  }
  if (!stat.isFile()) throw new BadInputError(`${variable}: ${file} is not a file`);
  if (stat.mode & 0o077) throw new BadInputError(`${variable}: ${file} is readable by others; chmod 600 it`);
  const token = fs.readFileSync(file, 'utf8').trim();
  if (!token) throw new BadInputError(`${variable}: ${file} is empty`);
  return token;
}
