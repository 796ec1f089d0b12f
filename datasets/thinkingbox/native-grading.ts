import type { NativeTestPattern } from '../../config/thinkingbox-schema.ts';
import { BadInputError, InfrastructureError } from '../../core/errors.ts';
import type { Judge, JudgeVerdict } from '../../rollout/judge-client.ts';
import type { ServerEffects } from './reserved-tools.ts';

/**
 * The native fast path: exactly what the common Python body does, in the same order (so judge calls match).
 * The test-file parser (thinkingbox/tbt_thinkingbox/parse_test_files.py) recognises that body (per server, the
 * result hash equals the golden hash, then, with rubrics, each of its `rubrics_yesno` is answered yes) and the
 * import keeps it as the test's `native` pattern.
 */
export async function gradeNatively(
  pattern: NativeTestPattern,
  effects: Record<string, ServerEffects>,
  response: string,
  judge: Judge | undefined,
): Promise<{ status: 'pass' | 'fail'; message: string; reward?: number; verdicts: JudgeVerdict[] }> {
  const verdicts: JudgeVerdict[] = [];
  for (const server of pattern.servers) {
    const e = effects[server];
    if (!e || typeof e.result_db_hash !== 'string' || typeof e.golden_db_hash !== 'string')
      throw new InfrastructureError(`effects of server '${server}' lack result_db_hash/golden_db_hash`);
    if (e.result_db_hash !== e.golden_db_hash)
      return { status: 'fail', message: `terminal state of '${server}' differs from the golden state`, verdicts };
    if (!pattern.rubrics) continue;
    for (const question of e.rubrics_yesno ?? []) {
      if (!judge) throw new BadInputError(`the test asks the judge (rubric '${question}') but no judge is configured`);
      const v = await judge.ask(question, response);
      verdicts.push(v);
      if (!v.yes) return { status: 'fail', message: `rubric answered no: ${question}`, verdicts };
    }
  }
  return { status: 'pass', message: '', verdicts };
}
