"""``python -m tbt_gpu.policy_server --model DIR --port N``: serve a causal LM on CPU."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from pathlib import Path

from .config import ServerConfig

# Set before torch (imported by .app inside main) loads libgomp: OpenMP threads that spin-wait between ops
# make a 2-thread decode 5-15x slower when the cores are shared with other processes (measured on the
# 2-core dev machine: 1.8 tok/s spinning vs 7-8 tok/s passive).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

logger = logging.getLogger("tbt_gpu.policy_server")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tbt_gpu.policy_server", description=__doc__)
    parser.add_argument(
        "--model",
        type=Path,
        default=None,
        help="model folder (config.json, *.safetensors, tokenizer); default: ensure_model()",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument("--max-batch", type=int, default=8, help="most requests per generation batch")
    parser.add_argument(
        "--batch-wait-ms",
        type=float,
        default=10.0,
        help="how long the first queued request waits for others to join its batch",
    )
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--max-model-len", type=int, default=None, help="context length (prompt + max_tokens)")
    parser.add_argument("--served-model-name", default=None, help="model id; default: the folder name")
    parser.add_argument("--chat-template", type=Path, default=None, help="Jinja file replacing the chat template")
    parser.add_argument(
        "--token-file", type=Path, default=None, help="0600 file with the bearer token the weight-sync routes require"
    )
    parser.add_argument(
        "--weights-root", type=Path, action="append", default=[], help="folder weights may be reloaded from"
    )
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    model = args.model
    if model is None:
        from tbt_gpu.model_store import ensure_model

        model = ensure_model()
    config = ServerConfig(
        model=model, host=args.host, port=args.port, max_batch=args.max_batch, batch_wait_ms=args.batch_wait_ms,
        threads=args.threads, max_model_len=args.max_model_len, served_model_name=args.served_model_name,
        chat_template=args.chat_template, token_file=args.token_file, weights_roots=tuple(args.weights_root),
    )  # fmt: skip
    from .app import PolicyServer

    server = PolicyServer(config)

    def stop(signum: int, _frame: object) -> None:
        logger.info("signal %d: shutting down", signum)
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    logger.info("policy server listening on http://%s:%d (model %s)", config.host, server.port, config.model_name)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
