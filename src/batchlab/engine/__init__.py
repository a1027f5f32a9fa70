"""The engine core and its drivers.

`core.py` is the core (`Engine`: add, abort, stop, adopt, step = begin + commit, trace) and the
simulator's loop; `fast_path.py` advances the simulator's steps from running sums; `pipelined.py`
runs Orca's pipelined iterations; `engine/step.py` holds what a begun step is. docs/engine.md draws them.
"""

from batchlab.engine.core import Engine, check_fresh
from batchlab.engine.pipelined import Pipeline
from batchlab.engine.step import DecodeRun, StepOutput

__all__ = ["DecodeRun", "Engine", "Pipeline", "StepOutput", "check_fresh"]
