import { createHash } from 'node:crypto';
import pg from 'pg';
import type { Scenario, Task } from '../config/task-schema.ts';
import { canonicalJson } from '../core/canonical-json.ts';
import {
  canonicalizeState,
  diffStates,
  stateHash,
  type CanonicalState,
  type StateDifference,
} from '../core/canonical-state.ts';
import { BadInputError, InfrastructureError, errorMessage } from '../core/errors.ts';
import { withPooledClient } from '../infra/control-database.ts';
import type { Judge, JudgeVerdict } from '../rollout/judge-client.ts';
import { openToolSession } from '../rollout/mcp-tool-session.ts';
import { templateFingerprint, type Sandbox, type SandboxPool } from './sandbox-pool.ts';
import { readSnapshot } from './state-snapshot.ts';

/**
 * Terminal-state grading (docs/reference-rules.md §3). Expected state = a fresh sandbox + the task's data patch
 * + the golden tool calls replayed through the same MCP tools the agent uses. Reward 1 iff the canonical
 * state hashes match, every SQL assertion holds and every rubric gets a yes. Infrastructure problems give
 * the outcome `infrastructure_error` (never reward 0). A task whose own test code raises the same exception at the
 * same place in two gradings gives `task_error`: not retried, never trained on, counted apart in coverage.
 */

export type Outcome = 'success' | 'agent_failure' | 'infrastructure_error' | 'task_error';

/** Where a task's test code raised (outcome `task_error`): its file, line and exception. */
export interface TaskErrorPlace {
  file: string;
  line: number;
  exception: string;
}

export interface AssertionResult {
  name: string;
  passed: boolean;
}
export interface GradeReport {
  outcome: Outcome;
  reward: number;
  stateMatches: boolean;
  resultHash: string;
  goldenHash: string;
  diff: StateDifference[];
  assertions: AssertionResult[];
  rubrics: JudgeVerdict[];
  /** Why the episode failed (agent failure) or could not be graded (infrastructure or task error). */
  cause?: string;
  taskError?: TaskErrorPlace;
}

/** The report a grader starts from and fills in: a failure until every check has passed. */
export function ungradedReport(): GradeReport {
  return {
    outcome: 'agent_failure',
    reward: 0,
    stateMatches: false,
    resultHash: '',
    goldenHash: '',
    diff: [],
    assertions: [],
    rubrics: [],
  };
}

export interface GradeInput {
  scenario: Scenario;
  task: Task;
  sandbox: Sandbox;
  /** Last visible assistant message, for rubrics. */
  lastAssistantText: string;
  judge?: Judge;
  /** Validation grades state and assertions only. */
  skipRubrics?: boolean;
}

function goldenKey(scenario: Scenario, task: Task): string {
  return createHash('sha256')
    .update(
      canonicalJson({
        template: templateFingerprint(scenario),
        volatile: scenario.volatile,
        tools: scenario.tools,
        patch: task.data_patch ?? '',
        golden: task.golden,
      }),
    )
    .digest('hex');
}

export async function readCanonicalState(sandbox: Sandbox, scenario: Scenario): Promise<CanonicalState> {
  const db = new pg.Client({ connectionString: sandbox.readerUrl, connectionTimeoutMillis: 10_000 });
  try {
    await db.connect();
    return canonicalizeState(await readSnapshot(db), scenario.volatile);
  } catch (err) {
    throw new InfrastructureError(`cannot read the state of ${sandbox.name}: ${errorMessage(err)}`, { cause: err });
  } finally {
    await db.end().catch(() => undefined);
  }
}

/** Replays `calls` through a fresh MCP session on the sandbox; a failing golden call is a task defect. */
export async function replayCalls(
  scenario: Scenario,
  sandbox: Sandbox,
  task: Pick<Task, 'uid' | 'golden'>,
): Promise<void> {
  const session = await openToolSession(scenario, sandbox);
  try {
    for (const [i, call] of task.golden.entries()) {
      const result = await session.callTool(call.tool, call.arguments);
      if (result.isError) throw new BadInputError(`task ${task.uid}: golden[${i}] ${call.tool} failed: ${result.text}`);
    }
  } finally {
    await session.close();
  }
}

