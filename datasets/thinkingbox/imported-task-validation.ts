import type { ImportedTask } from '../../config/thinkingbox-schema.ts';
import { declaresGolden } from '../../core/world-state-merge.ts';
import { errorMessage } from '../../core/errors.ts';
import { judgeFrom, type Judge } from '../../rollout/judge-client.ts';
import type { ToolCallMade } from '../../rollout/episode-environment.ts';
import type { TaskValidation } from '../../task-suites/task-validation.ts';
import type { ThinkingBoxSuite } from './imported-suite.ts';
import { thinkingboxEnvironment, type ThinkingBoxResources } from './thinkingbox-environment.ts';

/**
 * Golden validation of an imported task: replaying the golden calls found in `init` through the agent's own
 * tool session passes the task's test, and a null agent (no calls) fails it unless the golden replay changes
 * nothing. Rubrics are not what is checked here (no judge during validation): judge questions are answered
 * yes, so the check is about the state the tests grade. A custom test body may also check the final answer,
 * which a replay has none of: for those, the golden replay passes when every server's state matches its
 * golden state, and a failing body is reported as a warning. A task that declares no golden trajectory at all is
 * checked only for test code that runs when its body is a custom one.
 */

const ASSUME_YES: Judge = judgeFrom(async () => ({
  text: 'Yes (validation does not ask the judge)',
  usage: { input: 0, output: 0 },
}));

export async function validateImportedTask(
  resources: ThinkingBoxResources,
  suite: ThinkingBoxSuite,
  task: ImportedTask,
): Promise<TaskValidation> {
  const v: TaskValidation = {
    uid: task.uid,
    goldenPass: false,
    noChange: false,
    nullOk: false,
    mutationFail: false,
    problems: [],
  };
  v.backendStartMs = [];
  const run = async (calls: ImportedTask['golden']) => {
    const started = Date.now();
    const opened = await thinkingboxEnvironment(resources, suite, task).open(`validate:${task.uid}`);
    v.backendStartMs!.push(Date.now() - started);
    try {
      const made: ToolCallMade[] = [];
      for (const [i, call] of calls.entries()) {
        const result = await opened.tools.callTool(call.tool, call.arguments);
        if (result.isError) throw new Error(`golden[${i}] ${call.tool} failed: ${result.text}`);
        made.push({ name: call.tool, arguments: call.arguments, result: result.text, isError: false });
      }
      return await opened.grade({ lastAssistantText: '', toolCalls: made, judge: ASSUME_YES });
    } finally {
      await opened.close();
    }
  };
  try {
    if (!task.test.native && !declaresGolden(task.world_state)) {
      // A custom test body and no golden trajectory (the airline release): nothing says what the expected state
      // is, so only that the test code runs on a null agent (passes or fails, no system error) is checked. (A
      // recognised body compares with the golden state the servers compute: no calls declared = no change.)
      v.noGolden = true;
      const nothing = await run([]);
      v.nullOk = nothing.outcome === 'success' || nothing.outcome === 'agent_failure';
      if (!v.nullOk) v.problems.push(`the test code does not run on a null agent: ${nullAgentCause(nothing)}`);
      return v;
    }
    const golden = await run(task.golden);
    v.goldenPass =
      golden.outcome === 'success' || (!task.test.native && golden.outcome === 'agent_failure' && golden.stateMatches);
    if (!v.goldenPass) v.problems.push(`golden replay does not pass: ${golden.cause ?? golden.outcome}`);
    else if (golden.outcome !== 'success')
      v.warnings = [`golden state reached, but the custom test body fails without a final answer: ${golden.cause}`];
    const nothing = await run([]);
    v.noChange = task.golden.length === 0 || nothing.stateMatches;
    v.nullOk = v.noChange ? nothing.outcome === 'success' : nothing.outcome === 'agent_failure';
    if (!v.nullOk)
      v.problems.push(
        v.noChange
          ? `no-change task, but a null agent does not pass: ${nothing.cause}`
          : `a null agent does not fail: ${nullAgentCause(nothing)}`,
      );
  } catch (err) {
    v.problems.push(errorMessage(err));
  }
  return v;
}

/**
 * Why the null agent's grade is not the expected one. A task error here is the one evaluations list apart and
 * training drops (docs/operations.md, "Task errors"): the same test raises whenever an agent leaves this state.
 */
function nullAgentCause(grade: { outcome: string; cause?: string }): string {
  if (grade.outcome !== 'task_error') return grade.cause ?? grade.outcome;
  return `${grade.cause} (a task error: evaluations list it apart and training drops the task)`;
}
