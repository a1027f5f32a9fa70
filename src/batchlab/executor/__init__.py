"""Executors: unit (ticks), roofline (paper GPU), numpy (the real mini transformer)."""

from batchlab.executor.base import DecodeRunPricer, Executor
from batchlab.executor.unit import UnitExecutor

__all__ = ["DecodeRunPricer", "Executor", "UnitExecutor"]
