import pathlib
import sys

import pytest

GPU_LEARNER = pathlib.Path(__file__).resolve().parents[1]
if str(GPU_LEARNER) not in sys.path:
    sys.path.insert(0, str(GPU_LEARNER))


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> pathlib.Path:
    """A tiny random Llama (learner_support.make_tiny_model), written once per test module."""
    from learner_support import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model")
