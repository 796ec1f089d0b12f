import type { Scenario } from '../config/task-schema.ts';
import { SandboxPool, type SandboxPoolOptions } from '../sandbox/sandbox-pool.ts';
import { withClient } from '../infra/control-database.ts';

/**
 * Sustained sandbox turnover: `episodes` acquire + (one write, as an episode would) + release cycles on `lanes`
 * concurrent lanes, with the production pool (warm clones refilled in the background). Wall time runs until
 * the pool's background work is done too, so neither mode hides work after its last release.
 */
export async function sustainedRate(
  options: SandboxPoolOptions,
  scenario: Scenario,
  write: string,
  episodes: number,
  lanes: number,
): Promise<{ episodes: number; seconds: number; perSecond: number }> {
  const pool = new SandboxPool(options);
  await pool.ensureTemplate(scenario);
  const t = performance.now();
  let next = 0;
  await Promise.all(
    Array.from({ length: lanes }, async (_, lane) => {
      while (next < episodes) {
        next += 1;
        const sandbox = await pool.acquire(scenario, `bench:sustained:${lane}`);
        if (write) await withClient(sandbox.adminUrl, (c) => c.query(write));
        await pool.release(sandbox);
      }
    }),
  );
  await pool.close();
  const seconds = (performance.now() - t) / 1000;
  return { episodes, seconds, perSecond: episodes / seconds };
}
