"""Finding 15: the learner's control endpoint and the policy server's weight reload are not open to every
local process (per-run bearer token, paths restricted to the campaign's folders), and RNG state loads with
torch.load(weights_only=True). Second review, finding 7: a resume unpickles nothing a crafted checkpoint file
could make run code (`.metadata`, non-tensor values in the shards)."""

from __future__ import annotations

import enum
import io
import json
import os
import pathlib
import pickle
import random
import stat

import torch
from learner_support import Learner, make_tiny_model, random_batch, write_config

from tbt_gpu.learner.checkpoint import MANIFEST, Checkpointer, _rng_state, _sha256, load_rng_file
from tbt_gpu.learner.config import LearnerConfig
from tbt_gpu.learner.distributed import init_distributed
from tbt_gpu.learner.trainer import Trainer


def test_finding_15_learner_control_needs_the_run_token_and_campaign_batches(tmp_path: pathlib.Path) -> None:
    campaign = tmp_path / "campaign"
    (campaign / "batches").mkdir(parents=True)
    model = make_tiny_model(tmp_path / "model")
    inside = random_batch(campaign / "batches" / "step-1.jsonl", seed=1)
    outside = random_batch(tmp_path / "elsewhere.jsonl", seed=1)
    sneaky = campaign / "batches" / "link.jsonl"
    sneaky.symlink_to(outside)
    ckpt = campaign / "checkpoints"
    config = write_config(campaign / "learner.json", model=model, checkpoint_dir=ckpt)
    learner = Learner(config, ckpt)
    try:
        token_file = ckpt / "control.token"
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        assert learner.token not in (ckpt / "control.json").read_text()
        for route in ("/health", "/manifest"):
            assert learner.call("GET", route, token="")[0] == 401
            assert learner.call("GET", route, token="wrong")[0] == 401
        status, body = learner.call("POST", "/train_step", {"step_id": 1, "batch_ref": str(inside)}, token="x")
        assert status == 401 and body["code"] == "unauthorized"
        for ref in (outside, sneaky, campaign / ".." / "elsewhere.jsonl"):
            status, body = learner.call("POST", "/train_step", {"step_id": 1, "batch_ref": str(ref)})
            assert status == 403 and body["code"] == "path_refused", (ref, body)
        assert learner.call("GET", "/health")[1]["step"] == 0
        status, body = learner.call("POST", "/train_step", {"step_id": 1, "batch_ref": str(inside)})
        assert status == 200, body
        assert learner.token not in learner.output()
    finally:
        assert learner.stop() == 0


class _RunsCode:
    def __reduce__(self):
        return (os.system, (f"touch {_RunsCode.marker}",))

    marker = ""


def test_finding_15_rng_state_loads_with_weights_only(tmp_path: pathlib.Path) -> None:
    good = tmp_path / "rng-rank0.pt"
    random.seed(11)
    torch.save(_rng_state(), good)
    expected = random.random()
    random.seed(99)
    assert load_rng_file(good) is True
    assert random.random() == expected

    _RunsCode.marker = str(tmp_path / "ran")
    crafted = tmp_path / "crafted.pt"
    with open(crafted, "wb") as f:
        pickle.dump({"python": _RunsCode()}, f)
    assert load_rng_file(crafted) is False
    assert not os.path.exists(_RunsCode.marker), "a crafted RNG file ran code"


def _checkpointed_step(tmp_path: pathlib.Path) -> pathlib.Path:
    """A real one-step checkpoint of a tiny model (its folder)."""
    model = make_tiny_model(tmp_path / "model")
    trainer, ckpt = _build(tmp_path, model)
    trainer.train_step(1, trainer.load_batch(str(random_batch(tmp_path / "b1.jsonl", seed=1))))
    return ckpt.save()


def _build(tmp_path: pathlib.Path, model: pathlib.Path) -> tuple[Trainer, Checkpointer]:
    config = write_config(tmp_path / "learner.json", model=model, checkpoint_dir=tmp_path / "ckpt")
    trainer = Trainer(init_distributed(LearnerConfig.load(config)))
    return trainer, Checkpointer(trainer)


