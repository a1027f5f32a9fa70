"""glibc's malloc told to keep the memory a run frees for the run's next arrays.

By default glibc gives each allocation above 128 KiB its own mapping, handed back to the kernel
when freed, and trims the heap's top once twice that lies free there; its thresholds then move
with what is freed. A simulation's numpy temporaries (index arrays, gaps, masks, a block at a
time) keep landing on fresh pages that way, and the kernel zeroes and maps each page at its
first touch: system time for every page, and a cache miss for every line written. Fixed
thresholds of 32 MiB for a mapping of its own (glibc's most) and 256 MiB for trimming keep freed
memory in the heap for the next arrays. The `batchlab` program sets them for its commands that
run and exit; a server keeps glibc's defaults.
"""

from __future__ import annotations

import sys

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3   # mallopt's parameters, from glibc's malloc.h
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 256 << 20


def keep_freed_memory() -> bool:
    """Set the thresholds; whether the C library took them (False where it is not glibc)."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes   # numpy has imported it already

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
