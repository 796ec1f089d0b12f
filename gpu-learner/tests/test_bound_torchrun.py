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
