"""Inside the dataset sandbox: make chosen loopback TCP ports reach host services, then run the tool server.

Usage: python -I loopback_forward.py PORT=UNIX_SOCKET [...] -- COMMAND [ARGS...]

The sandbox has its own, empty network namespace, so 127.0.0.1 inside is not the host's. For each PORT this
listens on 127.0.0.1:PORT inside and relays every connection to UNIX_SOCKET, a socket the worker serves
outside and relays to the one host address it was configured with (a dataset's search service); nothing
else on the host is reachable. The listening sockets are bound before the command starts, so its first
connection cannot be refused; the relay runs in a forked child and dies with the sandbox.
Standard library only (run with -I so nothing of the dataset's environment is imported).
"""

from __future__ import annotations

import os
import socket
import sys
import threading


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for s, how in ((sink, socket.SHUT_WR), (source, socket.SHUT_RD)):
            try:
                s.shutdown(how)
            except OSError:
                pass


def _relay(client: socket.socket, path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError:
        client.close()
        upstream.close()
        return
    back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
    back.start()
    _pump(client, upstream)
    back.join()
    client.close()
    upstream.close()


def serve_forward(listener: socket.socket, path: str) -> None:
    while True:
        client, _ = listener.accept()
        threading.Thread(target=_relay, args=(client, path), daemon=True).start()


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print("usage: loopback_forward.py PORT=UNIX_SOCKET ... -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    split = argv.index("--")
    forwards, command = argv[:split], argv[split + 1 :]
    listeners = []
    for spec in forwards:
        port, _, path = spec.partition("=")
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", int(port)))
        listener.listen(64)
        listeners.append((listener, path))
    if listeners and os.fork() == 0:
        for listener, path in listeners[1:]:
            threading.Thread(target=serve_forward, args=(listener, path), daemon=True).start()
        serve_forward(*listeners[0])
        os._exit(0)
    for listener, _ in listeners:
        listener.close()
    os.execvp(command[0], command)
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
