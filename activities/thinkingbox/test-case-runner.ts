import { spawn, spawnSync } from 'node:child_process';
import path from 'node:path';
import readline from 'node:readline';
import { repoRoot } from '../../config/environment.ts';
import { BadInputError, errorMessage, InfrastructureError } from '../../core/errors.ts';
import { judgeSaysYes } from '../../core/judge-verdict.ts';
import type { Judge, JudgeVerdict } from '../judge-client.ts';
import { SHIM_DIR } from './dataset-environment.ts';

/**
 * Runs a ThinkingBox test function in a Python subprocess: returning None or a number = pass (the number is
 * the reward), AssertionError = fail, anything else = a system error (an infrastructure error here, never a failure).
 * The subprocess has no network: it runs in its own network namespace where `unshare` allows, and sockets
 * are disabled inside Python in any case. `judge(...)` calls in the test come back over stdout as requests
 * answered by our judge client. A test that does not finish within the timeout is killed.
 */

/** The `x` of a ThinkingBox test (thinkingbox.common.TestContext). */
export interface TestContext {
  effects: Record<string, unknown>;
  /** The last visible assistant text. */
  response: string;
  tool_calls: { tool_call: { name: string; arguments: Record<string, unknown> }; tool_response: string }[];
  messages: unknown[];
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
}

const helperDir = path.join(repoRoot, 'thinkingbox');
const pythonPath = [helperDir, SHIM_DIR].join(path.delimiter);

let isolation: string[] | undefined;
/** `unshare -rn` gives the test its own empty network namespace (also without root, where user namespaces are on). */
function networkIsolation(): string[] {
  isolation ??=
    spawnSync('unshare', ['-rn', 'true'], { stdio: 'ignore', timeout: 5000 }).status === 0 ? ['unshare', '-rn'] : [];
  return isolation;
}

export function runTestCase(request: TestCaseRequest): Promise<TestCaseResult> {
  const argv = [...networkIsolation(), request.python, '-m', 'tbt_thinkingbox.run_test_case'];
  const child = spawn(argv[0]!, argv.slice(1), {
    cwd: helperDir,
    stdio: ['pipe', 'pipe', 'pipe'],
    env: { PATH: process.env.PATH ?? '', PYTHONPATH: pythonPath, PYTHONDONTWRITEBYTECODE: '1', LANG: 'C.UTF-8' },
  });
  const verdicts: JudgeVerdict[] = [];
  let stderr = '';
  child.stderr.on('data', (c: Buffer) => {
    stderr = (stderr + c.toString('utf8')).slice(-4000);
  });
  const where = `${request.file}:${request.function}`;

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
          `test runner for ${where} exited (code ${code}) without a result${stderr ? `: ${stderr.trim().split('\n').slice(-3).join(' | ')}` : ''}`,
        ),
      ),
    );
    child.stdin.on('error', () => undefined); // a dead child shows up as 'close'

    const lines = readline.createInterface({ input: child.stdout });
    lines.on('line', (line) => {
      if (settled) return;
      let message: {
        type?: string;
        status?: string;
        message?: string;
        reward?: number | null;
        traceback?: string;
        messages?: { role: string; content: string }[];
        settings?: { temperature?: number; max_completion_tokens?: number; question?: string };
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
        if (!request.judge)
          return finish(new BadInputError(`test ${where} asks the judge (${what}) but no judge is configured`));
        request.judge.complete(message.messages ?? [], settings).then(
          (answer) => {
            if (settled) return;
            if (settings.question !== undefined)
              verdicts.push({
                question: settings.question,
                answer: answer.text,
                yes: judgeSaysYes(answer.text),
                usage: answer.usage,
              });
            child.stdin.write(`${JSON.stringify({ text: answer.text })}\n`);
          },
          (err) => {
            if (!settled) child.stdin.write(`${JSON.stringify({ error: errorMessage(err) })}\n`);
          },
        );
        return;
      }
      if (message.type === 'result') {
        if (message.status === 'pass' || message.status === 'fail')
          return finish(undefined, {
            status: message.status,
            message: message.message ?? '',
            ...(typeof message.reward === 'number' ? { reward: message.reward } : {}),
            verdicts,
          });
        return finish(
          new InfrastructureError(
            `test ${where} raised an error: ${message.message ?? ''}${message.traceback ? `\n${message.traceback.trim().split('\n').slice(-6).join('\n')}` : ''}`,
          ),
        );
      }
    });
    child.stdin.write(
      `${JSON.stringify({ file: request.file, function: request.function, context: request.context })}\n`,
    );
  });
}
