import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { writeCampaignManifest } from '../../campaign-records/campaign-run-folder.ts';
import { trackStep } from '../../campaign-records/experiment-tracking.ts';
import type { StepRecord } from '../../campaign-records/step-record.ts';
import { trackerEnvironment } from '../../campaign-records/tracker-credentials.ts';

/**
 * The tracker's credentials go only to origins the operator tied to them through the environment, never to a
 * `tracking.mlflow.tracking_uri` a campaign config names: a loopback server standing for MLflow records the
 * `Authorization` headers the real MLflow client sends it.
 */

const campaignId = 'tracker-credentials-1';
const token = 'tracker-secret-token';

function stepRecord(): StepRecord {
  return {
    campaignId,
    step: 1,
    groups: [{ uid: 'a-1', rewards: [0, 1], episodeIds: ['e1', 'e2'] }],
    informativeGroups: 1,
    zeroVarianceGroups: 0,
    replacements: 0,
    lostGroups: 0,
    infraErrors: 0,
    leakedInfraEpisodes: 0,
    fallback: null,
    meanReward: 0.5,
    update: { loss: 0.25, grad_norm: 1, clip_fraction: 0, tokens: 10, time_s: 1 },
    repeatedUpdate: false,
    checkpoint: '/ckpt',
    exportPath: '/export',
    weightVersion: 1,
    sampledWeightVersion: 0,
    staleEpisodes: 0,
    syncSeconds: [0.1],
  };
}

/** One tracker call against `uri` (the campaign's tracking_uri) with `env` added: the headers the server saw. */
async function headersSeen(
  env: Record<string, string>,
  uriOf: (server: string) => string,
): Promise<{ authorizations: (string | undefined)[]; warnings: string[] }> {
  const authorizations: (string | undefined)[] = [];
  const server = http.createServer((req, res) => {
    authorizations.push(req.headers.authorization);
    res.writeHead(500, { 'content-type': 'application/json' }).end('{"error_code":"INTERNAL_ERROR"}');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const at = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'tbt-tracker-credentials-'));
  writeCampaignManifest(stateDir, campaignId, {
    campaignId,
    config: { tracking: { mlflow: { tracking_uri: uriOf(at) } } },
  });
  const saved = { ...process.env };
  Object.assign(process.env, { MLFLOW_HTTP_REQUEST_MAX_RETRIES: '0', MLFLOW_HTTP_REQUEST_TIMEOUT: '5' });
  for (const [name, value] of Object.entries(env)) process.env[name] = value.replaceAll('SERVER', at);
  const warnings: string[] = [];
  try {
    await trackStep({ stateDir, warn: (message: string) => warnings.push(message) }, stepRecord()).catch(
      () => undefined,
    );
  } finally {
    process.env = saved;
    await new Promise((resolve) => server.close(resolve));
    fs.rmSync(stateDir, { recursive: true, force: true });
  }
  assert.ok(authorizations.length > 0, 'the MLflow client reached the server');
  return { authorizations, warnings };
}

test(
  'third review, finding 6: MLflow credentials never go to a tracking_uri the campaign config names',
  { timeout: 300_000 },
  async () => {
    const basic = { MLFLOW_TRACKING_USERNAME: 'operator', MLFLOW_TRACKING_PASSWORD: 'operator-password' };
    const refused = await headersSeen({ MLFLOW_TRACKING_TOKEN: token }, (at) => at);
    assert.deepEqual(
      refused.authorizations.filter((a) => a !== undefined),
      [],
      `a config-chosen endpoint received credentials: ${refused.authorizations.join(', ')}`,
    );
    assert.equal(refused.warnings.length, 1, refused.warnings.join('\n'));
    assert.match(refused.warnings[0]!, /MLFLOW_TRACKING_TOKEN not sent to http:\/\/127\.0\.0\.1:\d+/);
    assert.doesNotMatch(refused.warnings[0]!, new RegExp(token));
    const noBasic = await headersSeen(basic, (at) => at);
    assert.deepEqual(
      noBasic.authorizations.filter((a) => a !== undefined),
      [],
      'no basic credentials either',
    );

    // The operator ties the origin: MLFLOW_TRACKING_URI in the environment, or TBT_MLFLOW_CREDENTIAL_ORIGINS.
    const tiedByUri = await headersSeen({ MLFLOW_TRACKING_TOKEN: token, MLFLOW_TRACKING_URI: 'SERVER' }, (at) => at);
    assert.ok(
      tiedByUri.authorizations.every((a) => a === `Bearer ${token}`),
      tiedByUri.authorizations.join(', '),
    );
    assert.deepEqual(tiedByUri.warnings, []);
    const tiedByList = await headersSeen(
      { ...basic, TBT_MLFLOW_CREDENTIAL_ORIGINS: 'http://example.org,SERVER' },
      (at) => at,
    );
    assert.ok(
      tiedByList.authorizations.every((a) => a?.startsWith('Basic ')),
      tiedByList.authorizations.join(', '),
    );
  },
);

test('tracker credentials: the environment the tracker runs with', () => {
  const env = { MLFLOW_TRACKING_TOKEN: token, MLFLOW_TRACKING_URI: 'https://mlflow.example.org', WANDB_API_KEY: 'w' };
  const kept = (uri: string | undefined) => trackerEnvironment(uri, env);
  // No URI in the config: the client uses MLFLOW_TRACKING_URI (the operator's) or the local store.
  assert.equal(kept(undefined).env.MLFLOW_TRACKING_TOKEN, token);
  assert.equal(kept('https://mlflow.example.org:443/').env.MLFLOW_TRACKING_TOKEN, token, 'the same origin');
  for (const uri of ['http://mlflow.example.org', 'https://mlflow.example.org:8443', 'https://evil.example']) {
    const { env: out, warning } = kept(uri);
    assert.equal(out.MLFLOW_TRACKING_TOKEN, undefined, uri);
    assert.equal(out.WANDB_API_KEY, 'w', 'W&B reads its base URL from the environment only');
    assert.match(warning ?? '', /MLFLOW_TRACKING_TOKEN not sent/, uri);
  }
  // A local store would never carry them: left out without a warning.
  assert.deepEqual(kept('sqlite:///x.db'), {
    env: { MLFLOW_TRACKING_URI: env.MLFLOW_TRACKING_URI, WANDB_API_KEY: 'w' },
  });
  assert.equal(
    trackerEnvironment('http://x:1', { MLFLOW_TRACKING_URI: 'http://x:1' }).warning,
    undefined,
    'nothing to withhold',
  );
  assert.throws(
    () => trackerEnvironment('http://x:1', { TBT_MLFLOW_CREDENTIAL_ORIGINS: 'ftp://x' }),
    /TBT_MLFLOW_CREDENTIAL_ORIGINS/,
  );
});
