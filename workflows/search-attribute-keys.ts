import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';

/** Search attributes registered by `tbt up` (config/environment.ts) so campaigns can be found in the UI. */
export const campaignKey = defineSearchAttributeKey('TbtCampaign', SearchAttributeType.KEYWORD);
export const stageKey = defineSearchAttributeKey('TbtStage', SearchAttributeType.KEYWORD);
export const stepKey = defineSearchAttributeKey('TbtStep', SearchAttributeType.INT);
/** True while a campaign waits paused before a training step (`TbtPaused = true` finds them); false once resumed. */
export const pausedKey = defineSearchAttributeKey('TbtPaused', SearchAttributeType.BOOL);

/** Every key above: what a server (the dev server, the compose stack, the unit-test server) must register. */
export const tbtSearchAttributeKeys = [campaignKey, stageKey, stepKey, pausedKey];

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
