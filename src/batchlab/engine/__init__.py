"""The engine core (`core.py`) and its drivers; docs/engine.md draws them and says which file owns what."""

from batchlab.engine.core import Engine, check_fresh
from batchlab.engine.pipelined import Pipeline
from batchlab.engine.step import DecodeRun, StepOutput

__all__ = ["DecodeRun", "Engine", "Pipeline", "StepOutput", "check_fresh"]