export class TerminalStateGrader {
  private readonly cache = new Map<string, Promise<{ hash: string; state: CanonicalState }>>();

  constructor(
    private readonly pool: SandboxPool,
    private readonly controlUrl: string,
  ) {}

  /** Expected terminal state of a task, computed once and stored in the control database. */
  goldenState(scenario: Scenario, task: Task): Promise<{ hash: string; state: CanonicalState }> {
    const key = goldenKey(scenario, task);
    let pending = this.cache.get(key);
    if (!pending) {
      pending = this.computeGolden(scenario, task, key);
      this.cache.set(key, pending);
      pending.catch(() => this.cache.delete(key));
    }
    return pending;
  }

  private async computeGolden(
    scenario: Scenario,
    task: Task,
    key: string,
  ): Promise<{ hash: string; state: CanonicalState }> {
    const stored = await this.control((c) =>
      c.query<{ state_hash: string; state: CanonicalState }>(
        'SELECT state_hash, state FROM golden_states WHERE key = $1',
        [key],
      ),
    );
    if (stored.rows[0]) return { hash: stored.rows[0].state_hash, state: stored.rows[0].state };
    const sandbox = await this.pool.acquire(scenario, `golden:${task.uid}`, { dataPatch: task.data_patch });
    try {
      await replayCalls(scenario, sandbox, task);
      const state = await readCanonicalState(sandbox, scenario);
      const hash = stateHash(state);
      await this.control((c) =>
        c.query('INSERT INTO golden_states (key, state_hash, state) VALUES ($1, $2, $3) ON CONFLICT (key) DO NOTHING', [
          key,
          hash,
          JSON.stringify(state),
        ]),
      );
      return { hash, state };
    } finally {
      await this.pool.release(sandbox);
    }
  }

  private async control<T>(fn: (c: pg.ClientBase) => Promise<T>): Promise<T> {
    try {
      return await withPooledClient(this.controlUrl, fn);
    } catch (err) {
      if (err instanceof BadInputError) throw err;
      throw new InfrastructureError(`control database: ${errorMessage(err)}`, { cause: err });
    }
  }

  async grade(input: GradeInput): Promise<GradeReport> {
    const { scenario, task, sandbox } = input;
    const report = ungradedReport();
    try {
      const golden = await this.goldenState(scenario, task);
      const result = await readCanonicalState(sandbox, scenario);
      report.goldenHash = golden.hash;
      report.resultHash = stateHash(result);
      report.stateMatches = report.resultHash === golden.hash;
      if (!report.stateMatches) report.diff = diffStates(result, golden.state);
      report.assertions = await this.runAssertions(sandbox, task);
      if (!input.skipRubrics && task.rubrics.length > 0) {
        if (!input.judge) throw new BadInputError(`task ${task.uid} has rubrics but no judge is configured`);
        for (const question of task.rubrics)
          report.rubrics.push(await input.judge.ask(question, input.lastAssistantText));
      }
    } catch (err) {
      if (err instanceof BadInputError) throw err;
      return { ...report, outcome: 'infrastructure_error', reward: 0, cause: errorMessage(err) };
    }
    const failed = [
      ...(report.stateMatches
        ? []
        : [`terminal state differs from the golden state in ${report.diff.length} place(s)`]),
      ...report.assertions.filter((a) => !a.passed).map((a) => `assertion failed: ${a.name}`),
      ...report.rubrics.filter((r) => !r.yes).map((r) => `rubric answered no: ${r.question}`),
    ];
    return failed.length === 0 ? { ...report, outcome: 'success', reward: 1 } : { ...report, cause: failed.join('; ') };
  }

  private async runAssertions(sandbox: Sandbox, task: Task): Promise<AssertionResult[]> {
    if (task.assertions.length === 0) return [];
    const db = new pg.Client({ connectionString: sandbox.readerUrl, connectionTimeoutMillis: 10_000 });
    await db.connect();
    try {
      const results: AssertionResult[] = [];
      for (const a of task.assertions) {
        const { rows } = await db.query({ text: a.sql, rowMode: 'array' });
        results.push({ name: a.name, passed: rows.length === 1 && (rows[0] as unknown[])[0] === true });
      }
      return results;
    } finally {
      await db.end().catch(() => undefined);
    }
  }
}
