"""One worker thread that runs generation batches and weight reloads, in arrival order.

Requests waiting in the queue are gathered into one batch (up to ``max_batch``; after the first arrives
the worker waits up to ``batch_wait_s`` for company). A weight reload is a barrier in the same queue:
everything accepted before it finishes on the old weights (pause), the weights are swapped, and
everything after it runs on the new ones (resume). Batches are static: a request that arrives while a
batch runs waits for the next one.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .engine import Engine, GenerationRequest, GenerationResult
from .errors import Unavailable

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class _Generate:
    request: GenerationRequest
    future: Future = field(default_factory=Future)


@dataclass(slots=True)
class _Reload:
    path: Path
    weight_version: int | None
    future: Future = field(default_factory=Future)


class Batcher:
    def __init__(self, engine: Engine, *, max_batch: int, batch_wait_s: float) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        self._engine = engine
        self._max_batch = max_batch
        self._batch_wait_s = batch_wait_s
        self._queue: collections.deque[_Generate | _Reload] = collections.deque()
        self._cond = threading.Condition()
        self._closing = False
        self._busy = False
        self._stats = {"requests": 0, "batches": 0, "largest_batch": 0, "generated_tokens": 0, "reloads": 0}
        self._thread = threading.Thread(target=self._run, name="policy-batcher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self, timeout: float = 30.0) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join(timeout)
        with self._cond:
            while self._queue:
                self._queue.popleft().future.set_exception(Unavailable("the server is shutting down"))

    def generate(self, request: GenerationRequest) -> Future:
        return self._submit(_Generate(request))

    def reload(self, path: Path, weight_version: int | None) -> Future:
        return self._submit(_Reload(path, weight_version))

    def stats(self) -> dict[str, Any]:
        with self._cond:
            return {**self._stats, "queued": len(self._queue), "busy": self._busy, "max_batch": self._max_batch}

    def _submit(self, job: _Generate | _Reload) -> Future:
        with self._cond:
            if self._closing:
                raise Unavailable("the server is shutting down")
            self._queue.append(job)
            self._cond.notify_all()
        return job.future

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if self._closing:
                    return
                first = self._queue.popleft()
                self._busy = True
            try:
                if isinstance(first, _Reload):
                    self._reload(first)
                else:
                    self._generate(self._gather(first))
            finally:
                with self._cond:
                    self._busy = False

    def _gather(self, first: _Generate) -> list[_Generate]:
        batch = [first]
        deadline = time.monotonic() + self._batch_wait_s
        with self._cond:
            while len(batch) < self._max_batch and not self._closing:
                if self._queue:
                    if isinstance(self._queue[0], _Reload):
                        break  # a reload is a barrier: it waits for this batch, later requests wait for it
                    batch.append(self._queue.popleft())  # type: ignore[arg-type]
                    continue
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
        return batch

    def _generate(self, batch: list[_Generate]) -> None:
        live = [job for job in batch if job.future.set_running_or_notify_cancel()]
        if not live:
            return
        started = time.monotonic()
        try:
            results: list[GenerationResult] = self._engine.generate([job.request for job in live])
        except BaseException as exc:
            logger.exception("generation batch of %d failed", len(live))
            for job in live:
                job.future.set_exception(exc)
            return
        tokens = sum(len(r.token_ids) for r in results)
        with self._cond:
            self._stats["requests"] += len(live)
            self._stats["batches"] += 1
            self._stats["largest_batch"] = max(self._stats["largest_batch"], len(live))
            self._stats["generated_tokens"] += tokens
        logger.debug("batch of %d: %d tokens in %.2f s", len(live), tokens, time.monotonic() - started)
        for job, result in zip(live, results):
            job.future.set_result(result)

    def _reload(self, job: _Reload) -> None:
        if not job.future.set_running_or_notify_cancel():
            return
        try:
            version = self._engine.load_weights(job.path, job.weight_version)
        except BaseException as exc:  # noqa: BLE001
            job.future.set_exception(exc)
            return
        with self._cond:
            self._stats["reloads"] += 1
        job.future.set_result(version)
