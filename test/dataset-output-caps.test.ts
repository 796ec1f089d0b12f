import assert from 'node:assert/strict';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { finished } from 'node:stream/promises';
import { after, before, test } from 'node:test';
import { repoRoot } from '../config/environment.ts';
import { readCappedLines } from '../datasets/thinkingbox/capped-lines.ts';
import { datasetPathPrefix, datasetPython } from '../datasets/thinkingbox/dataset-python.ts';
import { DatasetSandbox } from '../datasets/thinkingbox/dataset-sandbox.ts';
import { gradeEpisode, type EpisodeGrading } from '../datasets/thinkingbox/episode-grading.ts';
import type { ToolRoute } from '../datasets/thinkingbox/episode-tool-routes.ts';
import { routedToolSession } from '../datasets/thinkingbox/routed-tool-session.ts';
import { StdioServerPool, type StartedServer } from '../datasets/thinkingbox/stdio-server-pool.ts';
import type { LaunchSpec } from '../datasets/thinkingbox/server-launch.ts';
import { runTestCase } from '../datasets/thinkingbox/test-case-runner.ts';

/**
 * Output of dataset code is capped before it becomes a Node string (second review, finding 4: one 700 MB line
 * from test code crashed the rollout worker with `RangeError: Invalid string length`). Loud dataset code of our
 * own (test/fixtures/dataset-output) writes a 100 MB line or a flood of 1 KiB lines, from a tool server through
 * the real StdioServerPool and from test code through the real runner; each must come back as an
 * infrastructure error of the episode that names the server or test and the cap, with this process alive.
 */

const fixtures = path.join(repoRoot, 'test', 'fixtures', 'dataset-output');
const loudTests = path.join(fixtures, 'loud_tests.py');
const LINE_CAP = /16 MiB \(16777216 bytes\), the cap per /;
const TOTAL_CAP = /more than 64 MiB \(67108864 bytes\) of output, the cap per process/;
let sandbox: DatasetSandbox;
let pool: StdioServerPool;
// The largest resident size this process reached (printed for the docs; the caps are what bound it).
let peakRss = 0;
let sampler: NodeJS.Timeout;

before(() => {
  sandbox = new DatasetSandbox({ limits: { processes: 40, memoryMb: 1024, cpuSeconds: 30 }, log: () => undefined });
  pool = new StdioServerPool({ warm: 0, sandbox, pathPrefix: datasetPathPrefix() });
  sampler = setInterval(() => (peakRss = Math.max(peakRss, process.memoryUsage().rss)), 20);
});

after(async () => {
  clearInterval(sampler);
  await pool.close();
  console.log(`# peak rss of the test process: ${Math.round(peakRss / 1024 / 1024)} MiB`);
});

function startLoudServer(): Promise<StartedServer> {
  return pool.acquire('loud', {
    command: 'python',
    args: [path.join(fixtures, 'loud_server.py')],
    env: {},
    cwd: fixtures,
  } as LaunchSpec);
}

/** Grades an episode whose test is `function` of loud_tests.py, with `servers` as its tool servers. */
function grade(fn: string, servers: StartedServer[] = []) {
  const episode: EpisodeGrading = {
    task: { uid: `loud-${fn}`, test: { file: loudTests, function: fn, native: null } } as EpisodeGrading['task'],
    scenario: { name: 'loud' } as EpisodeGrading['scenario'],
    servers,
    initResult: {},
    directResponses: [],
    owner: 'output-caps-test',
    python: datasetPython(),
    nativeGrading: false,
    testTimeoutMs: 120_000,
    toolTimeoutMs: 120_000,
  };
  return gradeEpisode(episode, { lastAssistantText: '', toolCalls: [] });
}

/** A long text shortened for an assertion message (a failing check must not print 100 MB). */
const short = (text: string | undefined) => (text ?? '').slice(0, 300);

