"""The cyclic garbage collector paused while a simulation runs.

A run allocates millions of small objects (requests, their token lists, step-log rows) that form
no reference cycles, and each burst of allocations triggers collections that walk every live
object: about a tenth of a simulation's time. Reference counting still frees whatever the run
drops; the few cycles made meanwhile wait for the collector to resume at the end.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager


@contextmanager
def gc_paused():
    """Pause the collector for the block (or the decorated call); nested uses are free."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
