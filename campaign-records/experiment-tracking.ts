import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { trackingConfigSchema, type TrackingConfig } from '../config/tracking-config.ts';
import { redactSecretsInText } from '../core/secret-text.ts';
import { trackingPackageDir, trackingPythonBinary } from '../infra/python-env.ts';
import { restoreCampaignFileByName } from './campaign-files.ts';
import { campaignRunDir } from './campaign-run-folder.ts';
import { trackerEnvironment } from './tracker-credentials.ts';
import { trackingEntryOfEvaluation, trackingEntryOfStep, type TrackingEntry } from './tracking-metrics.ts';
import type { StepRecord } from './step-record.ts';

/**
 * Experiment tracking: a campaign's steps and evaluations logged to MLflow and/or W&B by their official Python
 * clients (`python -m tbt_tracking` in the tracking venv, tracking/). The campaign's `tracking` section is read
 * from its manifest, so the workflows pass nothing new. Every call is idempotent: each tracker skips the metrics
 * it already holds at that step, so activity retries, crashes and resumes never log a step twice.
 */

/** Attempts of a bookkeeping activity that let a tracker failure fail it (and be retried); later ones warn. */
export const trackingAttempts = 3;

export interface TrackingOutcome {
  mlflow?: { run_id: string; logged: number; skipped: number };
  wandb?: { run_id: string; logged: number; skipped: number; mode?: string };
  errors: string[];
}

/** The local stores under the state folder: MLflow's SQLite database and W&B's run folders. */
export function localTrackingStores(stateDir: string): { mlflowUri: string; wandbDir: string } {
  const dir = path.join(stateDir, 'tracking');
  fs.mkdirSync(path.join(dir, 'wandb'), { recursive: true });
  return { mlflowUri: `sqlite:///${path.join(dir, 'mlflow.db')}`, wandbDir: dir };
}

/** The campaign's tracking section and params (its manifest, flattened), or undefined when tracking is off. */
export function campaignTracking(
  stateDir: string,
  campaignId: string,
): { tracking: TrackingConfig; params: Record<string, string> } | undefined {
  const file = path.join(campaignRunDir(stateDir, campaignId), 'manifest.json');
  if (!fs.existsSync(file)) return undefined;
  const manifest = JSON.parse(fs.readFileSync(file, 'utf8')) as { config?: { tracking?: unknown } };
  if (manifest.config?.tracking === undefined) return undefined;
  const parsed = trackingConfigSchema.safeParse(manifest.config.tracking);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw new Error(`campaign config field tracking.${issue.path.join('.')}: ${issue.message}`);
  }
  if (!parsed.data.mlflow && !parsed.data.wandb) return undefined;
  return { tracking: parsed.data, params: flattenParams(manifest) };
}

/** `{a: {b: 1}}` -> `{'a.b': '1'}`; arrays as JSON. MLflow caps a param value at 6000 characters. */
export function flattenParams(value: unknown, prefix = '', out: Record<string, string> = {}): Record<string, string> {
  if (value !== null && typeof value === 'object' && !Array.isArray(value)) {
    for (const [k, v] of Object.entries(value)) flattenParams(v, prefix ? `${prefix}.${k}` : k, out);
  } else if (prefix && value !== undefined) {
    // Params are stored in clear (and uploaded when W&B is online): a URI with a password must not be among them.
    const text = redactSecretsInText(typeof value === 'string' ? value : JSON.stringify(value));
    out[prefix.replace(/[^\w./ -]/g, '_')] = text.slice(0, 6000);
  }
  return out;
}

/**
 * What tracking reads: the state folder, and the control database the manifest is restored from when given;
 * `warn` says why credentials were withheld (campaign-records/tracker-credentials.ts), console.warn by default.
 */
type TrackingDeps = { stateDir: string; controlUrl?: string; signal?: AbortSignal; warn?: (message: string) => void };

/**
 * Logs one entry to the campaign's trackers; undefined when it has none. Throws when a tracker failed. With a
 * control URL the manifest comes from the control database: this bookkeeping worker may not be the one that wrote it.
 */
