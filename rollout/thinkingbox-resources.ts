import type { EpisodeConfig } from '../config/episode-config.ts';
import { thinkingboxSettingsSchema, type ThinkingboxSettings } from '../config/episode-config.ts';
import { defaultJudgeLimits } from '../datasets/thinkingbox/judge-limits.ts';
import { StdioServerPool } from '../datasets/thinkingbox/stdio-server-pool.ts';
import type { ThinkingBoxResources } from '../datasets/thinkingbox/thinkingbox-environment.ts';

/** Settings with the judge maxima optional (their defaults apply). */
type ResourceSettings = Omit<ThinkingboxSettings, 'judge_calls_per_test' | 'judge_max_completion_tokens'> &
  Partial<Pick<ThinkingboxSettings, 'judge_calls_per_test' | 'judge_max_completion_tokens'>>;

/** What episodes of imported ThinkingBox tasks run on: a pool of warm tool-server processes and their settings. */
export function thinkingboxResources(
  settings: ResourceSettings = thinkingboxSettingsSchema.parse(undefined),
  servers?: StdioServerPool,
): ThinkingBoxResources {
  const judgeDefaults = defaultJudgeLimits();
  return {
    servers:
      servers ??
      new StdioServerPool({
        warm: settings.warm_processes,
        startTimeoutMs: settings.server_start_timeout_ms,
        serverStart: settings.server_start,
      }),
    testTimeoutMs: settings.test_timeout_ms,
    nativeGrading: settings.native_grading,
    judgeLimits: {
      callsPerTest: settings.judge_calls_per_test ?? judgeDefaults.callsPerTest,
      maxCompletionTokens: settings.judge_max_completion_tokens ?? judgeDefaults.maxCompletionTokens,
    },
  };
}

export interface LazyThinkingboxResources {
  (config: EpisodeConfig): ThinkingBoxResources;
  /** Stops the warm tool-server processes (they would keep the process alive). */
  close(): Promise<void>;
}

/** Tool-server resources for imported tasks, created by the first such episode and shared by the worker's others. */
export function thinkingboxResourcesFactory(): LazyThinkingboxResources {
  let servers: StdioServerPool | undefined;
  // The process pool is shared (sized by the first imported episode); the other settings follow each episode's config.
  const get = (config: EpisodeConfig) => {
    const resources = thinkingboxResources(config.thinkingbox, servers);
    servers = resources.servers;
    return resources;
  };
  return Object.assign(get, { close: async () => servers?.close() });
}
