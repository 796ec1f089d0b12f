import fs from 'node:fs';
import path from 'node:path';
import { stopEmbeddedPolicyServer } from './campaign-policy-server.ts';
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
