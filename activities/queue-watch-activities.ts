import { Context } from '@temporalio/activity';

/** temporal.api.enums.v1.TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY */
const activityTaskQueue = 2;
/** temporal.api.enums.v1.DescribeTaskQueueMode.DESCRIBE_TASK_QUEUE_MODE_ENHANCED */
const enhancedMode = 1;

/**
 * The queue watch's one question to Temporal (workflows/queue-watch.ts): how many workers polled each activity task
 * queue lately (the server lists a poller for 5 minutes after its last poll). It runs in the bookkeeping worker, on
 * the workflows' own queue: that it runs at all shows the bookkeeping queue has a poller, and the rollout queue is
 * asked about without going through it.
 */
export function createQueueWatchActivities() {
  return {
    async taskQueuePollers(input: { queues: string[] }): Promise<number[]> {
      const { client } = Context.current();
      const { namespace } = client.options;
      const service = client.workflowService;
      return Promise.all(
        input.queues.map(async (name) => {
          // The plain answer lists the root partition's pollers (every version's); a busy worker that only ever
          // takes tasks from another partition shows only in the per-partition answer (a deprecated mode, so a
          // server without it is answered by the plain one alone).
          const [plain, partitions] = await Promise.all([
            service.describeTaskQueue({ namespace, taskQueue: { name }, taskQueueType: activityTaskQueue }),
            service
              .describeTaskQueue({
                namespace,
                taskQueue: { name },
                apiMode: enhancedMode,
                taskQueueTypes: [activityTaskQueue],
                reportPollers: true,
              })
              .catch(() => undefined),
          ]);
          const identities = new Set((plain.pollers ?? []).map((p) => p.identity));
          for (const version of Object.values(partitions?.versionsInfo ?? {}))
            for (const p of version.typesInfo?.[activityTaskQueue]?.pollers ?? []) identities.add(p.identity);
          return identities.size;
        }),
      );
    },
  };
}

export type QueueWatchActivities = ReturnType<typeof createQueueWatchActivities>;
