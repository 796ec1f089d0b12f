"""Multi-node launch plan: the exact torchrun command per node and the resolved hyperparameters.

    python -m tbt_gpu.learner.launch --nodes 3 --gpus-per-node 8 --rdzv-endpoint HOST:29400 --rdzv-id ID \
        --config F --dry-run

A dry run: it prints and starts nothing (it does not even import torch). One node: `torchrun --standalone`.
Several: a c10d rendezvous at node 0's `--rdzv-endpoint`, every node's command passing its `--node-rank` to the
learner too (torchrun's c10d rendezvous does not number nodes by it; the learner renumbers ranks node-major, so
rank 0 and its control endpoint are on node 0). The GPU worker builds the same commands
(learner-control/learner-launch.ts; a test keeps the two equal).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from dataclasses import dataclass

from .config import LearnerConfig


@dataclass(kw_only=True, slots=True, frozen=True)
class Topology:
    nodes: int
    """Machines taking part."""
    gpus_per_node: int
    """Ranks (one per GPU) on each machine."""
    rdzv_endpoint: str | None = None
    """host:port of the c10d rendezvous on node 0, reachable from every node; None only for one node."""
    rdzv_id: str = "tbt-learner"
    """Rendezvous (job) id: the campaign's, so two campaigns never join each other's rendezvous."""

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise ValueError(f"nodes: must be >= 1, got {self.nodes}")
        if self.gpus_per_node < 1:
            raise ValueError(f"gpus_per_node: must be >= 1, got {self.gpus_per_node}")
        if self.nodes > 1 and not self.rdzv_endpoint:
            raise ValueError(f"rdzv_endpoint: required when nodes > 1 ({self.nodes})")

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node


def node_argv(topology: Topology, node_rank: int, config_path: str, *, resume: bool) -> list[str]:
    """torchrun's arguments for one node (without the torchrun executable itself)."""
    if topology.nodes == 1:
        argv = ["--standalone", f"--nproc-per-node={topology.gpus_per_node}", "-m", "tbt_gpu.learner"]
        argv += ["--config", config_path]
    else:
        argv = [
            "--nnodes", str(topology.nodes),
            "--nproc-per-node", str(topology.gpus_per_node),
            "--node-rank", str(node_rank),
            "--rdzv-backend", "c10d",
            "--rdzv-endpoint", str(topology.rdzv_endpoint),
            "--rdzv-id", topology.rdzv_id,
            "-m", "tbt_gpu.learner",
            "--config", config_path,
            "--node-rank", str(node_rank),
        ]  # fmt: skip
    if resume:
        argv.append("--resume")
    return argv


def node_commands(topology: Topology, config_path: str, *, resume: bool) -> list[str]:
    """What the GPU worker runs per node: torchrun through bound_torchrun (loopback-only stores on one node)."""
    launcher = ["python", "-m", "tbt_gpu.learner.bound_torchrun"]
    return [shlex.join([*launcher, *node_argv(topology, r, config_path, resume=resume)]) for r in range(topology.nodes)]


def plan(topology: Topology, config_path: str, *, resume: bool, shown_path: str | None = None) -> str:
    cfg = LearnerConfig.load(config_path)
    config_path = shown_path or config_path
    resolved = cfg.resolve(cuda_available=True, world_size=topology.world_size)
    lines = [
        f"# learner launch plan: {topology.nodes} node(s) x {topology.gpus_per_node} GPU(s) = world size "
        f"{topology.world_size}, "
        + (f"c10d rendezvous at {topology.rdzv_endpoint}" if topology.nodes > 1 else "standalone (one node)"),
        f"# every node needs the repo's gpu-learner/ on PYTHONPATH, {config_path} at the same path, the model at "
        f"{resolved.model.path}, and checkpoint.dir {resolved.checkpoint.dir} on a shared filesystem",
        f"# the control endpoint runs on node 0 (rank 0) at "
        f"{resolved.control.host}:{resolved.control.port or '<ephemeral>'}; "
        f"its port is written to {resolved.checkpoint.dir}/control.json",
    ]
    if resolved.distributed.device != "cuda":
        lines.append(
            f"# warning: distributed.device is {resolved.distributed.device!r}; GPU nodes want 'cuda' or 'auto'"
        )
    for node_rank, command in enumerate(node_commands(topology, config_path, resume=resume)):
        lines.append(f"# node {node_rank}")
        lines.append(command)
    lines.append("# resolved hyperparameters")
    lines.append(json.dumps(resolved.to_manifest(), indent=2, sort_keys=True))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tbt_gpu.learner.launch", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--gpus-per-node", type=int, required=True)
    parser.add_argument("--rdzv-endpoint", default=None, help="host:port of node 0's c10d rendezvous (nodes > 1)")
    parser.add_argument("--rdzv-id", default="tbt-learner")
    parser.add_argument("--config", required=True)
    parser.add_argument("--resume", action="store_true", help="add --resume to every command")
    parser.add_argument("--config-shown", default=None, help="the config's path in the printed commands")
    parser.add_argument("--dry-run", action="store_true", help="print the plan (the only mode: nothing is started)")
    args = parser.parse_args(argv)
    if not args.dry_run:
        parser.error("only --dry-run is supported: run the printed command on each node")
    try:
        topology = Topology(
            nodes=args.nodes,
            gpus_per_node=args.gpus_per_node,
            rdzv_endpoint=args.rdzv_endpoint,
            rdzv_id=args.rdzv_id,
        )
        print(plan(topology, args.config, resume=args.resume, shown_path=args.config_shown))
    except (ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
