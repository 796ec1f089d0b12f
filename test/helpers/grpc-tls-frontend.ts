import http2 from 'node:http2';
import type { AddressInfo } from 'node:net';

/**
 * A TLS (optionally mTLS) gRPC frontend in front of the plaintext local Temporal dev server, which cannot serve
 * TLS itself: an HTTP/2 reverse proxy that terminates TLS, keeps every request's headers (to check what a client
 * sent, e.g. its API key) and forwards each stream, trailers included, to the dev server.
 */
export interface TlsFrontend {
  address: string;
  requestHeaders: http2.IncomingHttpHeaders[];
  close(): Promise<void>;
}

export async function startTlsFrontend(opts: {
  upstream: string;
  key: Buffer;
  cert: Buffer;
  /** Set to require client certificates signed by this CA (mTLS). */
  clientCa?: Buffer;
}): Promise<TlsFrontend> {
  const upstream = http2.connect(`http://${opts.upstream}`);
  upstream.on('error', () => {});
  const requestHeaders: http2.IncomingHttpHeaders[] = [];
  const server = http2.createSecureServer({
    key: opts.key,
    cert: opts.cert,
    ALPNProtocols: ['h2'],
    ...(opts.clientCa ? { ca: opts.clientCa, requestCert: true, rejectUnauthorized: true } : {}),
  });
  server.on('stream', (stream, headers) => {
    requestHeaders.push(headers);
    const forwarded: http2.OutgoingHttpHeaders = {};
    for (const [name, value] of Object.entries(headers))
      if (!name.startsWith(':') || name === ':method' || name === ':path') forwarded[name] = value;
    const request = upstream.request(forwarded);
    let trailers: http2.IncomingHttpHeaders = {};
    request.on('response', (response) => {
      const { ':status': status, ...rest } = response;
      // A trailers-only answer (a gRPC error) ends in its headers; anything else sends its trailers last.
      const trailersOnly = 'grpc-status' in rest;
      stream.respond({ ':status': status, ...rest }, { endStream: trailersOnly, waitForTrailers: !trailersOnly });
    });
    request.on('trailers', (t) => (trailers = t));
    stream.on('wantTrailers', () => stream.sendTrailers(trailers));
    request.on('data', (chunk: Buffer) => stream.write(chunk));
    request.on('end', () => {
      if (!stream.closed && stream.headersSent) stream.end();
    });
    stream.on('data', (chunk: Buffer) => request.write(chunk));
    stream.on('end', () => request.end());
    const abort = () => {
      if (!request.closed) request.close(http2.constants.NGHTTP2_CANCEL);
      if (!stream.closed) stream.close(http2.constants.NGHTTP2_CANCEL);
    };
    stream.on('error', abort);
    request.on('error', abort);
    stream.on('close', () => request.closed || request.close(http2.constants.NGHTTP2_CANCEL));
  });
  const sessions = new Set<http2.ServerHttp2Session>();
  server.on('session', (session) => {
    sessions.add(session);
    session.on('close', () => sessions.delete(session));
  });
  server.on('sessionError', () => {});
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    address: `127.0.0.1:${port}`,
    requestHeaders,
    close: async () => {
      upstream.close();
      for (const session of sessions) session.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
