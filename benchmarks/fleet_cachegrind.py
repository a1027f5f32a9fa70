"""The Azure fleet against its replicas alone, in work done and in what the memory system charges.

Run: OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/fleet_cachegrind.py [--repeats N] [--out DIR]
(needs valgrind: `apt-get install valgrind`; about five minutes). With PYTHONPATH=DIR/src it
measures earlier code; code from before batchlab.runtime.allocator keeps glibc's defaults, as its
program did.

bench_fleet.py times the fleet and its replicas' shares served alone, and on this shared machine
the ratio moves by more than what separates them. This script counts instead, in three processes
that each build the same workload and routing: one that stops there, one that then runs the
fleet (`simulate_fleet`, least-outstanding on 4 replicas) and one that serves each replica's
share alone (`simulate` x 4), each keeping the memory it frees as the `batchlab` program does.
Less the first: under cachegrind with its cache model (counts the machine's load does not move;
the last level as Linux describes this machine's, `last_level`), instructions executed,
first-level instruction and data cache misses and last-level misses;
and, without valgrind, page faults (memory the process touches first, which the kernel charges
as system time), user and system CPU, medians of `--repeats`. With `--out DIR`, cachegrind's
files stay there (cachegrind.MODE.out), for `cg_annotate --sort=DLmr DIR/cachegrind.fleet.out`
to say which C functions miss.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_fleet import AZURE_REPLICAS, H100, MODEL, PAGED, SPEC, keep_freed_memory, share   # noqa: E402

from batchlab.fleet import simulate_fleet   # noqa: E402
from batchlab.experiments.run import simulate   # noqa: E402
from batchlab.workload import make_workload   # noqa: E402

MODES = ("setup", "fleet", "alone")
COUNTS = {"instructions": "I +refs", "I1 misses": "I1 +misses", "D1 misses": "D1 +misses", "LL misses": "LL misses"}


def child(mode: str, routed_file: str) -> None:
    keep_freed_memory()   # as the batchlab program does
    azure = make_workload("azure-conv", 10**9, None)
    routed = np.load(routed_file)
    parts = [share(azure, np.flatnonzero(routed == k)) for k in range(AZURE_REPLICAS)]
    if mode == "fleet":
        simulate_fleet(azure, [SPEC] * AZURE_REPLICAS, "least-outstanding")
    elif mode == "alone":
        for part in parts:
            simulate(part, PAGED, MODEL, H100)


def last_level() -> list[str]:
    """cachegrind's --LL for this machine's last-level cache as Linux describes it (size, ways,
    line), or nothing where it does not: cachegrind's own guess can be far off in a virtual
    machine (on the one these figures come from, a 256 MB direct-mapped cache for a 32 MB
    16-way L3)."""
    caches = sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"))
    unified = [c for c in caches if (c / "type").read_text().strip() == "Unified"]
    if not unified:
        return []
    top = max(unified, key=lambda c: int((c / "level").read_text()))
    size = (top / "size").read_text().strip()   # e.g. 32768K
    scale = {"K": 1 << 10, "M": 1 << 20}.get(size[-1], 1)
    nbytes = int(size.rstrip("KM")) * scale
    ways, line = int((top / "ways_of_associativity").read_text()), int((top / "coherency_line_size").read_text())
    return [f"--LL={nbytes},{ways},{line}"]


def counted(mode: str, routed_file: str, env: dict, out_dir: Path | None) -> dict[str, int]:
    """cachegrind's totals for one child process (its file kept in `out_dir`, if given)."""
    out_file = out_dir / f"cachegrind.{mode}.out" if out_dir else "/dev/null"
    err = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=yes", *last_level(),
                          f"--cachegrind-out-file={out_file}", sys.executable, __file__, "--child", mode, routed_file],
                         env=env, capture_output=True, text=True, check=True).stderr
    out = {}
    for name, label in COUNTS.items():
        found = re.search(rf"== {label}:\s+([\d,]+)", err)
        if found is None:
            sys.exit(f"cachegrind printed no '{label}' line:\n{err[-2000:]}")
        out[name] = int(found.group(1).replace(",", ""))
    return out


def timed(mode: str, routed_file: str, env: dict) -> dict[str, float]:
    """Page faults, user and system CPU of one child process, without valgrind."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, __file__, "--child", mode, routed_file], env=env, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"page faults": after.ru_minflt - before.ru_minflt, "user s": after.ru_utime - before.ru_utime,
            "system s": after.ru_stime - before.ru_stime}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, metavar="DIR", help="keep cachegrind's files here")
    parser.add_argument("--child", nargs=2, metavar=("MODE", "ROUTED"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed: apt-get install valgrind")
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}
    with tempfile.TemporaryDirectory() as tmp:
        routed_file = f"{tmp}/routed.npy"
        azure = make_workload("azure-conv", 10**9, None)
        np.save(routed_file, simulate_fleet(azure, [SPEC] * AZURE_REPLICAS, "least-outstanding").assignment)
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
        counts = {mode: counted(mode, routed_file, env, args.out) for mode in MODES}
        runs = {mode: [] for mode in MODES}
        for _ in range(args.repeats):   # in turn, so the machine's drift falls on all three alike
            for mode in MODES:
                runs[mode].append(timed(mode, routed_file, env))
    times = {mode: {key: statistics.median(r[key] for r in rs) for key in rs[0]} for mode, rs in runs.items()}
    print(f"azure-conv on {AZURE_REPLICAS} replicas, least-outstanding, against its replicas' shares served "
          f"alone; each less the process that only builds the workload and routing "
          f"(times: medians of {args.repeats}, load average {os.getloadavg()[0]:.2f}; "
          f"last level: {' '.join(last_level()) or 'cachegrind default'})")
    net = {mode: {**{k: counts[mode][k] - counts["setup"][k] for k in COUNTS},
                  **{k: times[mode][k] - times["setup"][k] for k in times["setup"]}} for mode in ("fleet", "alone")}
    print(f"{'':16s}{'fleet':>16s}{'alone':>16s}{'fleet / alone':>15s}")
    for name in net["fleet"]:
        fleet, alone = net["fleet"][name], net["alone"][name]
        shown = f"{fleet:16.3f}{alone:16.3f}" if name.endswith(" s") else f"{fleet:16,.0f}{alone:16,.0f}"
        print(f"{name:16s}{shown}{fleet / alone:15.3f}")


if __name__ == "__main__":
    main()
