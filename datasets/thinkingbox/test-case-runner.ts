import { spawn } from 'node:child_process';
import path from 'node:path';
import type { JudgeMode } from '../../config/episode-config.ts';
import { BadInputError, errorMessage, InfrastructureError } from '../../core/errors.ts';
import type { Judge, JudgeCompletion, JudgeVerdict } from '../../rollout/judge-client.ts';
import { MiB, readCappedLines, type OutputCaps } from './capped-lines.ts';
import { SHIM_DIR } from './dataset-environment.ts';
import { datasetSandbox, helperPackageDir, type DatasetSandbox } from './dataset-sandbox.ts';
import { unchangedPath } from './dataset-paths.ts';
import { defaultJudgeLimits, limitedJudge, type JudgeLimits } from './judge-limits.ts';
import { TestCodeError } from './test-code-error.ts';

/**
 * Runs a ThinkingBox test function in a Python subprocess: returning None or a number = pass (the number is
 * the reward; True/False are 1/0, as in the reference), AssertionError = fail, anything else (a reward outside
 * [0, 1] included) = a system error (an infrastructure error here, never a failure; raised by the test's own code
 * it is a TestCodeError, which the grader makes a task error when it repeats). The subprocess runs in the
 * dataset sandbox (dataset-sandbox.ts: no network, no secrets, read-only filesystem but a scratch folder,
 * limits); our `thinkingbox.common` shim (thinkingbox/shim) is on its PYTHONPATH and mounted read-only.
 * `judge(...)` calls in the test come back over stdout as requests answered by our judge client; each yes/no
 * decision the test's judge reads from an answer comes back as a verdict. A test that does not finish within
 * the timeout is killed with every process it started (the sandbox's pid namespace goes with it), and so is
 * one that writes more than TEST_OUTPUT_CAPS. Judge calls are held to `judgeLimits` (judge-limits.ts): one at a
 * time, answered in order, at most so many per test case; a test that asked for more is an infrastructure error.
 */

/**
 * Caps on the protocol output of test code (what it prints goes to stderr, of which only a tail is kept). A line
 * is held whole before it is parsed: without a cap one 700 MB assertion message grew a string past V8's limit
 * and crashed the worker. 16 MiB holds any real result or judge request; a test writes a few such lines, so
 * 64 MiB in all bounds the time a flood of short lines can take.
 */
export const TEST_OUTPUT_CAPS: OutputCaps = { lineBytes: 16 * MiB, totalBytes: 64 * MiB, unit: 'line' };

/** Bytes of stderr kept for error messages (its tail). */
const STDERR_KEPT = 4000;

/** A tool call as the reference framework serialises it (`T` names the message type; `id` pairs the response). */
export interface ReferenceToolCall {
  T: 'ToolCall';
  name: string;
  arguments: Record<string, unknown>;
  id: string;
  metadata: Record<string, unknown>;
}

export interface ReferenceToolResponse {
  T: 'ToolResponse';
  name: string;
  content: string;
  id: string;
  metadata: Record<string, unknown>;
}

/** A conversation message in the reference's serialised form; assistant text is tagged think, text or direct. */
export type ReferenceMessage =
  | { T: 'Text'; role: 'system' | 'user' | 'assistant'; content: string; metadata: Record<string, unknown> }
  | { T: 'ParallelToolCall'; tool_calls: ReferenceToolCall[]; metadata: Record<string, unknown> }
  | ReferenceToolResponse;

/** The `x` of a ThinkingBox test (thinkingbox.common.TestContext), typed on the Python side from these forms. */
export interface TestContext {
  effects: Record<string, unknown>;
  /** The last visible assistant text. */
  response: string;
  tool_calls: { tool_call: ReferenceToolCall; tool_response: ReferenceToolResponse }[];
  messages: ReferenceMessage[];
  init_result: Record<string, unknown>;
  session_id: string;
  metadata: Record<string, unknown>;
  tool_direct_responses: string[];
}

export interface TestCaseResult {
  status: 'pass' | 'fail';
  message: string;
  /** What the test returned when it returned a number (else the reward is 1 on a pass). */
  reward?: number;
  verdicts: JudgeVerdict[];
}

export interface TestCaseRequest {
  file: string;
  function: string;
  context: TestContext;
  judge?: Judge;
  timeoutMs: number;
  /** Python to run the test with (the dataset environment if set up). */
  python: string;
  /** Folders the test may read besides its own file's folder (e.g. the dataset). */
  readOnly?: string[];
  /** Default: this process's sandbox (which refuses to run without isolation). */
  sandbox?: DatasetSandbox;
  /** The reference's judge type: "legacy" (default) yes/no prompts, or "motivation" (JSON with a reason). */
  judgeType?: JudgeMode;
  /** What the test may ask of the judge; default: episode.thinkingbox's defaults. */
  judgeLimits?: JudgeLimits;
  /** Where refusals and clamped settings are logged (default: stderr). */
  log?: (line: string) => void;
}

/** Error types of the runner that are not the test code's: the judge's outage and our own malformed request. */
const NOT_TEST_CODE = new Set(['JudgeUnavailable', 'BadRequest']);

/** The runner's error result as a TestCodeError when the test's own code raised it (the file relative to `file`'s). */
function testCodeError(
  text: string,
  message: { error_type?: string; message?: string; location?: { file?: unknown; line?: unknown } },
  file: string,
): TestCodeError | undefined {
  const { error_type: type, location } = message;
  if (!type || NOT_TEST_CODE.has(type) || typeof location?.file !== 'string' || typeof location.line !== 'number')
    return undefined;
  const own = path.resolve(location.file) === path.resolve(file);
  return new TestCodeError(text, { file: own ? file : location.file, line: location.line }, message.message ?? type);
}

