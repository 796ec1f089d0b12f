import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { databaseUrl, readEnvironment, repoRoot } from '../config/environment.ts';
import { loadSuites } from '../task-suites/task-suite-loader.ts';
import { SandboxPool } from '../sandbox/sandbox-pool.ts';
import { sustainedRate } from './sandbox-sustained.ts';
import { ensureControlDatabase, quoteIdent, withClient, withDatabase } from '../infra/control-database.ts';

/**
 * bench/sandbox: latency of getting a fresh episode database, four ways, in one run:
 *   warm      SandboxPool.acquire from a warm pool (the production path)
 *   file_copy cold CREATE DATABASE ... TEMPLATE ... STRATEGY FILE_COPY
 *   wal_log   cold CREATE DATABASE ... TEMPLATE ... STRATEGY WAL_LOG (PG15's default)
 *   ddl_seed  CREATE DATABASE then run the scenario's schema + seed SQL
 * Prints p50/p95 and ratios against the warm pool. Then the sustained acquire + release rate over M episodes
 * (default 500, 4 lanes), recycled sandboxes (sandbox-recycler.ts) against drop + create (clone per episode).
 * Usage: npm run bench:sandbox [-- N [M]]
 */

const n = Number(process.argv[2] ?? 20);
const sustainedEpisodes = Number(process.argv[3] ?? 500);
const env = readEnvironment();
await ensureControlDatabase(env);
const controlUrl = databaseUrl(env);
const scenario = Object.values(loadSuites(path.join(repoRoot, 'tasks', 'business')).suites[0]!.scenarios)[0]!;
const quantile = (xs: number[], q: number) =>
  [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))]!;

async function time(fn: () => Promise<void>): Promise<number> {
  const t = performance.now();
  await fn();
  return performance.now() - t;
}

const pool = new SandboxPool({
  controlUrl,
  warm: 2,
  agentPassword: env.TBT_AGENT_DB_PASSWORD,
  readerPassword: env.TBT_READER_DB_PASSWORD,
});
const template = await pool.ensureTemplate(scenario);
const results: Record<string, number[]> = { warm: [], file_copy: [], wal_log: [], ddl_seed: [] };

const admin = (sql: string) => withClient(controlUrl, (c) => c.query(sql));
for (let i = 0; i < n; i++) {
  await pool.refill(template); // an episode's worth of time lets the pool refill; measure the acquire itself
  let leased: Awaited<ReturnType<SandboxPool['acquire']>> | undefined;
  results.warm!.push(
    await time(async () => {
      leased = await pool.acquire(scenario, 'bench');
    }),
  );
  await pool.release(leased!);
  for (const strategy of ['FILE_COPY', 'WAL_LOG'] as const) {
    const name = `tbt_sbx_bench_${randomBytes(4).toString('hex')}`;
    results[strategy.toLowerCase()]!.push(
      await time(() =>
        admin(`CREATE DATABASE ${quoteIdent(name)} TEMPLATE ${quoteIdent(template)} STRATEGY ${strategy}`).then(
          () => undefined,
        ),
      ),
    );
    await admin(`DROP DATABASE ${quoteIdent(name)} WITH (FORCE)`);
  }
  const name = `tbt_sbx_bench_${randomBytes(4).toString('hex')}`;
  results.ddl_seed!.push(
    await time(async () => {
      await admin(`CREATE DATABASE ${quoteIdent(name)}`);
      await withClient(withDatabase(controlUrl, name), async (c) => {
        await c.query(scenario.schema);
        await c.query(scenario.seed);
      });
    }),
  );
  await admin(`DROP DATABASE ${quoteIdent(name)} WITH (FORCE)`);
}
await pool.close();

const base = quantile(results.warm!, 0.5);
console.log(`bench/sandbox: scenario ${scenario.name}, ${n} rounds each`);
console.log('strategy    p50 ms   p95 ms   p50 / warm p50');
for (const [k, xs] of Object.entries(results)) {
  console.log(
    `${k.padEnd(10)} ${quantile(xs, 0.5).toFixed(1).padStart(7)}  ${quantile(xs, 0.95).toFixed(1).padStart(7)}   ` +
      `${(quantile(xs, 0.5) / base).toFixed(1)}x`,
  );
}

// Sustained turnover: what bounds the episode rate once the warm pool drains.
const poolOptions = {
  controlUrl,
  warm: 2,
  agentPassword: env.TBT_AGENT_DB_PASSWORD,
  readerPassword: env.TBT_READER_DB_PASSWORD,
};
// The last table the schema creates: usually one no other table references, so a row can go.
const table = [...scenario.schema.matchAll(/CREATE TABLE\s+(\w+)/gi)].at(-1)?.[1];
const write = table
  ? `DELETE FROM ${quoteIdent(table)} WHERE ctid IN (SELECT ctid FROM ${quoteIdent(table)} LIMIT 1)`
  : '';
const lanes = 4;
const dropCreate = await sustainedRate({ ...poolOptions, recycle: false }, scenario, write, sustainedEpisodes, lanes);
const recycled = await sustainedRate({ ...poolOptions, recycle: true }, scenario, write, sustainedEpisodes, lanes);
console.log(`\nsustained acquire + write + release, ${sustainedEpisodes} episodes, ${lanes} lanes, warm 2:`);
for (const [k, r] of [
  ['drop+create', dropCreate],
  ['recycled', recycled],
] as const)
  console.log(
    `${k.padEnd(12)} ${r.seconds.toFixed(1).padStart(7)} s  ${r.perSecond.toFixed(1).padStart(6)} episodes/s`,
  );
console.log(`recycled / drop+create rate: ${(recycled.perSecond / dropCreate.perSecond).toFixed(2)}x`);
