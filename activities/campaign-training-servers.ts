import { Context } from '@temporalio/activity';
import { WorkflowNotFoundError } from '@temporalio/client';
import type { CampaignConfig } from '../config/campaign-config.ts';

/**
 * Which of `servers` a running campaign is training on now: its training steps sync new weights into its policy
 * servers, so an evaluation of the same servers at that time would sample from weights that change under it while
 * labelled with one step (workflows/scheduled-evaluation-workflow.ts refuses it). The campaign's stage comes from
 * its `status` query, its servers from the config it was started with (memo); a campaign whose memo has no config
 * counts as sharing every server. Outside an activity (tests, tools) nothing is known: none.
 */
export async function campaignTrainingOn(input: { campaignId: string; servers: string[] }): Promise<string[]> {
  let client;
  try {
    client = Context.current().client;
  } catch {
    return [];
  }
  const handle = client.workflow.getHandle(input.campaignId);
  let description;
  try {
    description = await handle.describe();
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) return [];
    throw err;
  }
  if (description.status.name !== 'RUNNING' || description.type !== 'campaignWorkflow') return [];
  const status = await handle.query<{ stage?: string }>('status');
  if (status.stage !== 'train') return [];
  const policy = ((await description.memo) as { config?: CampaignConfig } | undefined)?.config?.episode?.policy;
  if (!policy) return input.servers;
  const theirs = new Set([policy.base_url, ...(policy.sync_instances ?? [])]);
  return input.servers.filter((s) => theirs.has(s));
}
