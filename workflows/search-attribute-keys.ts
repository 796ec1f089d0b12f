import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';

/** Search attributes registered by `tbt up` (config/environment.ts) so campaigns can be found in the UI. */
export const campaignKey = defineSearchAttributeKey('TbtCampaign', SearchAttributeType.KEYWORD);
export const stageKey = defineSearchAttributeKey('TbtStage', SearchAttributeType.KEYWORD);
export const stepKey = defineSearchAttributeKey('TbtStep', SearchAttributeType.INT);
