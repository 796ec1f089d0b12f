export { smokeWorkflow } from './smoke-workflow.ts';
