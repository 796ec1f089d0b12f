import { InfrastructureError } from '../../core/errors.ts';

/**
 * A task's test code raised an exception that is not an assertion (an IndexError on `tool_call_names[-1]`, a
 * broken import, sys.exit). Alone it is an infrastructure error, as the reference grades it; the grader grades
 * again once, and the same exception at the same place twice makes the episode a task error (outcome
 * `task_error`, sandbox/terminal-state-grader.ts).
 */
export class TestCodeError extends InfrastructureError {
  constructor(
    message: string,
    /** Where it was raised: the innermost frame in the test's own file, else the innermost frame. */
    readonly place: { file: string; line: number },
    /** The exception's class name and message, e.g. "IndexError: list index out of range". */
    readonly exception: string,
  ) {
    super(message);
  }

  /** Equal for the same exception class at the same place (messages may hold values that change). */
  get signature(): string {
    return `${this.exception.split(':')[0]}@${this.place.file}:${this.place.line}`;
  }
}
