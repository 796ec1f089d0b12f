"""Multi-node launch plan: the exact torchrun command per node and the resolved hyperparameters.

    python -m tbt_gpu.learner.launch --nodes 3 --gpus-per-node 8 --master-addr HOST --config F --dry-run

A dry run: it prints and starts nothing (it does not even import torch).
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
    master_addr: str
    """Address of node 0, reachable from every node (torchrun static rendezvous)."""
    master_port: int = 29500
    """TCP port on node 0 for the rendezvous store."""

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise ValueError(f"nodes: must be >= 1, got {self.nodes}")
        if self.gpus_per_node < 1:
            raise ValueError(f"gpus_per_node: must be >= 1, got {self.gpus_per_node}")
        if not self.master_addr:
            raise ValueError("master_addr: must be set")
        if not 1 <= self.master_port <= 65535:
            raise ValueError(f"master_port: must be in [1, 65535], got {self.master_port}")

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node


def node_commands(topology: Topology, config_path: str, *, resume: bool, python: str = "torchrun") -> list[str]:
    commands = []
    for node_rank in range(topology.nodes):
        argv = [
            python,
            "--nnodes", str(topology.nodes),
            "--nproc-per-node", str(topology.gpus_per_node),
            "--node-rank", str(node_rank),
            "--master-addr", topology.master_addr,
            "--master-port", str(topology.master_port),
            "-m", "tbt_gpu.learner",
            "--config", config_path,
        ]  # fmt: skip
        if resume:
            argv.append("--resume")
        commands.append(shlex.join(argv))
    return commands


def plan(topology: Topology, config_path: str, *, resume: bool) -> str:
    cfg = LearnerConfig.load(config_path)
    resolved = cfg.resolve(cuda_available=True, world_size=topology.world_size)
    lines = [
        f"# learner launch plan: {topology.nodes} node(s) x {topology.gpus_per_node} GPU(s) = world size "
        f"{topology.world_size}, rendezvous at {topology.master_addr}:{topology.master_port}",
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
    parser.add_argument("--master-addr", required=True)
    parser.add_argument("--master-port", type=int, default=29500)
    parser.add_argument("--config", required=True)
    parser.add_argument("--resume", action="store_true", help="add --resume to every command")
    parser.add_argument("--dry-run", action="store_true", help="print the plan (the only mode: nothing is started)")
    args = parser.parse_args(argv)
    if not args.dry_run:
        parser.error("only --dry-run is supported: run the printed command on each node")
    try:
        topology = Topology(
            nodes=args.nodes,
            gpus_per_node=args.gpus_per_node,
            master_addr=args.master_addr,
            master_port=args.master_port,
        )
        print(plan(topology, args.config, resume=args.resume))
    except (ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
