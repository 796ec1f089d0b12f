export { smokeWorkflow } from './smoke-workflow.ts';
export { episodeBatchWorkflow } from './episode-batch-workflow.ts';
export { campaignWorkflow } from './campaign-workflow.ts';
export { trainingStepWorkflow } from './training-step-workflow.ts';
export { probeWorkflow } from './probe-workflow.ts';
export { evaluationWorkflow } from './evaluation-workflow.ts';
export { scheduledEvaluationWorkflow } from './scheduled-evaluation-workflow.ts';
export { episodeShardWorkflow } from './episode-shard-workflow.ts';
