/**
 * A command run on a fixed set of CPUs (`taskset -c LIST`), or as is when no list is given. Used for the embedded
 * policy server and the CPU learner (TBT_POLICY_CPUS, TBT_LEARNER_CPUS), so that on one machine each can be held to
 * its own cores, as inference and training GPUs are separate pools on a cluster (bench:async pins them).
 */
export function onCpus(command: string, args: string[], cpus: string | undefined): [string, string[]] {
  return cpus ? ['taskset', ['-c', cpus, command, ...args]] : [command, args];
}
