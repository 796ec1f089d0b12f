import type { Client, WorkflowHandle } from '@temporalio/client';

/**
 * What `tbt eval run` prints while it waits: the evaluation's own progress line (the Temporal UI's current details
 * of its workflow, and of the evaluation child it names: keys done, in flight, re-runs, task errors, a pause and its
 * reason), each time it changes, at most every `everyMs`. A failed query (the workflow between tasks, a restarted
 * server) is skipped: this is progress, the result still comes from the workflow.
 */
export function followEvaluation(
  client: Client,
  handle: WorkflowHandle,
  print: (line: string) => void,
  everyMs = 30_000,
): () => void {
  let last = '';
  const details = async (h: WorkflowHandle) =>
    (await h.query<{ currentDetails?: string }>('__temporal_workflow_metadata')).currentDetails ?? '';
  const poll = async () => {
    const own = await details(handle).catch(() => '');
    // The parent names the evaluation child it runs (`running <id>`); its details carry the keys' progress.
    const child = /^running (\S+)/.exec(own)?.[1];
    const line = child ? await details(client.workflow.getHandle(child)).catch(() => own) : own;
    if (line && line !== last) print(`[${new Date().toISOString().slice(11, 19)}] ${line}`);
    last = line || last;
  };
  const timer = setInterval(() => void poll(), everyMs);
  return () => clearInterval(timer);
}