def _reseal(folder: pathlib.Path) -> None:
    """What an attacker who can write the folder can do too: make the manifest match the changed files."""
    manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    for name in manifest["files"]:
        path = folder / name
        manifest["files"][name] = {"size": path.stat().st_size, "sha256": _sha256(path)}
    (folder / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")


def _resume(tmp_path: pathlib.Path) -> object:
    """A fresh trainer's resume: the step it resumed from, None, or the error it raised."""
    _, fresh = _build(tmp_path, tmp_path / "model")
    try:
        return fresh.load_latest()
    except BaseException as err:  # torch's CheckpointException is a BaseException
        if isinstance(err, KeyboardInterrupt):
            raise
        return err


def test_second_review_finding_7_checkpoint_metadata_pickle_never_runs(tmp_path: pathlib.Path) -> None:
    """second review, finding 7 (checkpoint .metadata): a crafted `.metadata` is refused and never unpickled."""
    step = _checkpointed_step(tmp_path)
    _RunsCode.marker = str(tmp_path / "ran-metadata")
    (step / ".metadata").write_bytes(pickle.dumps(_RunsCode()))
    _reseal(step)
    outcome = _resume(tmp_path)
    assert not os.path.exists(_RunsCode.marker), "a crafted .metadata ran code on resume"
    assert outcome is None, f"the only checkpoint is refused as invalid, got {outcome!r}"


def test_second_review_finding_7_checkpoint_shard_values_load_weights_only(tmp_path: pathlib.Path) -> None:
    """second review, finding 7 (checkpoint shards): a non-tensor value in a shard is loaded as plain types only."""
    step = _checkpointed_step(tmp_path)
    with (step / ".metadata").open("rb") as fh:
        metadata = pickle.load(fh)  # our own, just written
    key = next(k for k, v in metadata.state_dict_metadata.items() if type(v).__name__ == "BytesStorageMetadata")
    index = next(i for i in metadata.storage_data if i.fqn == key)
    info = metadata.storage_data[index]
    _RunsCode.marker = str(tmp_path / "ran-shard")
    payload = io.BytesIO()
    torch.save(_RunsCode(), payload)
    shard = step / info.relative_path
    info.offset, info.length = shard.stat().st_size, len(payload.getvalue())
    with shard.open("ab") as fh:
        fh.write(payload.getvalue())
    with (step / ".metadata").open("wb") as fh:
        pickle.dump(metadata, fh)
    _reseal(step)
    outcome = _resume(tmp_path)
    assert not os.path.exists(_RunsCode.marker), f"a crafted shard value ({key}) ran code on resume"
    assert isinstance(outcome, Exception) and "needs more than plain types" in str(outcome), outcome


class _EnumsByGetattr(pickle.Pickler):
    """Pickles Enum members as Debian's Python 3.11.2 does: `getattr(EnumClass, "NAME")`."""

    def reducer_override(self, obj):
        if isinstance(obj, enum.Enum):
            return (getattr, (type(obj), obj.name))
        return NotImplemented


def _rewrite_metadata(step: pathlib.Path, value: object) -> None:
    buffer = io.BytesIO()
    _EnumsByGetattr(buffer, protocol=pickle.DEFAULT_PROTOCOL).dump(value)
    assert b"getattr" in buffer.getvalue(), "the rewrite must use getattr, or the test proves nothing"
    (step / ".metadata").write_bytes(buffer.getvalue())
    _reseal(step)


def test_metadata_enums_pickled_by_getattr_load(tmp_path: pathlib.Path) -> None:
    """test:deploy: in the GPU worker image (Python 3.11.2) the learner refused its own step-1 checkpoint, whose
    `.metadata` holds `_MEM_FORMAT_ENCODING` members as getattr calls, and retrained from the base model."""
    step = _checkpointed_step(tmp_path)
    with (step / ".metadata").open("rb") as fh:
        _rewrite_metadata(step, pickle.load(fh))  # our own, just written
    assert _resume(tmp_path) == 1


def test_metadata_getattr_of_anything_else_is_refused(tmp_path: pathlib.Path) -> None:
    """getattr is let through for a member of a metadata Enum only, not as a way to reach any global."""
    step = _checkpointed_step(tmp_path)

    class _GadgetByGetattr:  # PosixPath is a metadata type, but not an Enum: its attributes are out of reach
        def __reduce__(self):
            return (getattr, (pathlib.PosixPath, "home"))

    _rewrite_metadata(step, {"x": _GadgetByGetattr()})
    assert _resume(tmp_path) is None, "a .metadata reaching PosixPath.home through getattr is refused"
