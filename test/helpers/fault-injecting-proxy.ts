import http from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * An HTTP proxy in front of the REAL policy server that fails a fixed fraction of generation requests with
 * HTTP 500 (deterministically: every n-th), to inject infrastructure errors into real episodes.
 */
export class FaultInjectingProxy {
  private server?: http.Server;
  requests = 0;
  failed = 0;

  constructor(
    private readonly target: string,
    private readonly failEvery: number,
    private readonly failPaths = ['/v1/completions', '/v1/chat/completions'],
  ) {}

  async start(): Promise<string> {
    const target = new URL(this.target);
    this.server = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const generation = this.failPaths.includes(req.url ?? '');
        if (generation && ++this.requests % this.failEvery === 0) {
          this.failed += 1;
          res
            .writeHead(500, { 'content-type': 'application/json' })
            .end(JSON.stringify({ error: { message: 'injected fault', type: 'server_error' } }));
          return;
        }
        const upstream = http.request(
          { host: target.hostname, port: target.port, path: req.url, method: req.method, headers: req.headers },
          (up) => {
            res.writeHead(up.statusCode ?? 502, up.headers);
            up.pipe(res);
          },
        );
        upstream.on('error', (err) => res.writeHead(502).end(String(err)));
        upstream.end(Buffer.concat(chunks));
      });
    });
    await new Promise<void>((r) => this.server!.listen(0, '127.0.0.1', r));
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  async stop(): Promise<void> {
    this.server?.closeAllConnections();
    await new Promise<void>((r) => (this.server ? this.server.close(() => r()) : r()));
  }
}
