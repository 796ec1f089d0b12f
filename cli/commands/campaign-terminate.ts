import type { Client } from '@temporalio/client';
import type { Environment } from '../../config/environment.ts';
import { stopEmbeddedPolicyServer } from '../../learner-control/campaign-policy-server.ts';
import { learnerFiles, runningLearnerNodes, stopLearner } from '../../learner-control/learner-process.ts';
import { startAgainText } from '../workflow-failure-text.ts';

/**
 * `tbt campaign terminate ID [--reason TEXT]`: ends the campaign's current run at once (Temporal terminate, with
 * the reason in its history), its running children with it, and releases this host's learner and policy server
 * of the campaign, which a terminated workflow cannot do itself (its clean-up code never runs).
 */

/** What a pending child does when its parent closes (temporal.api.enums.v1.ParentClosePolicy; 0 = the default). */
const onParentClose: Record<number, string> = {
  0: 'terminated with it',
  1: 'terminated with it',
  2: 'keeps running (parent close policy ABANDON): terminate it in the Temporal UI if it should not',
  3: 'asked to cancel (parent close policy REQUEST_CANCEL)',
};

export async function terminateCampaign(client: Client, env: Environment, id: string, reason: string): Promise<number> {
  const handle = client.workflow.getHandle(id);
  const description = await handle.describe();
  if (description.status.name !== 'RUNNING') {
    console.error(`campaign ${id} is not running (${description.status.name}): nothing to terminate`);
    return 1;
  }
  await handle.terminate(reason);
  console.log(`terminated campaign ${id} (run ${description.runId}): ${reason}`);
  // The campaign starts its children with the default parent close policy: each ends with it, and their own
  // children (episode shards) with them.
  for (const c of description.raw.pendingChildren ?? [])
    console.log(`  ${c.workflowId} (${c.workflowTypeName}): ${onParentClose[c.parentClosePolicy ?? 0] ?? 'unknown'}`);
  console.log(
    '  activities in flight on workers are cancelled at their next heartbeat (Temporal no longer knows them)',
  );
  const files = learnerFiles(env.TBT_STATE_DIR, id);
  const learners = runningLearnerNodes(files);
  if (learners > 0) await stopLearner(files);
  const server = await stopEmbeddedPolicyServer(files);
  console.log(
    learners > 0 || server
      ? `  stopped this host's ${[learners > 0 ? 'learner' : '', server ? 'embedded policy server' : '']
          .filter(Boolean)
          .join(' and ')} of the campaign (a failed campaign releases them itself; a terminated one cannot)`
      : "  no learner or policy server of the campaign runs under this host's TBT_STATE_DIR (ones a GPU worker " +
          "started on another host keep running: `tbt workers down` there stops them, every campaign's)",
  );
  console.log(`resume: ${startAgainText({ kind: 'campaign', workflowId: id })}`);
  return 0;
}
