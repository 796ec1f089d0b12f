"""LoRA adapters on disk, in the format vLLM's `/v1/load_lora_adapter` and peft read.

A folder holds `adapter_config.json` (peft's LoraConfig fields) and `adapter_model.safetensors`, whose keys are
`base_model.model.<module>.lora_A.weight` ([rank, in]) and `...lora_B.weight` ([out, rank]); the update applied
to a module's output is (alpha / rank) * x @ A^T @ B^T. The learner writes one per step; a policy server started
in LoRA mode first gets a zero adapter (B = 0: exactly the base model), made here from the model's config alone:

    python -m tbt_gpu.lora_adapter --model DIR --rank R --alpha A --targets q_proj,v_proj --out DIR

Needs only torch, transformers and safetensors, so both the learner's venv and vLLM's can run it.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import sys
from collections.abc import Mapping, Sequence

import torch
from safetensors.torch import save_file

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
KEY_PREFIX = "base_model.model."


def is_adapter(folder: str | pathlib.Path) -> bool:
    return (pathlib.Path(folder) / CONFIG_FILE).is_file()


def adapter_config(rank: int, alpha: float, targets: Sequence[str], base_model: str) -> dict[str, object]:
    return {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base_model,
        "r": rank,
        "lora_alpha": alpha,
        "lora_dropout": 0.0,
        "target_modules": sorted(targets),
        "bias": "none",
        "fan_in_fan_out": False,
        "modules_to_save": None,
        "use_rslora": False,
        "use_dora": False,
    }


def write_adapter(
    folder: pathlib.Path, tensors: Mapping[str, torch.Tensor], config: dict[str, object], metadata: dict[str, str]
) -> None:
    """Writes the adapter's two files into `folder` (the caller makes it appear atomically). `tensors` are keyed
    by module path plus `.lora_A.weight` / `.lora_B.weight` (the learner's parameter names)."""
    keyed = {KEY_PREFIX + name: t.detach().contiguous() for name, t in tensors.items()}
    save_file(keyed, str(folder / WEIGHTS_FILE), metadata={"format": "pt", **metadata})
    with (folder / CONFIG_FILE).open("w", encoding="utf-8") as fh:
        json.dump(config, fh, indent=2, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())


def target_linears(model: torch.nn.Module, targets: Sequence[str]) -> list[tuple[str, torch.nn.Linear]]:
    """(path, module) of every Linear whose last path component is a target; ValueError when none is."""
    wanted = set(targets)
    found = [
        (name, m)
        for name, m in model.named_modules()
        if isinstance(m, torch.nn.Linear) and name.rsplit(".", 1)[-1] in wanted
    ]
    if not found:
        linears = sorted({n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)})
        raise ValueError(f"lora.targets: no Linear module is named any of {sorted(wanted)} (this model has {linears})")
    return found


def target_shapes(model_dir: str, targets: Sequence[str]) -> list[tuple[str, int, int]]:
    """(path, in, out) of every target Linear of the model at `model_dir`, read from its config alone."""
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):  # shapes only: no weights are read or allocated
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir))
    return [(name, m.in_features, m.out_features) for name, m in target_linears(model, targets)]


def write_zero_adapter(model_dir: str, rank: int, alpha: float, targets: Sequence[str], out: pathlib.Path) -> int:
    """A rank-`rank` adapter with A = B = 0 for every target of the model at `model_dir`; returns its module count."""
    tensors: dict[str, torch.Tensor] = {}
    for name, fan_in, fan_out in target_shapes(model_dir, targets):
        tensors[f"{name}.lora_A.weight"] = torch.zeros(rank, fan_in)
        tensors[f"{name}.lora_B.weight"] = torch.zeros(fan_out, rank)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    write_adapter(tmp, tensors, adapter_config(rank, alpha, targets, model_dir), {"step": "0"})
    shutil.rmtree(out, ignore_errors=True)
    os.rename(tmp, out)
    return len(tensors) // 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tbt_gpu.lora_adapter", description="write a zero LoRA adapter")
    parser.add_argument("--model", required=True)
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--alpha", type=float, required=True)
    parser.add_argument("--targets", required=True, help="comma-separated module names")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    try:
        count = write_zero_adapter(args.model, args.rank, args.alpha, args.targets.split(","), pathlib.Path(args.out))
    except (ValueError, OSError) as err:
        print(f"lora_adapter: {err}", file=sys.stderr)
        return 2
    print(json.dumps({"modules": count, "out": args.out}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
