/**
 * A paired comparison of two evaluations (before and after training, `tbt eval compare`) needs the same tasks on
 * both sides. A task with a task error (its own test code raised, tbt eval aggregate leaves it out of the scores)
 * may be one on one side only: a test that raises for an agent making no tool call meets the base policy but not the
 * trained one. Such tasks leave both sides, and the caller says how many.
 */
export function withoutTaskErrorTasks<T extends { uid: string }>(
  a: { tasks: T[]; task_errors?: { uid: string }[] },
  b: { tasks: T[]; task_errors?: { uid: string }[] },
): { a: T[]; b: T[]; leftOut: string[] } {
  const raising = new Set([...(a.task_errors ?? []), ...(b.task_errors ?? [])].map((t) => t.uid));
  const kept = (tasks: T[]) => tasks.filter((t) => !raising.has(t.uid));
  const leftOut = [...new Set([...a.tasks, ...b.tasks].map((t) => t.uid).filter((uid) => raising.has(uid)))];
  return { a: kept(a.tasks), b: kept(b.tasks), leftOut: leftOut.sort() };
}

/** The note a comparison adds when it left tasks out. */
export function leftOutNote(leftOut: string[]): string {
  return leftOut.length === 0
    ? ''
    : `${leftOut.length} task${leftOut.length === 1 ? '' : 's'} with a task error on one side left out of the ` +
        `paired comparison (${leftOut.slice(0, 5).join(', ')}${leftOut.length > 5 ? ', ...' : ''})`;
}
