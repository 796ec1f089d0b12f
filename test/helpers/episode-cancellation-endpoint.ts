import http from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A TEST DOUBLE of a slow OpenAI-compatible server: every request (chat completion, `/tokenize`, ...) is taken and
 * answered only after `delayMs`, with a chat.completion object in the real wire format. It notes when a client gives
 * up on a request before its answer, which is what an abandoned episode must do.
 */

export interface SlowRequest {
  path: string;
  /** When the client closed the request before it was answered. */
  abortedAt?: number;
}

export class SlowOpenAIEndpoint {
  readonly requests: SlowRequest[] = [];
  private readonly timers = new Set<NodeJS.Timeout>();
  private readonly server = http.createServer((req, res) => {
    const request: SlowRequest = { path: req.url ?? '' };
    this.requests.push(request);
    req.resume();
    const timer = setTimeout(() => {
      this.timers.delete(timer);
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(completion('Hello.')));
    }, this.delayMs);
    this.timers.add(timer);
    res.on('close', () => {
      if (!res.writableFinished) request.abortedAt = Date.now();
    });
  });

  constructor(private readonly delayMs: number) {}

  async start(): Promise<string> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/v1`;
  }

  async stop(): Promise<void> {
    for (const timer of this.timers) clearTimeout(timer);
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

function completion(content: string) {
  return {
    id: 'chatcmpl-slow',
    object: 'chat.completion',
    created: 0,
    model: 'slow',
    choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'stop', logprobs: null }],
    usage: { prompt_tokens: 10, completion_tokens: 2, total_tokens: 12 },
  };
}