export function runTestCase(request: TestCaseRequest): Promise<TestCaseResult> {
  // The importer checked this path; a link put into the dataset since would mount another folder.
  unchangedPath(path.resolve(request.file), `test ${request.file}`);
  const sandboxed = (request.sandbox ?? datasetSandbox()).prepare({
    command: request.python,
    args: ['-m', 'tbt_thinkingbox.run_test_case'],
    env: { PYTHONPATH: [helperPackageDir, SHIM_DIR].join(path.delimiter) },
    cwd: helperPackageDir,
    readOnly: [path.dirname(path.resolve(request.file)), SHIM_DIR, ...(request.readOnly ?? [])],
    pathPrefix: path.isAbsolute(request.python) ? [path.dirname(request.python)] : [],
    label: 'test',
  });
  const child = spawn(sandboxed.command, sandboxed.args, {
    cwd: sandboxed.cwd,
    stdio: ['pipe', 'pipe', 'pipe'],
    env: sandboxed.env,
  });
  child.on('close', () => sandboxed.dispose());
  const verdicts: JudgeVerdict[] = [];
  let lastAnswer: JudgeCompletion | undefined;
  let stderr = '';
  child.stderr.on('data', (c: Buffer) => {
    // Only each chunk's tail is decoded: a long printed line never becomes a long string.
    stderr = (stderr + c.subarray(-STDERR_KEPT).toString('utf8')).slice(-STDERR_KEPT);
  });
  const where = `${request.file}:${request.function}`;
  const judge =
    request.judge &&
    limitedJudge(request.judge, request.judgeLimits ?? defaultJudgeLimits(), `test ${where}`, request.log);

  return new Promise<TestCaseResult>((resolve, reject) => {
    let settled = false;
    const finish = (err: Error | undefined, result?: TestCaseResult) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      child.kill('SIGKILL');
      if (err) reject(err);
      else resolve(result!);
    };
    const timer = setTimeout(
      () => finish(new InfrastructureError(`test ${where} did not finish within ${request.timeoutMs} ms`)),
      request.timeoutMs,
    );
    child.on('error', (err) =>
      finish(new InfrastructureError(`cannot run test ${where}: ${errorMessage(err)}`, { cause: err })),
    );
    child.on('close', (code) =>
      finish(
        new InfrastructureError(
          `test runner for ${where} exited (code ${code}) without a ` +
            `result${stderr ? `: ${stderr.trim().split('\n').slice(-3).join(' | ')}` : ''}`,
        ),
      ),
    );
    child.stdin.on('error', () => undefined); // a dead child shows up as 'close'

    const onLine = (line: string) => {
      if (settled) return;
      let message: {
        type?: string;
        status?: string;
        message?: string;
        reward?: number | null;
        traceback?: string;
        error_type?: string;
        location?: { file?: unknown; line?: unknown };
        messages?: { role: string; content: string }[];
        settings?: { temperature?: number; max_completion_tokens?: number; question?: string };
        question?: string;
        yes?: boolean;
      };
      try {
        message = JSON.parse(line);
      } catch {
        return finish(
          new InfrastructureError(`test runner for ${where} wrote a line that is not JSON: ${line.slice(0, 200)}`),
        );
      }
      if (message.type === 'judge') {
        const settings = message.settings ?? {};
        const what = settings.question ?? 'a judge completion';
        if (!judge)
          return finish(new BadInputError(`test ${where} asks the judge (${what}) but no judge is configured`));
        judge.complete(message.messages ?? [], settings).then(
          (answer) => {
            if (settled) return;
            lastAnswer = answer;
            child.stdin.write(`${JSON.stringify({ text: answer.text })}\n`);
          },
          (err) => {
            if (!settled) child.stdin.write(`${JSON.stringify({ error: errorMessage(err) })}\n`);
          },
        );
        return;
      }
      if (message.type === 'verdict') {
        // The test's own reading of the answer just given (its parser: yes/no, or JSON with a motivation).
        if (lastAnswer && typeof message.question === 'string' && typeof message.yes === 'boolean')
          verdicts.push({
            question: message.question,
            answer: lastAnswer.text,
            yes: message.yes,
            usage: lastAnswer.usage,
          });
        lastAnswer = undefined;
        return;
      }
      if (message.type === 'result') {
        // A test refused a judge call grades on answers it did not get, whatever it did with the refusal.
        const refused = judge?.refused();
        if (refused) return finish(new InfrastructureError(refused));
        if (message.status === 'pass' || message.status === 'fail')
          return finish(undefined, {
            status: message.status,
            message: message.message ?? '',
            ...(typeof message.reward === 'number' ? { reward: message.reward } : {}),
            verdicts,
          });
        const text =
          `test ${where} raised an error: ${message.message ?? ''}` +
          `${message.traceback ? `\n${message.traceback.trim().split('\n').slice(-6).join('\n')}` : ''}`;
        return finish(testCodeError(text, message, request.file) ?? new InfrastructureError(text));
      }
    };
    readCappedLines(child.stdout, TEST_OUTPUT_CAPS, onLine, (reason) =>
      finish(new InfrastructureError(`test ${where} wrote ${reason}; it was stopped`)),
    );
    const { file, function: fn, context, judgeType } = request;
    child.stdin.write(
      `${JSON.stringify({ file, function: fn, context, ...(judgeType ? { judge_type: judgeType } : {}) })}\n`,
    );
  });
}
