import type { Scenario, Task } from '../config/task-schema.ts';
import { formatDiff } from '../core/canonical-state.ts';
import { errorMessage } from '../core/errors.ts';
import { quoteIdent, withClient } from '../infra/control-database.ts';
import type { SandboxPool } from '../sandbox/sandbox-pool.ts';
import { replayCalls, type TerminalStateGrader } from '../sandbox/terminal-state-grader.ts';

/**
 * Checks that a task's grading can tell right from wrong: the golden replay passes, a null agent (no tool
 * calls) fails unless the task expects no change, and a one-row mutation of the golden state fails.
 * Rubrics are not asked (no judge during validation); state and SQL assertions are.
 */

export interface TaskValidation {
  uid: string;
  goldenPass: boolean;
  /** True when the golden replay leaves the (patched) initial state unchanged. */
  noChange: boolean;
  /** Null agent behaved as required: failed on a change task, passed on a no-change task. */
  nullOk: boolean;
  /** A one-row mutation of the golden state fails grading (native tasks; not applicable to imported ones). */
  mutationFail: boolean;
  problems: string[];
  /** An imported task that declares no golden trajectory: only that its test code runs was checked. */
  noGolden?: boolean;
  /** Noted, not failing. */
  warnings?: string[];
  /** Per episode: milliseconds to a ready backend (tool servers started or taken warm, initialised). */
  backendStartMs?: number[];
}

const CHANGE_BY_TYPE: [RegExp, (col: string) => string][] = [
  [/^boolean$/, (c) => `NOT ${c}`],
  [/^(smallint|integer|bigint|numeric|real|double precision)$/, (c) => `${c} + 1`],
  [/^(text|character varying|character)$/, (c) => `${c} || '~'`],
  [/^date$/, (c) => `${c} + 1`],
  [/^timestamp/, (c) => `${c} + interval '1 day'`],
];

/** Changes one value of one row (or deletes a row) through the owner role; returns what it did. */
export async function mutateOneRow(ownerUrl: string, scenario: Scenario): Promise<string> {
  return withClient(ownerUrl, async (db) => {
    const { rows: columns } = await db.query<{
      table_name: string;
      column_name: string;
      data_type: string;
      is_pk: boolean;
    }>(`
      SELECT c.table_name, c.column_name, c.data_type,
             EXISTS (SELECT 1 FROM information_schema.key_column_usage k JOIN information_schema.table_constraints t
                       ON t.constraint_name = k.constraint_name AND t.table_name = k.table_name
                     WHERE t.constraint_type = 'PRIMARY KEY' AND k.table_name = c.table_name
                       AND k.column_name = c.column_name) AS is_pk
      FROM information_schema.columns c WHERE c.table_schema = 'public' ORDER BY c.table_name, c.ordinal_position`);
    const tables = [...new Set(columns.map((c) => c.table_name))];
    await db.query('BEGIN');
    const done = async (what: string) => {
      await db.query('COMMIT');
      return what;
    };
    for (const table of tables) {
      const volatile = new Set(scenario.volatile[table] ?? []);
      const candidates = columns.filter((c) => c.table_name === table && !c.is_pk && !volatile.has(c.column_name));
      for (const column of candidates) {
        const change = CHANGE_BY_TYPE.find(([re]) => re.test(column.data_type))?.[1];
        if (!change) continue;
        const col = quoteIdent(column.column_name);
        await db.query('SAVEPOINT m');
        try {
          const r = await db.query(
            `UPDATE ${quoteIdent(table)} SET ${col} = ${change(col)} WHERE ctid = (SELECT ctid FROM ` +
              `${quoteIdent(table)} WHERE ${col} IS NOT NULL LIMIT 1)`,
          );
          if (r.rowCount === 1) return done(`changed ${table}.${column.column_name} of one row`);
        } catch {
          await db.query('ROLLBACK TO SAVEPOINT m');
        }
      }
      await db.query('SAVEPOINT m');
      try {
        const r = await db.query(
          `DELETE FROM ${quoteIdent(table)} WHERE ctid = (SELECT ctid FROM ${quoteIdent(table)} LIMIT 1)`,
        );
        if (r.rowCount === 1) return done(`deleted one row of ${table}`);
      } catch {
        await db.query('ROLLBACK TO SAVEPOINT m');
      }
    }
    await db.query('ROLLBACK');
    throw new Error('no row could be mutated (all tables empty?)');
  });
}

export async function validateTask(
  pool: SandboxPool,
  grader: TerminalStateGrader,
  scenario: Scenario,
  task: Task,
): Promise<TaskValidation> {
  const v: TaskValidation = {
    uid: task.uid,
    goldenPass: false,
    noChange: false,
    nullOk: false,
    mutationFail: false,
    problems: [],
  };
  const grade = (sandbox: Parameters<TerminalStateGrader['grade']>[0]['sandbox']) =>
    grader.grade({ scenario, task, sandbox, lastAssistantText: '', skipRubrics: true });
  try {
    await grader.goldenState(scenario, task);
  } catch (err) {
    v.problems.push(errorMessage(err));
    return v;
  }
  const owner = `validate:${task.uid}`;
  const replayed = await pool.acquire(scenario, owner, { dataPatch: task.data_patch });
  try {
    await replayCalls(scenario, replayed, task);
    const golden = await grade(replayed);
    v.goldenPass = golden.outcome === 'success';
    if (!v.goldenPass) v.problems.push(`golden replay does not pass: ${golden.cause ?? golden.outcome}`);
    const what = await mutateOneRow(replayed.ownerUrl, scenario);
    const mutated = await grade(replayed);
    v.mutationFail = mutated.outcome === 'agent_failure';
    if (!v.mutationFail) v.problems.push(`a one-row mutation (${what}) is not detected: ${mutated.outcome}`);
  } catch (err) {
    v.problems.push(errorMessage(err));
  } finally {
    await pool.release(replayed);
  }
  const untouched = await pool.acquire(scenario, owner, { dataPatch: task.data_patch });
  try {
    const nullResult = await grade(untouched);
    v.noChange = nullResult.stateMatches;
    v.nullOk = v.noChange ? nullResult.outcome === 'success' : nullResult.outcome === 'agent_failure';
    if (!v.nullOk) {
      v.problems.push(
        v.noChange
          ? `no-change task, but a null agent does not pass: ${nullResult.cause}`
          : `a null agent does not fail: ` +
              `${nullResult.outcome}${nullResult.diff.length ? `\n${formatDiff(nullResult.diff)}` : ''}`,
      );
    }
  } catch (err) {
    v.problems.push(errorMessage(err));
  } finally {
    await pool.release(untouched);
  }
  return v;
}
