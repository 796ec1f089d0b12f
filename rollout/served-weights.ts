import { InfrastructureError, errorMessage } from '../core/errors.ts';
import { SERVED_WEIGHTS_MISMATCH } from '../core/served-weights-cause.ts';

/**
 * Which weights actually served an episode's completions. The policy servers answer each completion with the label
 * that held for its whole run (`x-tbt-served-weights`: `<campaign>@<version>` as the last sync wrote it, `none`
 * after a load nobody labelled or a restart, `mixed` when it changed mid-request) and their boot id; a server without
 * the header is asked `GET /weight_info` after the completion instead. A campaign episode expects its campaign's
 * version: anything else fails the episode as an infrastructure error whose cause starts with
 * SERVED_WEIGHTS_MISMATCH, and the episode records a version only when every completion had the one expected.
 */

export const SERVED_WEIGHTS_HEADER = 'x-tbt-served-weights';
export const BOOT_ID_HEADER = 'x-tbt-boot-id';
export { SERVED_WEIGHTS_MISMATCH };

/** What served one completion, as the server said. */
export interface ServedLabel {
  /** The label; null when the server holds none (a restart, a load that was not labelled). */
  label: string | null;
  bootId?: string;
}

/**
 * The weights an episode must be served with: `label` exactly, or (no label) any owner's `version`. `newer`
 * (partial rollouts): a later version of the same owner may serve it too.
 */
export interface WeightExpectation {
  version: number;
  label?: string;
  newer?: boolean;
}

/** `<owner>@<version>` (learner-control/policy-weight-sync.ts weightLabel), or undefined for any other text. */
export function parseWeightLabel(label: string | null | undefined): { owner: string; version: number } | undefined {
  const match = /^(.+)@(\d+)$/.exec(label ?? '');
  // The sync's `loading:<label>` marker names weights still on their way, not served ones.
  if (!match || match[1]!.startsWith('loading:')) return undefined;
  return { owner: match[1]!, version: Number(match[2]) };
}

/**
 * What an episode expects: none without a configured version. A campaign's own episodes (training, probe) expect
 * the campaign's label; an evaluation's server may carry the evaluation's own, so only the version must match.
 */
export function weightExpectation(request: {
  campaign?: string;
  purpose: string;
  config: { policy: { weight_version?: number; newer_weights?: boolean } };
}): WeightExpectation | undefined {
  const version = request.config.policy.weight_version;
  if (version === undefined) return undefined;
  const own = request.campaign !== undefined && (request.purpose === 'train' || request.purpose === 'probe');
  const newer = own && request.config.policy.newer_weights === true ? { newer: true } : {};
  return own ? { version, label: `${request.campaign}@${version}`, ...newer } : { version };
}

/** The version `served` stands for if it is what `expected` asks for; undefined if it is not. */
export function servedVersionIfExpected(expected: WeightExpectation, served: ServedLabel): number | undefined {
  if (expected.label !== undefined && served.label === expected.label) return expected.version;
  const parsed = parseWeightLabel(served.label);
  if (!parsed) return undefined;
  if (expected.label === undefined) return parsed.version === expected.version ? parsed.version : undefined;
  const owner = parseWeightLabel(expected.label)?.owner;
  return expected.newer && parsed.owner === owner && parsed.version > expected.version ? parsed.version : undefined;
}

/** Whether `served` is what `expected` asks for. */
export function servedAsExpected(expected: WeightExpectation, served: ServedLabel): boolean {
  return servedVersionIfExpected(expected, served) !== undefined;
}

/** The episode's cause when a completion came from other weights: names the server and both versions. */
export function servedWeightsError(
  server: string,
  expected: WeightExpectation,
  served: ServedLabel,
): InfrastructureError {
  const want = expected.label ?? `version ${expected.version}`;
  const got = served.label === null ? 'no labelled weights (restarted, or loaded without a sync)' : served.label;
  const boot = served.bootId ? ` (boot ${served.bootId})` : '';
  return new InfrastructureError(
    `${SERVED_WEIGHTS_MISMATCH}: policy server ${server}${boot} sampled with ${got}, not ${want}; ` +
      'it restarted or was reloaded since the last sync, and is synced again before the episode is replayed',
  );
}

/**
 * One episode's record of what served it: `observe` each completion (it throws the mismatch), `version()` after.
 */
export class ServedWeightsWatch {
  private completions = 0;
  private mismatched = false;
  private oldest?: number;

  constructor(readonly expected: WeightExpectation) {}

  /** Checks one completion's served weights; returns the version it was served with. */
  observe(server: string, served: ServedLabel): number {
    this.completions += 1;
    const version = servedVersionIfExpected(this.expected, served);
    if (version === undefined) {
      this.mismatched = true;
      throw servedWeightsError(server, this.expected, served);
    }
    this.oldest = Math.min(this.oldest ?? version, version);
    return version;
  }

  /** Completions checked so far. */
  checked(): number {
    return this.completions;
  }

  /**
   * The (oldest) version the completions were served with; undefined when none ran or one was served by other
   * weights.
   */
  version(): number | undefined {
    return this.completions > 0 && !this.mismatched ? this.oldest : undefined;
  }
}

/** The served label of a completion's answer headers; undefined when the server sends none. */
export function servedLabelOf(headers: Headers): ServedLabel | undefined {
  const label = headers.get(SERVED_WEIGHTS_HEADER);
  if (label === null) return undefined;
  const bootId = headers.get(BOOT_ID_HEADER) ?? undefined;
  return { label: label === 'none' ? null : label, ...(bootId ? { bootId } : {}) };
}

/** A server without the header: its label as `GET /weight_info` reports it (read after the completion). */
export async function weightInfoLabel(root: string, signal?: AbortSignal): Promise<ServedLabel> {
  try {
    const timeout = AbortSignal.timeout(10_000);
    const response = await fetch(`${root}/weight_info`, {
      signal: signal ? AbortSignal.any([timeout, signal]) : timeout,
    });
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    const body = (await response.json()) as { weight_version?: string | number | null; boot_id?: string };
    const version = body.weight_version;
    const label = version === null || version === undefined ? null : String(version);
    return { label, ...(body.boot_id ? { bootId: body.boot_id } : {}) };
  } catch (err) {
    throw new InfrastructureError(`weight version of ${root}: ${errorMessage(err)}`, { cause: err });
  }
}

/**
 * Checks one completion against the endpoint's watch, if it has one: the answer's headers, else the server's
 * `/weight_info`. Returns the served version (undefined without a watch).
 */
export async function checkServed(
  endpoint: { baseUrl: string; servedWeights?: ServedWeightsWatch },
  headers: Headers,
  signal?: AbortSignal,
): Promise<number | undefined> {
  const watch = endpoint.servedWeights;
  if (!watch) return undefined;
  const root = endpoint.baseUrl.replace(/\/v1\/?$/, '');
  const served = servedLabelOf(headers) ?? (await weightInfoLabel(root, signal));
  return watch.observe(root, served);
}