test('second review, finding 4: lines join across chunks, decode whole; a cap stops the reading once', async () => {
  const read = async (chunks: Buffer[], caps = { lineBytes: 8, totalBytes: 64, unit: 'line' }) => {
    const input = new PassThrough();
    const lines: string[] = [];
    const exceeded: string[] = [];
    readCappedLines(
      input,
      caps,
      (l) => lines.push(l),
      (r) => exceeded.push(r),
    );
    for (const c of chunks) input.write(c);
    input.end();
    await finished(input).catch(() => undefined); // a cap destroys the stream
    return { lines, exceeded };
  };
  const euro = Buffer.from('€'); // three bytes, split over two chunks below
  assert.deepEqual(await read([Buffer.from('ab'), Buffer.from('c\r\nd'), euro.subarray(0, 1), euro.subarray(1)]), {
    lines: ['abc', 'd€'],
    exceeded: [],
  });
  // A line of exactly the cap passes; one byte more stops the reading, before its newline arrives.
  assert.deepEqual(await read([Buffer.from('12345678\n1234'), Buffer.from('56789'), Buffer.from('\nmore\n')]), {
    lines: ['12345678'],
    exceeded: ['a line longer than 8 bytes, the cap per line'],
  });
  // 40 bytes, then 40 more: the second chunk passes the total of 60, none of its lines comes through.
  const flood = await read([Buffer.from('a\n'.repeat(20)), Buffer.from('b\n'.repeat(20))], {
    lineBytes: 8,
    totalBytes: 60,
    unit: 'line',
  });
  assert.deepEqual(flood, {
    lines: Array(20).fill('a'),
    exceeded: ['more than 60 bytes of output, the cap per process'],
  });
});

test('second review, finding 4: a 100 MB result line of test code is a graded infrastructure error', async () => {
  const report = await grade('test_long_result');
  assert.equal(report.outcome, 'infrastructure_error', short(report.cause));
  assert.ok(report.cause!.includes(`test ${loudTests}:test_long_result wrote a line longer than`), short(report.cause));
  assert.match(short(report.cause), LINE_CAP);
});

test('second review, finding 4: test code flooding its protocol with short lines stops at the total cap', async () => {
  const report = await grade('test_flood');
  assert.equal(report.outcome, 'infrastructure_error', short(report.cause));
  assert.ok(report.cause!.includes(`test ${loudTests}:test_flood wrote more than`), short(report.cause));
  assert.match(short(report.cause), TOTAL_CAP);
});

test('second review, finding 4: a 100 MB line printed by test code goes to its stderr tail only', async () => {
  // Control: what test code prints is not the protocol; a long print neither crashes nor fails the runner.
  const outcome = await runTestCase({
    file: loudTests,
    function: 'test_long_print',
    context: {
      effects: {},
      response: '',
      tool_calls: [],
      messages: [],
      init_result: {},
      session_id: 'output-caps-test',
      metadata: {},
      tool_direct_responses: [],
    },
    timeoutMs: 120_000,
    python: datasetPython(),
    sandbox,
  });
  assert.deepEqual([outcome.status, outcome.message], ['fail', 'printed']);
});

test("second review, finding 4: a tool server's 100 MB answer is an infrastructure error naming the cap", async () => {
  const server = await startLoudServer();
  try {
    const routes = new Map<string, ToolRoute>(
      ['echo', 'long_line'].map((name) => [
        name,
        { kind: 'server', server, spec: { name, description: name, inputSchema: {} }, endTurn: false },
      ]),
    );
    const { tools } = routedToolSession(routes, 120_000);
    assert.equal((await tools.callTool('echo', {})).text, 'ok'); // the server works
    const failed = await tools.callTool('long_line', {}).then(
      (r) => assert.fail(`the 100 MB answer came back (${r.text.length} characters)`),
      (err: Error) => err,
    );
    assert.equal(failed.name, 'InfrastructureError');
    assert.match(short(failed.message), /^tool server 'loud': long_line failed: .*a message longer than/);
    assert.match(short(failed.message), LINE_CAP);
    // The server was stopped: a later call fails with the same cause.
    await assert.rejects(tools.callTool('echo', {}), (err: Error) => LINE_CAP.test(short(err.message)));
  } finally {
    await server.stop();
  }
});

test('second review, finding 4: a tool server flooding short lines fails grading at the total cap', async () => {
  const server = await startLoudServer();
  try {
    // Its __reserved__geteffects writes 80 MiB of 1 KiB notifications before it answers.
    const report = await grade('test_long_print', [server]);
    assert.equal(report.outcome, 'infrastructure_error', short(report.cause));
    assert.match(short(report.cause), /^tool server 'loud': __reserved__geteffects failed: .*more than 64 MiB/);
    assert.match(short(report.cause), TOTAL_CAP);
  } finally {
    await server.stop();
  }
});
