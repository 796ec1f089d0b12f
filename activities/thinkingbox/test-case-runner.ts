import { spawn, spawnSync } from 'node:child_process';
import path from 'node:path';
import readline from 'node:readline';
import { repoRoot } from '../../config/environment.ts';
import { BadInputError, errorMessage, InfrastructureError } from '../../core/errors.ts';
import type { Judge, JudgeVerdict } from '../judge-client.ts';

/**
 * Runs a ThinkingBox test function (REFERENCE.md section 6) in a Python subprocess: returning = pass,
 * AssertionError = fail, anything else = a system error (an infrastructure error here, never a failure).
 * The subprocess has no network: it runs in its own network namespace where `unshare` allows, and sockets
 * are disabled inside Python in any case. `judge(...)` calls in the test come back over stdout as requests
 * answered by our judge client. A test that does not finish within the timeout is killed.
 */

export interface TestContext {
  effects: Record<string, unknown>;
  response: string;
  tool_calls: { name: string; arguments: Record<string, unknown>; result: string; is_error: boolean }[];
}

export interface TestCaseResult {
  status: 'pass' | 'fail';
  message: string;
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
    env: { PATH: process.env.PATH ?? '', PYTHONPATH: helperDir, PYTHONDONTWRITEBYTECODE: '1', LANG: 'C.UTF-8' },
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
        traceback?: string;
        question?: string;
        text?: string;
      };
      try {
        message = JSON.parse(line);
      } catch {
        return finish(
          new InfrastructureError(`test runner for ${where} wrote a line that is not JSON: ${line.slice(0, 200)}`),
        );
      }
      if (message.type === 'judge') {
        const question = String(message.question ?? '');
        if (!request.judge)
          return finish(new BadInputError(`test ${where} asks the judge ('${question}') but no judge is configured`));
        request.judge.ask(question, message.text ?? request.context.response).then(
          (v) => {
            if (settled) return;
            verdicts.push(v);
            child.stdin.write(`${JSON.stringify({ yes: v.yes, answer: v.answer })}\n`);
          },
          (err) => {
            if (!settled) child.stdin.write(`${JSON.stringify({ error: errorMessage(err) })}\n`);
          },
        );
        return;
      }
      if (message.type === 'result') {
        if (message.status === 'pass' || message.status === 'fail')
          return finish(undefined, { status: message.status, message: message.message ?? '', verdicts });
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
