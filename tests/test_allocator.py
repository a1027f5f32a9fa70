"""The batchlab program keeps the memory a run frees for its next arrays (batchlab.runtime.allocator)."""

from __future__ import annotations

import json
import subprocess
import sys

# In a process of its own (the settings are the whole process's): page faults of an 8 MB array
# made, freed and made again, before and after keep_freed_memory.
PROBE = """
import json, resource, sys
import numpy as np
from batchlab.runtime.allocator import keep_freed_memory

def refaults():
    np.ones(1 << 20).sum()   # 8 MB, freed
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    np.ones(1 << 20).sum()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

default = refaults()
kept = keep_freed_memory()
print(json.dumps({"default": default, "kept": kept, "after": refaults()}))
"""


def test_freed_arrays_are_made_again_without_fresh_pages():
    out = json.loads(subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                                    check=True).stdout)
    assert out["kept"] is True   # Linux with glibc, as CI runs
    assert out["default"] > 100   # glibc's defaults: fresh pages for the second array
    assert out["after"] < 100


def test_the_program_keeps_freed_memory_but_a_server_does_not(monkeypatch):
    from batchlab import cli
    from batchlab.runtime import allocator
    from batchlab.commands import serve

    calls = []
    monkeypatch.setattr(allocator, "keep_freed_memory", lambda: calls.append(True))
    assert cli.main(["workload", "--workload", "chat", "--num-prompts", "2", "--request-rate", "1"]) == 0
    assert calls == [True]
    monkeypatch.setattr(serve, "run", lambda args: 0)   # the server's parser, not the server
    assert cli.main(["serve"]) == 0
    assert calls == [True]
