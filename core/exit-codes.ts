import { BadInputError, InfrastructureError, infrastructureSystemCode } from './errors.ts';

/**
 * `tbt`'s exit codes, one per failure class, so whoever runs it (a user's script, a bookkeeping activity through
 * campaign-records/tbt-command.ts) learns the class without reading the text. 1 stays bad input, so scripts that
 * test for non-zero keep working; 70 and 75 are sysexits.h's EX_SOFTWARE and EX_TEMPFAIL.
 */
export const exitCodes = {
  ok: 0,
  /** Bad input (the message names the file, field or id), or the check a command ran failed (its help says). */
  badInput: 1,
  /** Bad flags: the usage line is printed. */
  usage: 2,
  /** An error of no class (core/errors.ts): most likely a bug. */
  unclassified: 70,
  /** The infrastructure failed (core/errors.ts `infrastructureSystemCode`): run it again once it is back. */
  infrastructure: 75,
} as const;

export type ExitClass = keyof typeof exitCodes;

/** The codes as `tbt --help` and docs/operations.md list them. */
export const exitCodeHelp: [code: number, meaning: string][] = [
  [exitCodes.ok, 'done'],
  [
    exitCodes.badInput,
    'bad input (the message names the file, field or id to fix), or the check the command ran failed',
  ],
  [exitCodes.usage, 'bad flags (the usage line is printed)'],
  [exitCodes.unclassified, 'an error of no failure class: most likely a bug (TBT_DEBUG=1 prints its stack)'],
  [
    exitCodes.infrastructure,
    'infrastructure: Postgres or a server down, the network, a full disk; run it again once it is back',
  ],
];

/**
 * The exit class of an error a command threw, by the one classifier of core/errors.ts: a BadInputError is bad
 * input; an InfrastructureError, or a system code, SQLSTATE or lost connection anywhere along its cause chain, is
 * infrastructure; a failed workflow a command waited on (cli/workflow-failure-text.ts) exits by its failure class;
 * anything else is unclassified (the name workflows/failure-class.ts gives it; most likely a bug). Flags and the
 * CLI's own InputError are decided by cli/tbt.ts before this.
 */
export function exitClassOf(err: unknown): Exclude<ExitClass, 'ok' | 'usage'> {
  if (err instanceof BadInputError) return 'badInput';
  if (err instanceof InfrastructureError || infrastructureSystemCode(err) !== undefined) return 'infrastructure';
  const waited = (err as { explanation?: { failureClass?: unknown } } | null)?.explanation?.failureClass;
  // Its classes are workflows/failure-class.ts's FailureClass (not imported: core stays below workflows).
  switch (waited) {
    case 'bad input':
    // Stopped on request: nothing failed that a retry would fix.
    case 'cancelled':
    case 'terminated':
      return 'badInput';
    case 'infrastructure':
    case 'no worker polling':
    case 'timed out':
      return 'infrastructure';
    default:
      return 'unclassified';
  }
}

/** The class an exit code says; undefined for a code `tbt` does not exit with (Node's own, a wrapper's). */
export function exitClassOfCode(code: number): ExitClass | undefined {
  return (Object.keys(exitCodes) as ExitClass[]).find((c) => exitCodes[c] === code);
}
