"""Entry point: `torchrun --nproc-per-node N -m tbt_gpu.learner --config FILE.json [--resume] [--node-rank R]`.

init -> config -> build trainer -> resume -> serve commands until shutdown -> close.
"""

from __future__ import annotations

import argparse
import logging
import os
import pathlib
import sys

from .config import LearnerConfig

logger = logging.getLogger("tbt_gpu.learner")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tbt_gpu.learner", description=__doc__)
    parser.add_argument("--config", required=True, help="learner config JSON file")
    parser.add_argument("--resume", action="store_true", help="load the latest valid checkpoint in checkpoint.dir")
    parser.add_argument(
        "--node-rank",
        type=int,
        default=None,
        help="this node's rank in a multi-node launch (global ranks are renumbered node-major from it)",
    )
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rank = os.environ.get("RANK", "0")
    if args.node_rank is not None and "LOCAL_RANK" in os.environ:  # renumbered node-major (distributed.py)
        rank = str(args.node_rank * int(os.environ["LOCAL_WORLD_SIZE"]) + int(os.environ["LOCAL_RANK"]))
    logging.basicConfig(
        level=args.log_level,
        format=f"%(asctime)s rank{rank} %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    cfg = LearnerConfig.load(args.config)

    # Heavy imports after the config is known to be valid: a typo fails in a second, not after torch loads.
    import transformers

    from .checkpoint import Checkpointer
    from .control import (
        LearnerService,
        remove_port_file,
        start_control_server,
        stop_control_server,
        write_port_file,
        write_token_file,
    )
    from .distributed import broadcast_object, destroy_distributed, init_distributed
    from .trainer import Trainer

    transformers.utils.logging.disable_progress_bar()
    info = init_distributed(cfg, node_rank=args.node_rank)
    checkpoint_dir = pathlib.Path(info.config.checkpoint.dir)
    server = None
    try:
        if info.is_main:
            checkpoint_dir.mkdir(parents=True, exist_ok=True)
            remove_port_file(checkpoint_dir)
            logger.info("hyperparameters: %s", info.config.to_manifest())
        trainer = Trainer(info)
        checkpointer = Checkpointer(trainer)
        if args.resume:
            if checkpointer.load_latest() is None:
                logger.info("no checkpoint in %s; starting from %s", checkpoint_dir, info.config.model.path)
        else:
            existing = broadcast_object(checkpointer.committed_steps() if info.is_main else None)
            if existing:
                raise SystemExit(
                    f"checkpoint.dir {checkpoint_dir} already holds step-{existing[-1]}; "
                    "pass --resume to continue it or use an empty folder"
                )
        service = LearnerService(trainer, checkpointer)
        if info.is_main:
            write_token_file(checkpoint_dir, service)  # before the port file: a client that sees one finds both
            server = start_control_server(service)
        service.ready.set()
        if server is not None:
            write_port_file(checkpoint_dir, server, service)
        service.run()
    finally:
        if server is not None:
            stop_control_server(server, service)
            remove_port_file(checkpoint_dir)
    # Only after a clean shutdown: after a failure other ranks may sit in a collective, and torchrun
    # stops them once this process exits non-zero.
    destroy_distributed()
    logger.info("process group destroyed; exiting")
    return 0


if __name__ == "__main__":
    code = main()
    # After a clean shutdown, skip interpreter finalization: on CPU, gloo's C++ threads sometimes outlive the
    # process group and abort the process while Python tears down ("terminate called without an active
    # exception", SIGABRT), which torchrun reports as a failed learner. Everything is committed by now.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
