"""third review, finding 9: a one-node learner's torchrun stores (and its ranks' gloo sockets) listen on loopback."""

import subprocess
import sys
from pathlib import Path

from learner_support import GPU_LEARNER, learner_env

PROBE = Path(__file__).with_name("listen_probe.py")
LOOPBACK_HEX = ("0100007F:", "00000000000000000000000001000000:", "0000000000000000FFFF00000100007F:")


def listening(launcher: list[str]) -> list[str]:
    out = subprocess.run(
        [sys.executable, *launcher, "--standalone", "--nproc-per-node", "2", str(PROBE)],
        env=learner_env(None), cwd=str(GPU_LEARNER), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return [line.split()[1] for line in out.stdout.splitlines() if line.startswith("LISTEN ")]


def test_third_review_finding_9_one_node_stores_listen_on_loopback_only() -> None:
    sockets = listening(["-m", "tbt_gpu.learner.bound_torchrun"])
    assert sockets, "the probe saw no listening socket: it cannot tell where the store listens"
    strangers = [s for s in sockets if not s.startswith(LOOPBACK_HEX)]
    assert not strangers, f"listening beyond loopback (hex /proc/net addresses): {strangers} of {sockets}"


def test_one_node_ranks_reach_the_store_on_loopback_whatever_the_host_name(monkeypatch) -> None:
    """In a container the host name resolves to the container's address, where the loopback-bound store is not:
    torchrun is told the node's address is loopback (found by test:deploy, ranks retried for 5 minutes)."""
    import torch.distributed.run

    from tbt_gpu.learner import bound_torchrun

    seen: list[list[str]] = []
    monkeypatch.setattr(torch.distributed.run, "main", lambda argv: seen.append(list(argv)))
    monkeypatch.setattr(bound_torchrun.dist, "TCPStore", bound_torchrun.dist.TCPStore)  # restored afterwards
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "lo")
    bound_torchrun.main(["--standalone", "--nproc-per-node=1", "-m", "tbt_gpu.learner"])
    bound_torchrun.main(["--standalone", "--local-addr=10.0.0.5", "-m", "tbt_gpu.learner"])
    bound_torchrun.main(["--nnodes=2", "--rdzv-endpoint=node0:29400", "-m", "tbt_gpu.learner"])
    assert seen[0][:2] == ["--local-addr", "127.0.0.1"], seen[0]
    assert seen[1] == ["--standalone", "--local-addr=10.0.0.5", "-m", "tbt_gpu.learner"], "the operator's choice stays"
    assert "--local-addr" not in seen[2], "several nodes: torchrun runs unchanged"
