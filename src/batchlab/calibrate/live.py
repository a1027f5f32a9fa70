"""A running server measured for `batchlab validate`: started, warmed up, and its steps timed.

The device spec from `batchlab calibrate --mini` was measured on operators in a quiet loop; the
server runs the same forward inside its engine loop, with its HTTP front end and the load
generator on the same cores, and on a shared machine at another moment. So before each
comparison the server's own steps are timed with `batchlab bench`, and the spec is refitted to
them (`fit_server`):

- decode steps: B short requests sent at once; their median TPOT (each request's mean gap
  between tokens) is the time of one decode step of B sequences, everything the server does
  per step included (vLLM's performance CI measures the same with the median gap, which a
  client descheduled now and then on a loaded machine pulls down: two tokens in one read);
- prefill steps: requests of P prompt tokens sent one at a time; the server's own mean TTFT
  (its Prometheus histogram `vllm:time_to_first_token_seconds`, which batchlab serve and vLLM
  both export) is the time of one prefill step of P tokens, from the request's arrival in the
  engine to its first token;
- the front end: the client's mean TTFT of those same requests minus the server's is what
  neither the engine nor the simulator sees (HTTP, parsing, handing the token back, the
  client's read), a constant per request that the replay adds to every simulated token.

The fit: measured = (the spec's step without CPU, its work slowed per kind) + fixed + per
sequence · B, by least squares on relative error (`fit_server`). The work is of two kinds
(`Slowdown`): bytes moved (weights streamed by the matrix-vector kernel of one row, the
matrix-matrix kernel's packing of its weight, KV and activations, kernel floors), which decode
steps of a few sequences are made of, and FLOPs, which prefill steps are made of. On a shared
machine the server runs both slower (or faster) than when the spec was calibrated, and not
alike: with its HTTP loop and the load generator on the same two cores, its decode steps ran
1.4-1.9 times their in-process time while its prefills ran 1.1-1.2 times. Prefill steps pin
the compute factor, decode steps of 1, 2, 4, 16 and 32 sequences the memory factor and the two
overheads; without prefill points (a server without the TTFT histogram) both factors stay 1.
A separate factor for one-row products (the matrix-vector regime) is not identifiable from
these steps: only the one-sequence decode carries it, and the fixed overhead trades off
against it, so it moves with the memory factor.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from batchlab.errors import InputError
from batchlab.serve.launch import ServeFailed, ServeProcess

WARMUP_PROMPTS = 8   # first-call allocations and lazy imports, before anything is timed
TTFT_METRIC = "vllm:time_to_first_token_seconds"


@dataclass(frozen=True, slots=True)
class Probe:
    """What to time on the server before each comparison."""

    decode_batches: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 16, 32)
    decode_input: int = 16
    decode_output: int = 32
    prefill_lens: tuple[int, ...] = (64, 256)
    prefill_requests: int = 3


@contextlib.contextmanager
def mini_server(model: str, system: str, kv_cache_tokens: int, seed: int,
                base_url: str | None = None):
    """The base URL of a `batchlab serve` started for the run (or `base_url` as it is)."""
    if base_url is not None:
        yield base_url.rstrip("/")
        return
    try:
        server = ServeProcess("--model", model, "--system", system, "--kv-cache-tokens",
                              str(kv_cache_tokens), "--seed", str(seed))
    except ServeFailed as exc:
        raise InputError(f"validate: the mini server {exc}") from None
    with server:
        yield server.url


def bench(url: str, args: list[str], directory: Path, name: str, what: str) -> dict:
    """`batchlab bench` against `url` with `args`, in its own process; its saved result."""
    cmd = [sys.executable, "-m", "batchlab.cli", "bench", "--base-url", url, *args,
           "--metric-percentiles", "50,90,99", "--save-result", "--result-dir", str(directory),
           "--result-filename", name, "--disable-tqdm", "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else done.returncode
        raise InputError(f"validate: batchlab bench ({what}) failed: {last}")
    return json.loads((directory / name).read_text())


def _fixed(prompt: int, output: int, n: int, concurrency: int) -> list[str]:
    return ["--dataset-name", "fixed", "--input-len", str(prompt), "--output-len", str(output),
            "--num-prompts", str(n), "--max-concurrency", str(concurrency)]


def warm_up(url: str, directory: Path) -> None:
    bench(url, _fixed(16, 8, WARMUP_PROMPTS, WARMUP_PROMPTS), directory, "warmup.json", "warm-up")


_SAMPLE = re.compile(r"^([A-Za-z_:][\w:]*)(\{[^}]*\})?\s+(\S+)")


def server_ttft(url: str) -> tuple[float, float] | None:
    """(sum in s, count) of the server's TTFT histogram, or None when it exports none."""
    try:
        with urllib.request.urlopen(f"{url}/metrics", timeout=5) as r:
            text = r.read().decode("utf-8", errors="replace")
    except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
        return None
    total = count = None
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m is None:
            continue
        name, value = m.group(1), m.group(3)
        if name == f"{TTFT_METRIC}_sum":
            total = (total or 0.0) + float(value)
        elif name == f"{TTFT_METRIC}_count":
            count = (count or 0.0) + float(value)
    return None if total is None or count is None else (total, count)