export async function trackCampaignEntry(
  deps: TrackingDeps,
  campaignId: string,
  entry: TrackingEntry,
): Promise<TrackingOutcome | undefined> {
  if (deps.controlUrl)
    await restoreCampaignFileByName({ ...deps, controlUrl: deps.controlUrl }, campaignId, 'manifest.json');
  const found = campaignTracking(deps.stateDir, campaignId);
  if (!found) return undefined;
  const { mlflow, wandb } = found.tracking;
  const stores = localTrackingStores(deps.stateDir);
  const request = {
    campaign_id: campaignId,
    params: found.params,
    entry,
    mlflow: mlflow && { ...mlflow, default_uri: stores.mlflowUri },
    wandb: wandb && { ...wandb, dir: stores.wandbDir },
  };
  const { env, warning } = trackerEnvironment(mlflow?.tracking_uri, process.env);
  if (warning) (deps.warn ?? console.warn)(warning);
  return runTracker(request, env, deps.signal);
}

const mlflowHttpDefaults = { MLFLOW_HTTP_REQUEST_MAX_RETRIES: '2', MLFLOW_HTTP_REQUEST_TIMEOUT: '30' };

function runTracker(
  request: object,
  env: NodeJS.ProcessEnv,
  signal: AbortSignal | undefined,
): Promise<TrackingOutcome> {
  return new Promise((resolve, reject) => {
    const child = execFile(
      trackingPythonBinary(),
      ['-m', 'tbt_tracking'],
      // WANDB_API_KEY and MLFLOW_TRACKING_URI reach the clients through the environment, never the request; MLflow's
      // credentials only where the operator tied them (campaign-records/tracker-credentials.ts).
      // MLflow's HTTP client retries for about 4 minutes by default; the activity's retries are ours (set = wins).
      {
        cwd: trackingPackageDir,
        signal,
        timeout: 5 * 60_000,
        maxBuffer: 16 << 20,
        env: { ...mlflowHttpDefaults, ...env },
      },
      (error, stdout, stderr) => {
        const last = stdout.trim().split('\n').pop() ?? '';
        let outcome: TrackingOutcome | undefined;
        try {
          outcome = JSON.parse(last) as TrackingOutcome;
        } catch {
          outcome = undefined;
        }
        if (!error && outcome) return resolve(outcome);
        const why = outcome?.errors.join('; ') || stderr.trim().split('\n').slice(-3).join(' | ') || String(error);
        reject(new Error(`experiment tracking failed: ${redactSecretsInText(why).slice(0, 2000)}`));
      },
    );
    child.stdin?.end(JSON.stringify(request));
  });
}

/** A training step's metrics, logged at its step number. */
export function trackStep(deps: TrackingDeps, record: StepRecord) {
  return trackCampaignEntry(deps, record.campaignId, trackingEntryOfStep(record));
}

/** An evaluation's metrics (its `tbt eval aggregate` file), logged at the number of steps trained before it. */
export function trackEvaluation(
  deps: TrackingDeps,
  input: { campaignId: string; aggregate: string; stepsTrained: number },
) {
  const aggregate = JSON.parse(fs.readFileSync(input.aggregate, 'utf8')) as Record<string, unknown>;
  return trackCampaignEntry(deps, input.campaignId, trackingEntryOfEvaluation(aggregate, input.stepsTrained));
}

/**
 * A tracker failure never fails the campaign: the activity's first attempts rethrow it (the retry policy
 * retries them, and every tracker skips what it holds), the last ones report it as a warning.
 */
export async function trackOrWarn(
  work: () => Promise<unknown>,
  attempt: number,
  warn: (message: string, attributes: Record<string, unknown>) => void,
): Promise<void> {
  try {
    await work();
  } catch (error) {
    if (attempt < trackingAttempts) throw error;
    warn('experiment tracking failed; the campaign goes on without it', { attempt, error: String(error) });
  }
}
