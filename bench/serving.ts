import path from 'node:path';
import os from 'node:os';
import { databaseUrl, readEnvironment, repoRoot } from '../config/environment.ts';
import { episodeConfigSchema } from '../config/episode-config.ts';
import { episodeDependencies, episodeRunOptions } from '../rollout/episode-setup.ts';
import { findNativeTask } from '../rollout/task-lookup.ts';
import { sandboxEnvironment } from '../rollout/episode-environment.ts';
import { playEpisode, type EpisodeRecord } from '../rollout/episode-runner.ts';
import { SandboxPool } from '../sandbox/sandbox-pool.ts';
import { TerminalStateGrader } from '../sandbox/terminal-state-grader.ts';
import { ensureControlDatabase } from '../infra/control-database.ts';
import { startPolicyServer, type PolicyEngine } from '../infra/embedded-policy-server.ts';

/**
 * bench/serving: the same rollout load against vLLM's CPU build and the built-in policy server, one after the
 * other in one run (never both at once: each gets the machine's cores). Per engine: start-up to a healthy server,
 * then real token-mode episodes of the tiny suite (config/local.yaml's episode settings), `concurrency` in
 * flight; sampled tokens/s and episodes/min over the load's wall time, with vLLM/builtin ratios.
 * Usage: npm run bench:serving [-- EPISODES [CONCURRENCY]] (default 16 episodes, 4 in flight). Needs `tbt up`.
 */

const episodes = Number(process.argv[2] ?? 16);
const concurrency = Number(process.argv[3] ?? 4);
const env = readEnvironment();
await ensureControlDatabase(env);
const controlUrl = databaseUrl(env);
const tiny = path.join(repoRoot, 'tasks', 'tiny');
const uids = ['tiny/todo/complete-2', 'tiny/thermostat/power-on-2', 'tiny/inventory/add-grape', 'tiny/parking/park-2'];
const pool = new SandboxPool({
  controlUrl,
  warm: concurrency,
  agentPassword: env.TBT_AGENT_DB_PASSWORD,
  readerPassword: env.TBT_READER_DB_PASSWORD,
});
const grader = new TerminalStateGrader(pool, controlUrl);

interface EngineResult {
  engine: PolicyEngine;
  startupS: number;
  wallS: number;
  episodes: number;
  infraErrors: number;
  /** The first infrastructure error's cause, if any (an infrastructure error also ends the episode early). */
  firstInfraCause?: string;
  sampledTokens: number;
  promptTokens: number;
  tokensPerS: number;
  episodesPerMin: number;
}

async function load(engine: PolicyEngine): Promise<EngineResult> {
  const started = performance.now();
  const server = await startPolicyServer({
    engine,
    logFile: path.join(os.tmpdir(), `tbt-bench-serving-${engine}.log`),
  });
  const startupS = (performance.now() - started) / 1000;
  try {
    const config = episodeConfigSchema.parse({
      policy: { base_url: server.baseUrl, model: server.model, mode: 'tokens', timeout_ms: 300_000 },
      sampling: { temperature: 0.6, top_p: 1.0, stop: ['</tool_call>'] },
      limits: { max_agent_turns: 3, max_tokens_per_turn: 64, episode_token_budget: 4096, wall_clock_ms: 600_000 },
      prompt: { tools_in_prompt: true, example: true },
    });
    const records: EpisodeRecord[] = [];
    let next = 0;
    const t0 = performance.now();
    const worker = async () => {
      for (let i = next++; i < episodes; i = next++) {
        const uid = uids[i % uids.length]!;
        const { task, scenario } = findNativeTask(tiny, uid);
        const deps = episodeDependencies(config, sandboxEnvironment(pool, grader, scenario, task), task);
        records.push(await playEpisode(deps, task, `bench:serving:${engine}:${i}`, episodeRunOptions(config)));
      }
    };
    await Promise.all(Array.from({ length: concurrency }, worker));
    const wallS = (performance.now() - t0) / 1000;
    const sampledTokens = records.reduce((s, r) => s + r.usage.policy.output, 0);
    return {
      engine,
      startupS: Math.round(startupS * 10) / 10,
      wallS: Math.round(wallS * 10) / 10,
      episodes: records.length,
      infraErrors: records.filter((r) => r.outcome === 'infrastructure_error').length,
      firstInfraCause: records.find((r) => r.outcome === 'infrastructure_error')?.cause?.slice(0, 300),
      sampledTokens,
      promptTokens: records.reduce((s, r) => s + r.usage.policy.input, 0),
      tokensPerS: Math.round((sampledTokens / wallS) * 10) / 10,
      episodesPerMin: Math.round((records.length / wallS) * 60 * 10) / 10,
    };
  } finally {
    await server.stop();
  }
}

try {
  const results: EngineResult[] = [];
  // TBT_BENCH_ENGINES=builtin (or vllm) runs one side only, for a look at it; the ratio needs both.
  const engines = readEnvironment().TBT_BENCH_ENGINES.split(',') as PolicyEngine[];
  for (const engine of engines) {
    const r = await load(engine);
    console.log(JSON.stringify(r));
    results.push(r);
  }
  const builtin = results.find((r) => r.engine === 'builtin');
  const vllm = results.find((r) => r.engine === 'vllm');
  if (builtin && vllm)
    console.log(
      `vllm/builtin: sampled tokens/s ${(vllm.tokensPerS / builtin.tokensPerS).toFixed(2)}x, episodes/min ` +
        `${(vllm.episodesPerMin / builtin.episodesPerMin).toFixed(2)}x; start-up ${vllm.startupS} s vs ` +
        `${builtin.startupS} s (${episodes} episodes, ${concurrency} in flight, ${os.cpus().length} cores)`,
    );
} finally {
  await pool.close();
}