@dataclass(slots=True)
class ServerSteps:
    points: list            # ProfilePoints: "step" rows measured on the server
    front_end_s: float      # client TTFT minus server TTFT, per request (0 when unknown)
    client_ttft_ms: float | None = None
    server_ttft_ms: float | None = None


def measure_server(url: str, model, directory: Path, probe: Probe = Probe(),
                   tag: str = "") -> ServerSteps:
    """Time the server's prefill and decode steps and its front end (see the module doc)."""
    from batchlab.calibrate.profiles import ProfilePoint

    points: list = []
    client_sum = server_sum = served = 0.0
    for prompt in probe.prefill_lens:
        before = server_ttft(url)
        result = bench(url, _fixed(prompt, 2, probe.prefill_requests, 1), directory,
                       f"prefill{tag}-{prompt}.json", f"prefill of {prompt} tokens")
        after = server_ttft(url)
        ttfts = [t for t, e in zip(result["ttfts"], result["errors"]) if not e and t is not None]
        if before is None or after is None or after[1] - before[1] != len(ttfts) or not ttfts:
            continue  # no histogram, or other traffic on the server: no clean reading
        server_mean = (after[0] - before[0]) / (after[1] - before[1])
        client_sum += sum(ttfts)
        server_sum += after[0] - before[0]
        served += len(ttfts)
        points.append(ProfilePoint("server", len(points) + 1, "step", prompt, 1, 0, 1,
                                   server_mean * 1e3, model))
    for batch in probe.decode_batches:
        result = bench(url, _fixed(probe.decode_input, probe.decode_output, batch, batch),
                       directory, f"decode{tag}-{batch}.json", f"decode, batch {batch}")
        # Each request's mean gap between tokens (its TPOT), median over the batch: a client
        # descheduled for a moment reads two tokens at once, a gap of 0 and one of two steps,
        # which moves the median gap but not the mean. (A stream that came in one read shows
        # no step at all: no point.)
        step = result.get("median_tpot_ms") or result.get("median_itl_ms")
        if not step or not step > 0:
            continue
        points.append(ProfilePoint("server", len(points) + 1, "step", 1, batch,
                                   probe.decode_input + probe.decode_output // 2, 1, float(step),
                                   model))
    if not served:
        return ServerSteps(points, 0.0)
    front = max(0.0, (client_sum - server_sum) / served)
    return ServerSteps(points, front, 1e3 * client_sum / served, 1e3 * server_sum / served)


