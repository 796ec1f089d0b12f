"""`python -m tbt_tracking`: logs one request (JSON on stdin) to the configured trackers.

Prints one JSON line (per tracker: run id, metrics logged and skipped) as the last line of stdout. Exit 1 when a
tracker failed (the caller's activity retries; every tracker skips what it already holds), 2 on a bad request.
"""

from __future__ import annotations

import json
import sys
import traceback

from .request import RequestError, parse_request


def main() -> int:
    try:
        request = parse_request(json.load(sys.stdin))
    except (RequestError, ValueError) as error:
        print(f"tbt_tracking: bad request: {error}", file=sys.stderr)
        return 2
    result: dict[str, object] = {}
    failed: list[str] = []
    if request.mlflow:
        from . import mlflow_sink

        try:
            result["mlflow"] = mlflow_sink.log_entry(request.mlflow, request.campaign_id, request.params, request.entry)
        except Exception as error:  # noqa: BLE001 -- reported, and W&B still gets its turn
            failed.append(f"mlflow: {type(error).__name__}: {error}")
            traceback.print_exc(file=sys.stderr)
    if request.wandb:
        from . import wandb_sink

        try:
            result["wandb"] = wandb_sink.log_entry(request.wandb, request.campaign_id, request.params, request.entry)
        except Exception as error:  # noqa: BLE001
            failed.append(f"wandb: {type(error).__name__}: {error}")
            traceback.print_exc(file=sys.stderr)
    print(json.dumps({**result, "errors": failed}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
