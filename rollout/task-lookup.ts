import type { Scenario } from '../config/task-schema.ts';
import { BadInputError } from '../core/errors.ts';
import {
  formatProblem,
  loadSuites,
  type AnySuite,
  type LoadedTask,
  type Suite,
  type ThinkingBoxSuite,
} from '../task-suites/task-suite-loader.ts';

/** A task of either suite kind: native or imported ThinkingBox. */
export type AnyTask = LoadedTask | ThinkingBoxSuite['tasks'][number];

// A worker runs many episodes of the same suite: it is loaded (and checked) once per process.
const suiteCache = new Map<string, AnySuite>();

export function findTask(suiteDir: string, uid: string): { suite: AnySuite; task: AnyTask } {
  let suite = suiteCache.get(suiteDir);
  if (!suite) {
    const { suites, problems } = loadSuites(suiteDir);
    if (problems.length)
      throw new BadInputError(
        `task suite ${suiteDir} has problems:\n${problems.slice(0, 10).map(formatProblem).join('\n')}`,
      );
    suite = suites[0]!;
    suiteCache.set(suiteDir, suite);
  }
  const task = (suite.tasks as AnyTask[]).find((t) => t.uid === uid);
  if (!task) throw new BadInputError(`task '${uid}' not found in ${suiteDir}`);
  return { suite, task };
}

/** The native task of a native suite (tools that only handle native tasks). */
export function findNativeTask(suiteDir: string, uid: string): { suite: Suite; task: LoadedTask; scenario: Scenario } {
  const { suite, task } = findTask(suiteDir, uid);
  if (suite.kind !== 'native')
    throw new BadInputError(`${suiteDir} is an imported ThinkingBox suite; this needs a native suite`);
  return { suite, task: task as LoadedTask, scenario: suite.scenarios[(task as LoadedTask).scenario]! };
}
