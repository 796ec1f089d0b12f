import type { Socket } from 'node:net';
import type { Readable } from 'node:stream';

/**
 * Lines from the output of dataset code, with caps on the bytes of one line and of the whole output. A line is
 * held as raw chunks until its newline and decoded once, whole; one over the cap is never joined or decoded,
 * so a 700 MB line can no longer grow a string past V8's limit (`RangeError: Invalid string length`, which
 * crashed the worker). Over a cap the stream is destroyed and `onExceeded` says which cap it was, once; no
 * further line is delivered. Memory held: at most one line's cap plus one chunk; each byte is scanned once.
 *
 * Every channel from dataset code into the worker is read here: a tool server's MCP stdout
 * (capped-stdio-transport.ts), test code's protocol (test-case-runner.ts), a server template's stdout and the
 * header of each connection to its socket (server-template.ts, with a deadline and `connectionLimit` below).
 */

export interface OutputCaps {
  /** Bytes of one line, without its newline. */
  lineBytes: number;
  /** Bytes of the whole output of one process. */
  totalBytes: number;
  /** What a line is called in messages ('line', 'message'). */
  unit: string;
  /** Milliseconds until the reading is over a cap, unless it has ended or stopped by then; none by default. */
  timeoutMs?: number;
  /** Lines after which the reading stops and hands the stream back: paused, what followed the last line put
   * back for the next reader (a connection's header, then its payload); unlimited by default. */
  maxLines?: number;
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
  let lines = 0;
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  const stop = () => {
    stopped = true;
    clearTimeout(timer);
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
  const emit = (last: Buffer, rest?: Buffer) => {
    const whole = pending.length ? Buffer.concat([...pending, last]) : last;
    pending = [];
    pendingBytes = 0;
    if (++lines === caps.maxLines) {
      // The last line wanted: the stream goes back as it was, paused, with what followed that line.
      stop();
      input.off('data', onData);
      input.off('end', onEnd);
      input.pause();
      if (rest?.length) input.unshift(rest);
    }
    onLine(whole.toString('utf8').replace(/\r$/, ''));
  };

  const onData = (chunk: Buffer) => {
    if (stopped) return;
    total += chunk.length;
    if (total > caps.totalBytes)
      return exceed(`more than ${describeBytes(caps.totalBytes)} of output, the cap per process`);
    let start = 0;
    for (let newline = chunk.indexOf(10); newline !== -1; newline = chunk.indexOf(10, start)) {
      if (pendingBytes + newline - start > caps.lineBytes) return lineTooLong();
      emit(chunk.subarray(start, newline), chunk.subarray(newline + 1));
      start = newline + 1;
      if (stopped) return; // onLine stopped the reading
    }
    if (pendingBytes + chunk.length - start > caps.lineBytes) return lineTooLong();
    if (start < chunk.length) {
      pending.push(chunk.subarray(start));
      pendingBytes += chunk.length - start;
    }
  };
  // A last line without a newline still counts (as readline has it); errors show up as the process's exit.
  const onEnd = () => {
    if (!stopped && pendingBytes) emit(Buffer.alloc(0));
  };
  input.on('data', onData);
  input.on('end', onEnd);
  input.on('error', () => undefined);
  if (caps.timeoutMs !== undefined) {
    const ms = caps.timeoutMs;
    timer = setTimeout(() => exceed(`no complete ${caps.unit} within ${ms} ms`), ms).unref();
    input.once('close', () => clearTimeout(timer));
  }
  return stop;
}

/**
 * A count limit on the connections dataset code opens to one of the worker's sockets. `admit(socket)` counts a
 * connection and returns its release, or, while `max` are counted, destroys it at once (before anything is read
 * or allocated for it) and returns undefined. A connection counts until its close or its release (once it has
 * authenticated, say), whichever comes first.
 */
export function connectionLimit(max: number): (socket: Socket) => (() => void) | undefined {
  let counted = 0;
  return (socket) => {
    if (counted >= max) {
      socket.destroy();
      return undefined;
    }
    counted++;
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      counted--;
    };
    socket.once('close', release);
    return release;
  };
}
