import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { readEnvironment } from '../config/environment.ts';
import { importThinkingbox } from '../cli/commands/tasks.ts';
import { prepareDatasetEnvironment } from '../datasets/thinkingbox/dataset-environment.ts';
import { loadImportedSuite } from '../datasets/thinkingbox/imported-suite.ts';
import { thinkingboxEnvironment } from '../datasets/thinkingbox/thinkingbox-environment.ts';
import type { ToolCallMade } from '../rollout/episode-environment.ts';
import { createJudge } from '../rollout/judge-client.ts';
import { thinkingboxResources } from '../rollout/thinkingbox-resources.ts';
import { startTypesense } from '../infra/typesense-standin.ts';
import { OpenAIWireProtocolDouble } from '../test/helpers/openai-wire-double.ts';

/**
 * bench/thinkingbox-conformance: every non-benchmark test function of the public ThinkingBox data graded by its own
 * test code, through our test-facing API (thinkingbox/shim) and a judge that is a wire double of an OpenAI API
 * (answering "Yes" in one pass and "No." in another), each task on a fresh backend in the sandbox: its golden
 * calls if it has any, a `transfer_to_human_agents` call where the scenario offers one (so `x.tool_calls` is read
 * as the reference's typed objects), then a final answer. A test body may pass or fail; a system error (an
 * exception other than AssertionError, a missing API) is what this counts. Last line:
 * `conformance: tasks=N system_errors=E pass_yes=P pass_no=Q minutes=M`.
 * Usage: npm run bench:conformance [-- DATA_DIR]   (default ../shared/datasets/thinkingbox-data)
 */

const env = readEnvironment();
const data = path.resolve(process.argv[2] ?? env.TBT_THINKINGBOX_DATA ?? '../shared/datasets/thinkingbox-data');
const testDir = path.join(data, 'dataset', 'test_case');
const started = Date.now();

/** Every test function of every test file outside the benchmark's folders. */
function nonBenchmarkUids(): string[] {
  const bench = new Set(
    fs
      .readFileSync(path.join(data, 'releases', 'thinkingbox_bench_v1', 'testlist_thinkingbox_bench_v1.yaml'), 'utf8')
      .split('\n')
      .map((l) => l.replace(/^- /, '').split(':')[0]!.trim()),
  );
  return fs
    .readdirSync(testDir)
    .filter((f) => f.endsWith('.py') && !bench.has(f))
    .sort()
    .flatMap((f) =>
      [...fs.readFileSync(path.join(testDir, f), 'utf8').matchAll(/^def (test\w*)\(/gm)].map((m) => `${f}:${m[1]}`),
    );
}

async function gradeAll(answer: string, suiteDir: string): Promise<Record<string, number>> {
  const suite = loadImportedSuite(suiteDir).suite!;
  const judgeDouble = new OpenAIWireProtocolDouble(() => answer);
  const judge = createJudge({ baseUrl: await judgeDouble.start(), model: 'judge-double', timeoutMs: 30_000 });
  const resources = thinkingboxResources({
    warm_processes: 0,
    server_start: 'template',
    server_start_timeout_ms: 120_000,
    test_timeout_ms: 120_000,
    native_grading: false,
  });
  const counts: Record<string, number> = {};
  try {
    for (const task of suite.tasks) {
      const opened = await thinkingboxEnvironment(resources, suite, task).open(`conformance:${task.uid}`);
      try {
        const visible = new Set((await opened.tools.listTools()).map((t) => t.name));
        const calls = task.golden.map((c) => ({ tool: c.tool, arguments: c.arguments }));
        if (visible.has('transfer_to_human_agents'))
          calls.push({ tool: 'transfer_to_human_agents', arguments: { summary: 'The user asks for a refund.' } });
        const made: ToolCallMade[] = [];
        const messages: unknown[] = [{ role: 'user', content: task.query }];
        for (const [i, c] of calls.entries()) {
          const r = await opened.tools.callTool(c.tool, c.arguments);
          made.push({ name: c.tool, arguments: c.arguments, result: r.text, isError: r.isError });
          const call = { id: `call_${i + 1}`, type: 'function', function: { name: c.tool, arguments: '{}' } };
          call.function.arguments = JSON.stringify(c.arguments);
          messages.push({ role: 'assistant', content: '', tool_calls: [call] });
          messages.push({ role: 'tool', content: r.text, tool_call_id: call.id });
        }
        const final = 'I have taken care of your request. <DONE>';
        messages.push({ role: 'assistant', content: final });
        const graded = await opened.grade({ lastAssistantText: final, toolCalls: made, messages, judge });
        const kind = graded.outcome === 'infrastructure_error' ? 'system_error' : graded.outcome;
        counts[kind] = (counts[kind] ?? 0) + 1;
        console.log(`${kind}\t${task.uid}\t${(graded.cause ?? '').replace(/\s+/g, ' ').slice(0, 140)}`);
      } finally {
        await opened.close();
      }
    }
  } finally {
    await resources.servers.close();
    await judgeDouble.stop();
  }
  return counts;
}

const uids = nonBenchmarkUids();
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'tbt-conformance-'));
const list = path.join(work, 'list.yaml');
fs.writeFileSync(list, uids.map((u) => `- ${u}\n`).join(''));
const suiteDir = path.join(work, 'suite');
if (importThinkingbox(['--data', path.join(data, 'dataset'), '--list', list, '--out', suiteDir]) !== 0)
  throw new Error('the import reported problems (above)');
prepareDatasetEnvironment(loadImportedSuite(suiteDir).suite!.imported.server_packages, console.log, {
  allowSdist: ['sly'],
});
await startTypesense(env);
const yes = await gradeAll('Yes', suiteDir);
const no = await gradeAll('No.', suiteDir);
const errors = (yes.system_error ?? 0) + (no.system_error ?? 0);
console.log(`judge "Yes": ${JSON.stringify(yes)}; judge "No.": ${JSON.stringify(no)}`);
console.log(
  `conformance: tasks=${uids.length} system_errors=${errors} pass_yes=${yes.success ?? 0} ` +
    `pass_no=${no.success ?? 0} minutes=${((Date.now() - started) / 60_000).toFixed(1)}`,
);
fs.rmSync(work, { recursive: true, force: true });
process.exit(errors === 0 ? 0 : 1);
