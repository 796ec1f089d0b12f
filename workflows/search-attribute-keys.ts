import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';

/** Search attributes registered by `tbt up` (config/environment.ts) so campaigns can be found in the UI. */
export const campaignKey = defineSearchAttributeKey('TbtCampaign', SearchAttributeType.KEYWORD);
export const stageKey = defineSearchAttributeKey('TbtStage', SearchAttributeType.KEYWORD);
export const stepKey = defineSearchAttributeKey('TbtStep', SearchAttributeType.INT);

/**
 * The attributes every workflow of a campaign's tree carries (children do not inherit them), so one query
 * (`TbtCampaign = "<id>"`) lists the campaign, its probe, shards, steps, evaluations and scheduled runs.
 */
export function campaignAttributes(campaignId: string, stage: string, step: number) {
  return [
    { key: campaignKey, value: campaignId },
    { key: stageKey, value: stage },
    { key: stepKey, value: step },
  ];
}
