import { readEnvironment } from '../config/environment.ts';
import { BadInputError } from '../core/errors.ts';
import {
  formatOrigin,
  originOfUrl,
  parseOrigin,
  urlMatchesOrigin,
  type EndpointOrigin,
} from '../core/endpoint-origin.ts';

/**
 * The environment the tracker process runs with. MLflow's client sends the credentials it finds in the environment
 * to whatever tracking URI it is given, and a campaign config may name one (`tracking.mlflow.tracking_uri`): the
 * credentials stay only where the operator tied them, through the environment itself: the origin of
 * MLFLOW_TRACKING_URI, and those of TBT_MLFLOW_CREDENTIAL_ORIGINS. Elsewhere they are left out, with a warning.
 * W&B needs nothing here: its server comes from the environment only (WANDB_BASE_URL), never from a config.
 */

/** Every variable MLflow's client authenticates with (a token, basic auth, a client certificate, auth plugins). */
export const mlflowCredentialVariables = [
  'MLFLOW_TRACKING_TOKEN',
  'MLFLOW_TRACKING_USERNAME',
  'MLFLOW_TRACKING_PASSWORD',
  'MLFLOW_TRACKING_CLIENT_CERT_PATH',
  'MLFLOW_TRACKING_AUTH',
  'MLFLOW_TRACKING_AWS_SIGV4',
] as const;

/** The origins the operator tied MLflow's credentials to. */
export function mlflowCredentialOrigins(env: NodeJS.ProcessEnv): EndpointOrigin[] {
  const origins: EndpointOrigin[] = [];
  const own = env.MLFLOW_TRACKING_URI ? originOfUrl(env.MLFLOW_TRACKING_URI) : undefined;
  if (own) origins.push(own);
  for (const spec of readEnvironment(env)
    .TBT_MLFLOW_CREDENTIAL_ORIGINS.split(',')
    .map((s) => s.trim())) {
    if (!spec) continue;
    const origin = parseOrigin(spec);
    if (!origin)
      throw new BadInputError(
        `TBT_MLFLOW_CREDENTIAL_ORIGINS: ${spec} is not an origin ` +
          '(https://host[:port], http://host[:port] or host[:port])',
      );
    origins.push(origin);
  }
  return origins;
}

/**
 * The tracker's environment for a campaign whose config names `configUri` (undefined: the client uses
 * MLFLOW_TRACKING_URI or the local store, both the operator's), and why credentials were left out, if they were.
 */
export function trackerEnvironment(
  configUri: string | undefined,
  env: NodeJS.ProcessEnv,
): { env: NodeJS.ProcessEnv; warning?: string } {
  if (configUri === undefined) return { env };
  const tied = mlflowCredentialOrigins(env);
  if (urlMatchesOrigin(configUri, tied)) return { env };
  const kept = { ...env };
  const withheld = mlflowCredentialVariables.filter((name) => kept[name] !== undefined);
  for (const name of withheld) delete kept[name];
  const at = originOfUrl(configUri);
  // A URI that is not http(s) (a local store) would never have carried them: nothing to warn about.
  if (withheld.length === 0 || !at) return { env: kept };
  const tiedText = tied.map(formatOrigin).join(', ') || 'none';
  return {
    env: kept,
    warning:
      `experiment tracking: ${withheld.join(', ')} not sent to ${formatOrigin(at)}: the campaign config names that ` +
      `tracking_uri, and the environment ties no MLflow credentials to it (tied: ${tiedText}); ` +
      'set MLFLOW_TRACKING_URI to that server, or add its origin to TBT_MLFLOW_CREDENTIAL_ORIGINS',
  };
}
