/**
 * A TCP proxy the fault suite owns in front of a policy server, to take the endpoint "down" for minutes and bring
 * it back exactly on time: while closed it listens nowhere (new connections are refused, as from a stopped vLLM)
 * and its open connections are cut. Killing the server itself would not do: the GPU worker starts a new one at the
 * campaign's next stage, so the outage would last until then, not for the minutes asked.
 */
import net from 'node:net';

export class EndpointProxy {
  private server: net.Server | undefined;
  private readonly sockets = new Set<net.Socket>();

  constructor(
    private readonly target: { host: string; port: number },
    readonly port: number,
  ) {}

  get isOpen(): boolean {
    return this.server !== undefined;
  }

  async open(): Promise<void> {
    if (this.server) return;
    const server = net.createServer((client) => {
      const upstream = net.connect(this.target);
      for (const s of [client, upstream]) {
        this.sockets.add(s);
        s.once('close', () => this.sockets.delete(s));
        s.on('error', () => undefined); // either side going away ends both; nothing to report
      }
      client.pipe(upstream).pipe(client);
      client.once('close', () => upstream.destroy());
      upstream.once('close', () => client.destroy());
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.port, '127.0.0.1', () => resolve());
    });
    this.server = server;
  }

  /** Stops listening and cuts every connection in flight. */
  async close(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    for (const s of this.sockets) s.destroy();
    this.sockets.clear();
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}
