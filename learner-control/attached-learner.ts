import fs from 'node:fs';
import path from 'node:path';
import type { CampaignConfig } from '../config/campaign-config.ts';
import { BadInputError, InfrastructureError } from '../core/errors.ts';
import { learnerRequest, type LearnerEndpoint } from './learner-client.ts';

/**
 * A learner started outside (`learner.attach_url`): node 0's GPU worker checks it and records where it is in
 * the campaign's learner folder (`attach.json`), so that an export finds it again. Its token is read from
 * `attach_token_file` (the learner's control.token, 0600) on each use; only the file's path is recorded.
 */

/** The attached learner, healthy and running the world size the campaign states. */
export async function attachedLearner(learner: CampaignConfig['learner']): Promise<LearnerEndpoint> {
  const url = learner.attach_url!.replace(/\/$/, '');
  const endpoint = { url, token: fs.readFileSync(learner.attach_token_file!, 'utf8').trim() };
  const health = await learnerRequest<{ ready?: boolean; world_size?: number }>(
    endpoint,
    'GET',
    '/health',
    undefined,
    10_000,
  );
  if (health.ready !== true) throw new InfrastructureError(`learner at ${url} is not ready yet`);
  const want = learner.nodes * learner.gpus_per_node;
  if (health.world_size !== want)
    throw new BadInputError(
      `learner.attach_url: the learner at ${url} runs ${health.world_size} rank(s), the campaign states ` +
        `nodes x gpus_per_node = ${want}`,
    );
  return endpoint;
}

function attachFile(learnerDir: string): string {
  return path.join(learnerDir, 'attach.json');
}

export function recordAttachedLearner(learnerDir: string, url: string, tokenFile: string): void {
  fs.mkdirSync(learnerDir, { recursive: true });
  fs.writeFileSync(attachFile(learnerDir), JSON.stringify({ url, tokenFile }));
}

/** The attached learner recorded in this folder, or undefined when the campaign's learner is started here. */
export function recordedAttachedLearner(learnerDir: string): LearnerEndpoint | undefined {
  const file = attachFile(learnerDir);
  if (!fs.existsSync(file)) return undefined;
  const { url, tokenFile } = JSON.parse(fs.readFileSync(file, 'utf8')) as { url: string; tokenFile: string };
  return { url, token: fs.readFileSync(tokenFile, 'utf8').trim() };
}
