import fs from 'node:fs';
import path from 'node:path';
import { stopEmbeddedPolicyServer } from './campaign-policy-server.ts';
import { recordedAttachedLearner } from './attached-learner.ts';
import { learnerFiles, runningLearnerNodes, stopLearner } from './learner-process.ts';

/**
 * The detached processes a GPU host runs for its campaigns: each campaign's learner and its embedded policy
 * server. Each has one stop (`stopLearner`, `stopEmbeddedPolicyServer`); these stop both.
 */

/** Stops a campaign's learner and its embedded policy server (when the campaign ends). */
export async function stopCampaignGpuProcesses(stateDir: string, campaignId: string): Promise<void> {
  const files = learnerFiles(stateDir, campaignId);
  await stopLearner(files);
  await stopEmbeddedPolicyServer(files);
}

/**
 * Stops a campaign's learner between its training steps (probe and evaluations need only the policy server):
 * the next step's `ensureLearner` starts it again from its last checkpoint. A learner attached from outside is
 * never stopped here (nothing here could start it again). Whether a learner was running.
 */
export async function releaseCampaignLearner(stateDir: string, campaignId: string): Promise<{ released: boolean }> {
  const files = learnerFiles(stateDir, campaignId);
  if (recordedAttachedLearner(files.dir) || runningLearnerNodes(files) === 0) return { released: false };
  await stopLearner(files);
  return { released: true };
}

/**
 * Stops every learner and embedded policy server started under this state folder (`tbt workers down`); returns
 * how many processes were running. A folder whose learner is not running is left as it is.
 */
export async function stopDetachedGpuProcesses(stateDir: string): Promise<number> {
  const root = path.join(stateDir, 'learners');
  if (!fs.existsSync(root)) return 0;
  let stopped = 0;
  for (const dir of fs.readdirSync(root)) {
    const files = learnerFiles(stateDir, dir); // the folder names are already sanitized campaign ids
    const learners = runningLearnerNodes(files);
    if (learners > 0) await stopLearner(files); // its own clean-up too (endpoint file), as after a campaign
    const server = await stopEmbeddedPolicyServer(files);
    stopped += learners + (server ? 1 : 0);
  }
  return stopped;
}
