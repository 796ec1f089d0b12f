export { smokeWorkflow } from './smoke-workflow.ts';
export { episodeBatchWorkflow } from './episode-batch-workflow.ts';
