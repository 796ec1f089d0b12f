import type { Readable } from 'node:stream';

/**
 * Lines from the output of dataset code, with caps on the bytes of one line and of the whole output. A line is
 * held as raw chunks until its newline and decoded once, whole; one over the cap is never joined or decoded,
 * so a 700 MB line can no longer grow a string past V8's limit (`RangeError: Invalid string length`, which
 * crashed the worker). Over a cap the stream is destroyed and `onExceeded` says which cap it was, once; no
 * further line is delivered. Memory held: at most one line's cap plus one chunk.
 */

export interface OutputCaps {
  /** Bytes of one line, without its newline. */
  lineBytes: number;
  /** Bytes of the whole output of one process. */
  totalBytes: number;
  /** What a line is called in messages ('line', 'message'). */
  unit: string;
}

export const MiB = 1024 * 1024;

/** A size as people read it and exactly: "16 MiB (16777216 bytes)", or "8 bytes". */
export function describeBytes(bytes: number): string {
  return bytes >= MiB && bytes % MiB === 0 ? `${bytes / MiB} MiB (${bytes} bytes)` : `${bytes} bytes`;
}

/**
 * Reads `input` as lines (a trailing "\r" dropped) into `onLine` until it ends or a cap is passed. Returns a
 * function that stops reading (no further line, no `onExceeded`).
 */
export function readCappedLines(
  input: Readable,
  caps: OutputCaps,
  onLine: (line: string) => void,
  onExceeded: (reason: string) => void,
): () => void {
  let pending: Buffer[] = [];
  let pendingBytes = 0;
  let total = 0;
  let stopped = false;
  const stop = () => {
    stopped = true;
    pending = [];
    pendingBytes = 0;
  };
  const exceed = (reason: string) => {
    stop();
    input.destroy();
    onExceeded(reason);
  };
  const lineTooLong = () =>
    exceed(`a ${caps.unit} longer than ${describeBytes(caps.lineBytes)}, the cap per ${caps.unit}`);
  const emit = (last: Buffer) => {
    const whole = pending.length ? Buffer.concat([...pending, last]) : last;
    pending = [];
    pendingBytes = 0;
    onLine(whole.toString('utf8').replace(/\r$/, ''));
  };

  input.on('data', (chunk: Buffer) => {
    if (stopped) return;
    total += chunk.length;
    if (total > caps.totalBytes)
      return exceed(`more than ${describeBytes(caps.totalBytes)} of output, the cap per process`);
    let start = 0;
    for (let newline = chunk.indexOf(10); newline !== -1; newline = chunk.indexOf(10, start)) {
      if (pendingBytes + newline - start > caps.lineBytes) return lineTooLong();
      emit(chunk.subarray(start, newline));
      start = newline + 1;
      if (stopped) return; // onLine stopped the reading
    }
    if (pendingBytes + chunk.length - start > caps.lineBytes) return lineTooLong();
    if (start < chunk.length) {
      pending.push(chunk.subarray(start));
      pendingBytes += chunk.length - start;
    }
  });
  // A last line without a newline still counts (as readline has it); errors show up as the process's exit.
  input.on('end', () => {
    if (!stopped && pendingBytes) emit(Buffer.alloc(0));
  });
  input.on('error', () => undefined);
  return stop;
}
