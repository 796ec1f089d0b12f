"""Errors that the control endpoint maps to answers (code and HTTP status)."""

from __future__ import annotations


class LearnerError(Exception):
    code = "learner_error"
    http_status = 500


class StepRefused(LearnerError):
    """The step id does not follow the last applied one (HTTP 409); nothing changed."""

    code = "out_of_order"
    http_status = 409

    def __init__(self, step_id: int, last_step: int) -> None:
        super().__init__(f"step {step_id} refused: last applied step is {last_step}, expected {last_step + 1}")
        self.step_id = step_id
        self.last_step = last_step


class StepCancelled(LearnerError):
    """A cancel request stopped the step at a micro-batch boundary, before the optimizer step."""

    code = "cancelled"
    http_status = 409

    def __init__(self, step_id: int, micro_batch: int, of: int) -> None:
        super().__init__(
            f"step {step_id} cancelled at micro-batch {micro_batch} of {of}; no optimizer step, nothing applied"
        )


class NonFiniteError(LearnerError):
    """The loss or gradient norm is NaN/inf: the step is refused and no weight changes."""

    code = "non_finite"
    http_status = 422


class NotReady(LearnerError):
    code = "not_ready"
    http_status = 503


class ExportRefused(LearnerError):
    code = "export_refused"
    http_status = 409


class CheckpointVolumeFull(LearnerError):
    """The step was applied but its checkpoint did not fit on the volume: nothing was committed or answered. The
    learner keeps the updated state, and a retry of the same step id only tries the save again (never retrains),
    so freeing space and resuming costs one save (issue 40)."""

    code = "disk_full"
    http_status = 507


class WeightPushFailed(LearnerError):
    """The collective weight transport failed (the server never joined, or a send timed out); nothing changed in
    the learner, and the caller syncs that server from the disk export instead."""

    code = "push_failed"
    http_status = 502
