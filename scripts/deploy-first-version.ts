import { readEnvironment } from '../config/environment.ts';
import { adoptFirstVersionIn } from '../infra/worker-deployment-first-version.ts';

/**
 * The operator's first step on a fresh deployment with Worker Versioning on (scripts/deploy-test.sh): the workers
 * of compose join TBT_WORKER_DEPLOYMENT_NAME with their bundle's build id, and take no task until that build is
 * current. Makes the one build that polled current, as `tbt workers up` does locally; prints the outcome, exits 1
 * unless a build is current and it is the only one.
 */
async function run(): Promise<void> {
  const env = readEnvironment();
  const name = env.TBT_WORKER_DEPLOYMENT_NAME;
  if (!name) throw new Error('TBT_WORKER_DEPLOYMENT_NAME is not set');
  const outcome = await adoptFirstVersionIn(env, name, 5000);
  console.log(`deployment ${name}: ${outcome.text}`);
  if (outcome.made !== 'current' && outcome.made !== 'already-current') process.exitCode = 1;
}

run().catch((err: unknown) => {
  console.error(`deployment: ${err instanceof Error ? err.message : String(err)}`);
  process.exit(1);
});
