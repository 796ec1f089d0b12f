import http from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A TEST DOUBLE of an OpenAI-compatible chat endpoint (stands in for a paid LLM API we cannot run here).
 * It speaks the real wire protocol: POST /v1/chat/completions with a JSON body, answered with a
 * chat.completion object (or an HTTP error), so the production `openai` client is exercised unchanged.
 */

export interface ChatRequestBody {
  model: string;
  messages: { role: string; content: string }[];
  temperature?: number;
  [k: string]: unknown;
}
export type DoubleReply =
  | string
  | { status: number; body?: unknown }
  | { content: string; finishReason?: string; completionTokens?: number; delayMs?: number };

export class OpenAIWireProtocolDouble {
  readonly requests: ChatRequestBody[] = [];
  private server?: http.Server;

  constructor(private readonly reply: (body: ChatRequestBody, index: number) => DoubleReply) {}

  async start(): Promise<string> {
    this.server = http.createServer((req, res) => {
      let raw = '';
      req.on('data', (chunk: Buffer) => (raw += chunk.toString()));
      req.on('end', () => {
        if (req.method !== 'POST' || !req.url?.endsWith('/chat/completions')) {
          res
            .writeHead(404, { 'content-type': 'application/json' })
            .end(JSON.stringify({ error: { message: 'not found' } }));
          return;
        }
        const body = JSON.parse(raw) as ChatRequestBody;
        const r = this.reply(body, this.requests.push(body) - 1);
        if (typeof r !== 'string' && 'status' in r) {
          res
            .writeHead(r.status, { 'content-type': 'application/json' })
            .end(JSON.stringify(r.body ?? { error: { message: 'scripted failure', type: 'server_error' } }));
          return;
        }
        const reply: { content: string; finishReason?: string; completionTokens?: number; delayMs?: number } =
          typeof r === 'string' ? { content: r } : { ...r };
        // Like a real server, never generate more than max_tokens: cut and report finish_reason "length".
        const wanted = reply.completionTokens ?? Math.max(1, Math.ceil(reply.content.length / 4));
        const cap = typeof body.max_tokens === 'number' ? body.max_tokens : Infinity;
        const completionTokens = Math.min(wanted, cap);
        if (wanted > cap) reply.finishReason = 'length';
        const send = () =>
          res.writeHead(200, { 'content-type': 'application/json' }).end(
            JSON.stringify({
              id: `chatcmpl-double-${this.requests.length}`,
              object: 'chat.completion',
              created: 0,
              model: body.model,
              choices: [
                {
                  index: 0,
                  message: { role: 'assistant', content: reply.content },
                  finish_reason: reply.finishReason ?? 'stop',
                  logprobs: null,
                },
              ],
              usage: { prompt_tokens: 10, completion_tokens: completionTokens, total_tokens: 10 + completionTokens },
            }),
          );
        if (reply.delayMs) setTimeout(send, reply.delayMs);
        else send();
      });
    });
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/v1`;
  }

  async stop(): Promise<void> {
    this.server?.closeAllConnections();
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }
}
