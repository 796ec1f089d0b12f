/**
 * The class of an episode's infrastructure error, read from its recorded cause: a short, fixed set of names that
 * a dashboard can group by (a metric label must not carry the free text of the cause). The causes are the
 * messages of the InfrastructureErrors the rollout code throws (`policy server ...`, `judge unavailable: ...`,
 * `tool server '...': ...`) and the episode runner's own (`no answer from X before the episode deadline`,
 * `unexpected error: ...`).
 */

export const infrastructureErrorClasses = [
  'deadline',
  'policy_server',
  'judge',
  'sandbox',
  'tool_server',
  'control_database',
  'unexpected',
  'other',
] as const;
export type InfrastructureErrorClass = (typeof infrastructureErrorClasses)[number];

/** First match wins: a deadline names the dependency that hung, but the hang is what went wrong. */
const rules: [RegExp, InfrastructureErrorClass][] = [
  [/before the episode deadline|episode deadline passed|did not finish within/i, 'deadline'],
  [/^unexpected error:/i, 'unexpected'],
  [/^policy (server|chat completion)|chat template|token anchor|assistant terminator|observe\(\)/i, 'policy_server'],
  [/^judge/i, 'judge'],
  [/sandbox|cannot read the state of/i, 'sandbox'],
  [/^tool server|^tool |^test |test runner|dataset code|tool servers of/i, 'tool_server'],
  [/control database|deployment tag/i, 'control_database'],
];

export function infrastructureErrorClass(cause: string | undefined): InfrastructureErrorClass {
  if (!cause) return 'other';
  return rules.find(([pattern]) => pattern.test(cause))?.[1] ?? 'other';
}
