import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import net from 'node:net';
import readline from 'node:readline';
import { test } from 'node:test';
import { connectTrustedService } from '../../datasets/thinkingbox/search-service-check.ts';

/**
 * The loopback relay connects sandboxed tool servers to the search service on the host. A listener of another
 * local user on that address must get nothing: not the query, not a connection it can answer.
 */

// Prints its port, then per connection the number of bytes it received (answering each read).
const listener = `
import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(); print(s.getsockname()[1], flush=True)
while True:
    c, _ = s.accept(); got = 0
    while True:
        try:
            d = c.recv(65536)
        except ConnectionResetError:
            break
        if not d:
            break
        got += len(d); c.sendall(b"answer")
    print("received", got, flush=True); c.close()
`;

/** Sends a query through `socket`; resolves with what came back once the connection is closed. */
async function ask(socket: net.Socket): Promise<{ answer: string; error?: string }> {
  let answer = '';
  let error: string | undefined;
  socket.on('data', (d: Buffer) => {
    answer += d.toString();
    socket.end();
  });
  socket.on('error', (err) => (error = err.message));
  socket.write('query');
  await new Promise((resolve) => socket.once('close', resolve)); // events.once would reject on 'error'
  return { answer, error };
}

test('second review, finding 7 (search service): a listener of another user gets no relayed byte', async (t) => {
  if (process.getuid?.() !== 0) return t.skip('needs root to start a listener as another user');
  const other = spawn('/usr/bin/setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', '/usr/bin/python3',
    '-c', listener], { stdio: ['ignore', 'pipe', 'inherit'] }); // prettier-ignore
  const lines = readline.createInterface({ input: other.stdout! })[Symbol.asyncIterator]();
  try {
    const port = Number((await lines.next()).value);
    const refusals: string[] = [];
    const result = await ask(connectTrustedService('127.0.0.1', port, (reason) => refusals.push(reason)));
    assert.equal((await lines.next()).value, 'received 0', "the other user's listener received the query");
    assert.equal(result.answer, '', 'its answer reached the sandbox');
    assert.match(refusals.join(), /served by uid 65534, not by this worker's user or root/);
    assert.match(result.error ?? '', /search service refused/);
  } finally {
    other.kill('SIGKILL');
  }
});

test("second review, finding 7 (search service): a service of the worker's own user is relayed", async () => {
  const server = net.createServer((c) => c.on('data', () => c.end('answer')));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    const port = (server.address() as net.AddressInfo).port;
    const refusals: string[] = [];
    const result = await ask(connectTrustedService('127.0.0.1', port, (reason) => refusals.push(reason)));
    assert.deepEqual(refusals, []);
    assert.equal(result.answer, 'answer');
  } finally {
    server.close();
  }
});