@dataclass(frozen=True, slots=True)
class Slowdown:
    """How much slower the server runs each kind of work than the spec's calibration did.

    The operators model prices two kinds of work: bytes moved (every memory roofline, the
    one-row matrix-vector regime, the matrix-matrix kernel's packing of its weight, which is
    the saturation term `matmul_half_tokens`, and every kernel's floor) and FLOPs (every
    compute roofline's per-row part). Decode steps of a few sequences are mostly the first,
    prefill steps mostly the second, so a server that slows its weight-streaming decode steps
    more than its compute-bound prefills is one spec, which prices every step, decode, prefill
    or mixed, the same way."""

    memory: float = 1.0
    compute: float = 1.0

    def as_dict(self) -> dict[str, float]:
        return {"memory": self.memory, "compute": self.compute}


def scaled(gpu, slow: Slowdown | float):
    """The spec with its work `slow` times slower (a number: both kinds alike).

    Rates are divided, times multiplied: peak_flops by `compute`, mem_bandwidth and the floors
    by `memory`, and matmul_half_tokens multiplied by memory / compute: the packing term is
    priced at the FLOP rate per weight, so it becomes `memory` times slower while the per-row
    FLOPs become `compute` times slower."""
    from batchlab.hardware.specs import OPERATOR_FIELDS

    if not isinstance(slow, Slowdown):
        slow = Slowdown(float(slow), float(slow))
    changes: dict[str, float] = {
        f: getattr(gpu, f) * slow.memory for f in OPERATOR_FIELDS
        if f.endswith("_floor_s") and getattr(gpu, f) is not None}
    if gpu.matmul_half_tokens is not None and slow.memory != slow.compute:
        changes["matmul_half_tokens"] = gpu.matmul_half_tokens * slow.memory / slow.compute
    return dataclasses.replace(gpu, peak_flops=gpu.peak_flops / slow.compute,
                               mem_bandwidth=gpu.mem_bandwidth / slow.memory, **changes)


FACTOR_BOUNDS = (0.1, 20.0)   # a server 10 times faster to 20 times slower than calibrated


def fit_server(points: list, gpu):
    """(spec, Slowdown): `gpu` with its work slowed per kind and its CPU overheads refitted, so
    that its steps match the server's (see the module doc).

    Least squares on relative error over (memory, compute, fixed, per sequence), every point
    priced by `predict_ms` on the scaled spec, exactly as the simulator prices its steps.
    Without prefill steps both factors stay 1: decodes alone cannot tell a slowdown from the
    overheads."""
    from scipy.optimize import least_squares

    from batchlab.calibrate.fit import predict_ms

    if not any(p.tokens == 1 for p in points):
        raise InputError("validate: no decode step of the server could be timed (each stream "
                         "came in one read: steps too short for the client to see)")
    free = dataclasses.replace(gpu, cost_model="operators", step_overhead_s=0.0,
                               seq_overhead_s=0.0)
    measured = np.asarray([p.ms for p in points])
    seqs = np.asarray([p.batch for p in points], dtype=np.float64)
    factors = 2 if any(p.tokens > 1 for p in points) else 0

    def slowdown(x) -> Slowdown:
        return Slowdown(float(x[0]), float(x[1])) if factors else Slowdown()

    def predict(x):
        spec = scaled(free, slowdown(x))
        return (np.asarray([predict_ms(p, spec) for p in points]) + x[factors]
                + x[factors + 1] * seqs)

    low = [FACTOR_BOUNDS[0]] * factors + [0.0, 0.0]
    high = [FACTOR_BOUNDS[1]] * factors + [np.inf, np.inf]
    x = least_squares(lambda x: (predict(x) - measured) / measured,
                      np.asarray([1.0] * factors + [0.1, 0.01]), bounds=(low, high),
                      x_scale="jac", method="trf").x
    slow = slowdown(x)
    spec = dataclasses.replace(scaled(free, slow), step_overhead_s=float(x[factors]) * 1e-3,
                               seq_overhead_s=float(x[factors + 1]) * 1e-3)
    return spec, slow
