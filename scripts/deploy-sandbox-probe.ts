import { DatasetSandbox } from '../datasets/thinkingbox/dataset-sandbox.ts';

/**
 * Run inside a rollout worker container by scripts/deploy-test.sh: makes the dataset sandbox as the worker does,
 * which probes bubblewrap (namespaces, mounts, /proc) and refuses when it cannot run. Passing here means the
 * container's user, capabilities, seccomp profile and /proc settings from docker/compose.yaml let the sandbox work,
 * without --privileged. Prints the sandbox's mode line; exits 1 with the refusal otherwise.
 */
try {
  new DatasetSandbox({ log: (line) => console.log(line) });
} catch (err) {
  console.error(err instanceof Error ? err.message : String(err));
  process.exit(1);
}
