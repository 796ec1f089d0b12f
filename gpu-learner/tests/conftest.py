import pathlib
import sys

GPU_LEARNER = pathlib.Path(__file__).resolve().parents[1]
if str(GPU_LEARNER) not in sys.path:
    sys.path.insert(0, str(GPU_LEARNER))
