"""torchrun whose stores listen on loopback only when the learner runs on one node.

    python -m tbt_gpu.learner.bound_torchrun TORCHRUN-ARGS...

torch's `TCPStore` listens on every interface whatever host it is given (`TCPStore("127.0.0.1", 0,
is_master=True)` listens on `::`, with either backend), and a store has no authentication: torchrun's
rendezvous store, which lives as long as the learner, would answer any host that reaches this one. Given a
socket that already listens (`master_listen_fd`, libuv backend) it serves there only, as the weight transport's
store does. With `--standalone` this launcher makes every store torchrun's agent hosts such a one on
127.0.0.1 and pins gloo's and NCCL's bootstrap sockets to `lo` (unless the operator chose an interface), then
runs torchrun itself. Several nodes must reach node 0's stores, so there torchrun runs unchanged and the
cluster's network is the boundary (docs/security.md, third review, finding 9).
"""

from __future__ import annotations

import os
import socket
import sys
from typing import Any

import torch.distributed as dist

_PlainTCPStore: Any = dist.TCPStore  # pyright: ignore[reportPrivateImportUsage] - exported at runtime


def listening_socket(host: str, port: int) -> socket.socket:
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    listener = socket.socket(family, kind, proto)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(address)
    listener.listen(socket.SOMAXCONN)
    return listener


def bound_store_class(host: str) -> Any:
    """A TCPStore whose server listens on `host` only; clients and explicit listen sockets are left as they are."""

    class BoundTCPStore(_PlainTCPStore):  # pyright: ignore[reportUntypedBaseClass]
        def __init__(self, host_name: str, port: int, *args: Any, **kwargs: Any) -> None:
            is_master = kwargs.get("is_master", args[1] if len(args) > 1 else False)
            if is_master and kwargs.get("master_listen_fd") is None and kwargs.get("use_libuv", True):
                listener = listening_socket(host, port)
                port = listener.getsockname()[1]
                kwargs["master_listen_fd"] = listener.detach()  # the store owns the descriptor from here
            super().__init__(host_name, port, *args, **kwargs)

    return BoundTCPStore


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--standalone" in argv:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
        # Before torchrun's modules import the name: they bind `TCPStore` at import (and look it up on `dist` later).
        dist.TCPStore = bound_store_class("127.0.0.1")  # pyright: ignore[reportPrivateImportUsage]
        # The ranks reach the agent's store at the node's address, by default its host name, which resolves to the
        # container's network address in a container (compose's gpu-worker): nothing listens there, and the ranks
        # retried for 5 minutes. On one node that address is loopback, where the store listens.
        if not any(a.split("=")[0] in ("--local-addr", "--local_addr") for a in argv):
            argv = ["--local-addr", "127.0.0.1", *argv]
    from torch.distributed.run import main as torchrun

    torchrun(argv)


if __name__ == "__main__":
    main()
