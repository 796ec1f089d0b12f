"""The batch row has one schema (batch_row.schema.json, generated from the writer's zod schema): batch.py requires
and reads exactly its fields, loads the rows it allows, and rejects a row without a required field as it does."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest
from learner_support import trajectory

from tbt_gpu.learner import batch
from tbt_gpu.learner.batch import BatchError, load_batch

SCHEMA = json.loads((pathlib.Path(batch.__file__).parent / "batch_row.schema.json").read_text(encoding="utf-8"))

# Also within what batch.py checks beyond the schema: lengths equal to input_ids, ids below load()'s vocab_size.
ROW = {
    **trajectory("ep-1", [5, 6, 7, 8], 2, -0.75, old=[0.0, 0.0, -0.5, -1.25]),
    "sampler_versions": [-1, -1, 3, 4],
    "group_id": "g-1",
}

_TYPES: dict[str, Any] = {"object": dict, "array": list, "string": str, "integer": int, "number": (int, float)}


def schema_errors(value: object, schema: dict[str, Any], where: str = "row") -> list[str]:
    """The few JSON Schema keywords the batch-row schema uses; any other one fails, so none is silently skipped."""
    unknown = set(schema) - {"$schema", "description", "type", "properties", "required", "additionalProperties",
                             "items", "minItems", "minLength", "minimum", "maximum"}  # fmt: skip
    assert not unknown, f"{where}: keyword(s) {sorted(unknown)} need checking here"
    expected = _TYPES[schema["type"]]
    if isinstance(value, bool) or not isinstance(value, expected):
        return [f"{where}: not {schema['type']}"]
    errors: list[str] = []
    if isinstance(value, dict):
        errors += [f"{where}.{name}: missing" for name in schema.get("required", []) if name not in value]
        for name, item in value.items():
            if name in schema.get("properties", {}):
                errors += schema_errors(item, schema["properties"][name], f"{where}.{name}")
            elif schema.get("additionalProperties") is False:
                errors.append(f"{where}.{name}: not allowed")
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            errors.append(f"{where}: fewer than {schema['minItems']} items")
        for i, item in enumerate(value):
            errors += schema_errors(item, schema["items"], f"{where}[{i}]")
    if isinstance(value, str) and len(value) < schema.get("minLength", 0):
        errors.append(f"{where}: shorter than {schema['minLength']}")
    if isinstance(value, (int, float)) and not schema.get("minimum", value) <= value <= schema.get("maximum", value):
        errors.append(f"{where}: outside [{schema.get('minimum')}, {schema.get('maximum')}]")
    return errors


def load(tmp_path: pathlib.Path, row: dict[str, Any]) -> batch.Batch:
    path = tmp_path / "batch.jsonl"
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    return load_batch(path, vocab_size=50, max_seq_len=8)


def test_batch_py_requires_and_reads_exactly_the_schema_fields() -> None:
    assert set(batch.REQUIRED) == set(SCHEMA["required"])
    assert set(batch.REQUIRED) | set(batch.OPTIONAL) == set(SCHEMA["properties"])
    assert not set(batch.REQUIRED) & set(batch.OPTIONAL)
    assert SCHEMA.get("additionalProperties") is not False, "batch.py ignores other keys: the schema must allow them"


def test_a_row_valid_under_the_schema_loads(tmp_path) -> None:
    assert schema_errors(ROW, SCHEMA) == []
    loaded = load(tmp_path, ROW).trajectories[0]
    assert (loaded.trajectory_id, loaded.input_ids, loaded.loss_mask) == ("ep-1", (5, 6, 7, 8), (0, 0, 1, 1))
    assert (loaded.advantage, loaded.old_logprobs) == (-0.75, (0.0, 0.0, -0.5, -1.25))
    assert loaded.sampler_versions == (-1, -1, 3, 4)
    without_optional = {k: v for k, v in ROW.items() if k not in batch.OPTIONAL}
    assert schema_errors(without_optional, SCHEMA) == []
    assert load(tmp_path, without_optional).trajectories[0].old_logprobs is None
    assert load(tmp_path, without_optional).trajectories[0].sampler_versions is None


@pytest.mark.parametrize("field", SCHEMA["required"])
def test_a_row_missing_a_required_field_is_rejected_by_both(tmp_path, field: str) -> None:
    row = {k: v for k, v in ROW.items() if k != field}
    assert schema_errors(row, SCHEMA) == [f"row.{field}: missing"]
    with pytest.raises(BatchError, match="is missing") as info:
        load(tmp_path, row)
    assert info.value.field == field
