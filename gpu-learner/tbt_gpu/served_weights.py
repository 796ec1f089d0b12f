"""Which weights a policy server samples with: the label the last weight sync wrote, and the process's boot id.

Shared by the built-in server (tbt_gpu.policy_server.app) and vLLM's middleware (tbt_gpu.vllm_served_weights).
A load drops the label (the server holds weights nobody named yet); the sync writes `<campaign>@<version>` only after
its load succeeded. A fresh process starts with no label and a new boot id, so a server that restarted on its own
never passes for holding a campaign's weights. Each completion takes a ticket when it starts and is answered with
the label that held for its whole run (`served`), `none` when there was none, or `mixed` when a load or a new label
came in between.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

#: Response headers of a completion: the served label, and the boot id of the process that served it.
SERVED_HEADER = "x-tbt-served-weights"
BOOT_HEADER = "x-tbt-boot-id"
#: Labels the sync writes before it loads: they name what is coming, not what is served.
LOADING_PREFIX = "loading:"


class ServedWeights:
    def __init__(self, label: str | None = None) -> None:
        self.boot_id = uuid.uuid4().hex[:16]
        self._lock = threading.Lock()
        self._label = label
        self._epoch = 0

    @property
    def label(self) -> str | None:
        return self._label

    def loading(self) -> None:
        """Weights are being replaced: no label holds until the sync writes one."""
        with self._lock:
            self._label = None
            self._epoch += 1

    def set_label(self, label: str) -> None:
        with self._lock:
            self._label = label
            self._epoch += 1

    def ticket(self) -> tuple[str | None, int]:
        with self._lock:
            return self._label, self._epoch

    def served(self, ticket: tuple[str | None, int]) -> str:
        """The label that held from `ticket` until now: `mixed` if it changed, `none` if there was none."""
        label, epoch = ticket
        with self._lock:
            if epoch != self._epoch:
                return "mixed"
        if label is None or label.startswith(LOADING_PREFIX):
            return "none"
        return label

    def headers(self, ticket: tuple[str | None, int]) -> dict[str, str]:
        return {SERVED_HEADER: self.served(ticket), BOOT_HEADER: self.boot_id}

    def info(self) -> dict[str, Any]:
        """`GET /weight_info`: the label as written (None until a sync wrote one) and the boot id."""
        return {"weight_version": self._label, "boot_id": self.boot_id}
