"""A running server measured for `batchlab validate`: started, warmed up, and its steps timed.

The device spec from `batchlab calibrate --mini` was measured on operators in a quiet loop; the
server runs the same forward inside its engine loop, with its HTTP front end and the load
generator on the same cores, and on a shared machine at another moment. So just before and
just after each comparison the server's own steps are timed with `batchlab bench`, and the spec
is refitted to both sets (`pooled`, `fit_server`):

- decode steps: B short requests sent at once; the median over them of each one's mean gap
  between tokens in the second half of its stream (`late_step_ms`) is the time of one decode
  step of B sequences, everything the server does per step included (vLLM's performance CI
  measures the same with the median gap, which a client descheduled now and then on a loaded
  machine pulls down: two tokens in one read).
  Their prompts spread as the compared traffic's do (`spread_lengths`): a decode step costs
  more when its sequences' lengths differ (the mini server's paged kernel runs one batched
  product per bucket of lengths), so a probe of equal lengths would time a step the traffic
  never has;
- prefill steps: requests of P prompt tokens sent one at a time; the server's own mean TTFT
  (its Prometheus histogram `vllm:time_to_first_token_seconds`, which batchlab serve and vLLM
  both export) is the time of one prefill step of P tokens, from the request's arrival in the
  engine to its first token;
- the front end: the client's mean TTFT of those same requests minus the server's is what
  neither the engine nor the simulator sees (HTTP, parsing, handing the token back, the
  client's read). It grows with the streams in flight: one client process reads every stream
  and the server's event loop writes every one (near saturation it was 3-4 ms a request
  against 2 ms alone). So it is timed again beside B streams (`loaded_front_end`): B long
  requests at once, then a few short ones sent one by one while those stream, all from one
  `batchlab bench`, as a run's requests share one client process. The server's TTFT
  histogram is read once the short ones are done and before any long one is, which isolates
  their server TTFT. A line through these points (`fit_front_end`: per request + per stream in
  flight) is what the replay adds to each simulated request's tokens, with the streams of the
  step that gives it its first token.

The fit: measured = (the spec's step without CPU, its work slowed per kind) + fixed + per
sequence · B + per bucket · G, by least squares on relative error (`fit_server`). G counts the
batched products of the paged decode kernel (`paged_attention.bucket_count`, over the probe's
lengths where its timed steps are): 1 to 4 sequences of spread lengths make as many buckets,
more make about 5, so the step's cost is concave in B where a per-sequence cost alone is
straight, and steps of 3 to 8 sequences came out 4-9% under without it. The work is of two kinds
(`Slowdown`): bytes moved (weights streamed by the matrix-vector kernel of one row, the
matrix-matrix kernel's packing of its weight, KV and activations, kernel floors), which decode
steps of a few sequences are made of, and FLOPs, which prefill steps are made of. On a shared
machine the server runs both slower (or faster) than when the spec was calibrated, and not
alike: with its HTTP loop and the load generator on the same two cores, its decode steps ran
1.4-1.9 times their in-process time while its prefills ran 1.1-1.2 times. Prefill steps pin
the compute factor, decode steps of 1 to 32 sequences the memory factor and the two
overheads; without prefill points (a server without the TTFT histogram) both factors stay 1.
A separate factor for one-row products (the matrix-vector regime) is not identifiable from
these steps: only the one-sequence decode carries it, and the fixed overhead trades off
against it, so it moves with the memory factor.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
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
    # Prompt lengths of the traffic to be compared: decode probes take theirs from its spread
    # (`spread_lengths`); empty: every probe prompt is decode_input long.
    decode_prompts: tuple[int, ...] = ()
    prefill_lens: tuple[int, ...] = (64, 256)
    prefill_requests: int = 3
    block_tokens: int = 16   # the server's KV block: its paged decode attention buckets in blocks
    # The front end beside this many streams in flight (`loaded_front_end`); empty: alone only.
    loaded_streams: tuple[int, ...] = (8, 24)
    loaded_requests: int = 4


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
        raise InputError(f"validate: the mini server {last_line(str(exc))}") from None
    with server:
        yield server.url


def _bench_cmd(url: str, args: list[str], directory: Path, name: str) -> list[str]:
    return [sys.executable, "-m", "batchlab.cli", "bench", "--base-url", url, *args,
            "--metric-percentiles", "50,90,99", "--save-result", "--result-dir", str(directory),
            "--result-filename", name, "--disable-tqdm", "--json"]


def last_line(text: str) -> str:
    """A child's failure as one line: its first line (what it was doing) and, when its stderr
    ran on (a traceback, a log), the last one (the error itself)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if len(lines) <= 1:
        return lines[0] if lines else text.strip()
    return f"{lines[0]} ... {lines[-1]}"


def _bench_result(returncode: int, stderr: str, directory: Path, name: str, what: str) -> dict:
    if returncode != 0:
        last = stderr.strip().splitlines()[-1] if stderr.strip() else returncode
        raise InputError(f"validate: batchlab bench ({what}) failed: {last}")
    return json.loads((directory / name).read_text())


def bench(url: str, args: list[str], directory: Path, name: str, what: str) -> dict:
    """`batchlab bench` against `url` with `args`, in its own process; its saved result."""
    done = subprocess.run(_bench_cmd(url, args, directory, name), capture_output=True, text=True)
    return _bench_result(done.returncode, done.stderr, directory, name, what)


def _fixed(prompt: int, output: int, n: int, concurrency: int) -> list[str]:
    return ["--dataset-name", "fixed", "--input-len", str(prompt), "--output-len", str(output),
            "--num-prompts", str(n), "--max-concurrency", str(concurrency)]


def spread_lengths(lengths, n: int) -> list[int]:
    """n lengths at evenly spaced quantiles ((i + 1/2) / n) of `lengths`: n requests whose
    lengths spread as the whole list's do (n = 1: its median)."""
    ordered = np.sort(np.asarray(lengths, dtype=np.int64))
    at = ((np.arange(n) + 0.5) * len(ordered) / n).astype(np.int64)
    return ordered[at].tolist()


def _decode_probe(probe: Probe, batch: int, directory: Path, name: str) -> tuple[list[str], list[int]]:
    """(bench flags, prompt lengths) of the decode probe of `batch` sequences: the fixed
    dataset, or a trace file of the spread prompts, all sent at once."""
    if not probe.decode_prompts:
        return _fixed(probe.decode_input, probe.decode_output, batch, batch), [probe.decode_input] * batch
    prompts = spread_lengths(probe.decode_prompts, batch)
    path = directory / name
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                    + "".join(f"0,{p},{probe.decode_output}\n" for p in prompts))
    flags = ["--dataset-name", "trace", "--dataset-path", str(path), "--num-prompts",
             str(batch), "--max-concurrency", str(batch)]
    return flags, prompts


# Where in its stream a decode probe's request is, on average, over the second half of its gaps.
LATE_CONTEXT = 0.75


def late_step_ms(result: dict) -> float | None:
    """A decode probe's step in ms: each request's mean gap between tokens over the second half
    of its stream, median over the batch; None when no stream shows a step.

    The first half is left out: requests sent at once reach the engine over a few steps, and
    the prompts still prefilling, chunked beside the first decodes, make those steps dearer
    (prompts of 32-96 tokens for 32 requests do not fit one step's budget). A mean over gaps,
    not their median: a client descheduled for a moment reads two tokens at once, a gap of 0
    and one of two steps, which moves the median gap but not the mean."""
    steps = []
    for error, gaps in zip(result["errors"], result["itls"]):
        late = [] if error or not gaps else gaps[len(gaps) // 2:]
        if late and sum(late) > 0:
            steps.append(1e3 * sum(late) / len(late))
    return float(np.median(steps)) if steps else None


def warm_up(url: str, directory: Path) -> None:
    bench(url, _fixed(16, 8, WARMUP_PROMPTS, WARMUP_PROMPTS), directory, "warmup.json", "warm-up")


_SAMPLE = re.compile(r"^([A-Za-z_:][\w:]*)(\{[^}]*\})?\s+(\S+)")


# The server's own histograms of its steps (batchlab serve's; a server without them gives none).
STEP_METRICS = ("batchlab:step_duration_seconds", "batchlab:step_batch_size")


def server_histograms(url: str, names) -> dict[str, tuple[float, float]] | None:
    """(sum, count) of each named Prometheus histogram the server exports at /metrics, summed
    over its labels; None when /metrics cannot be read. A name it does not export is left out."""
    try:
        with urllib.request.urlopen(f"{url}/metrics", timeout=5) as r:
            text = r.read().decode("utf-8", errors="replace")
    except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
        return None
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m is None:
            continue
        name, value = m.group(1), float(m.group(3))
        base, _, part = name.rpartition("_")
        if base in names and part in ("sum", "count"):
            into = sums if part == "sum" else counts
            into[base] = into.get(base, 0.0) + value
    return {n: (sums[n], counts[n]) for n in names if n in sums and n in counts}


def server_ttft(url: str) -> tuple[float, float] | None:
    """(sum in s, count) of the server's TTFT histogram, or None when it exports none."""
    found = server_histograms(url, (TTFT_METRIC,))
    return None if not found else found[TTFT_METRIC]


def step_summary(before: dict | None, after: dict | None) -> dict | None:
    """The server's steps between two readings of STEP_METRICS: how many, their mean wall time
    (ms) and mean batch (requests computed in one); None without both histograms."""
    if not before or not after or any(n not in before or n not in after for n in STEP_METRICS):
        return None
    duration, batch = STEP_METRICS
    count = after[duration][1] - before[duration][1]
    if count <= 0:
        return None
    return {"count": int(count),
            "mean_ms": 1e3 * (after[duration][0] - before[duration][0]) / count,
            "mean_batch": (after[batch][0] - before[batch][0]) / count}


@dataclass(slots=True)
class ServerSteps:
    points: list            # ProfilePoints: "step" rows measured on the server
    front_end_s: float      # client TTFT minus server TTFT, per request (0 when unknown)
    client_ttft_ms: float | None = None
    server_ttft_ms: float | None = None
    buckets: list = field(default_factory=list)   # per point: its step's decode buckets (0: a prefill)
    loaded: list = field(default_factory=list)    # (streams in flight, front end s) beside streams


def measure_server(url: str, model, directory: Path, probe: Probe = Probe(),
                   tag: str = "") -> ServerSteps:
    """Time the server's prefill and decode steps and its front end (see the module doc)."""
    from batchlab.calibrate.profiles import ProfilePoint
    from batchlab.model.paged_attention import bucket_count

    points: list = []
    buckets: list[float] = []
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
        buckets.append(0.0)
    for batch in probe.decode_batches:
        flags, prompts = _decode_probe(probe, batch, directory, f"decode{tag}-{batch}.csv")
        result = bench(url, flags, directory, f"decode{tag}-{batch}.json", f"decode, batch {batch}")
        step = late_step_ms(result)
        if step is None:
            continue
        prompt = round(sum(prompts) / batch)   # the mean prompt
        points.append(ProfilePoint("server", len(points) + 1, "step", 1, batch,
                                   round(prompt + LATE_CONTEXT * probe.decode_output), 1, step,
                                   model))
        late = round(LATE_CONTEXT * probe.decode_output)   # where the timed steps are, on average
        buckets.append(float(bucket_count([p + late for p in prompts], probe.block_tokens)))
    if not served:
        return ServerSteps(points, 0.0, buckets=buckets)
    front = max(0.0, (client_sum - server_sum) / served)
    loaded = []
    for streams in probe.loaded_streams:
        measured = loaded_front_end(url, probe, streams, points, directory, tag)
        if measured is not None:
            loaded.append((streams, measured))
    return ServerSteps(points, front, 1e3 * client_sum / served, 1e3 * server_sum / served, buckets,
                       loaded)


# Short requests beside the streams: one every LOADED_GAP_S, from when the long ones are all
# prefilled (priced from the prefill probes, times LOADED_SLACK) until LOADED_TAIL_S before
# the long ones would end (their length sized from the decode probes' steps).
LOADED_GAP_S, LOADED_SLACK, LOADED_TAIL_S = 0.08, 1.5, 0.5
LOADED_OUTPUT = 2
LOADED_POLL_S = 0.02


def loaded_front_end(url: str, probe: Probe, streams: int, points: list, directory: Path,
                     tag: str) -> float | None:
    """The front end (client TTFT minus the server's, s) of `probe.loaded_requests` short
    requests sent one by one while `streams` long ones stream, all from one `batchlab bench`;
    None without the prefill and decode probes' steps to size it, or without a clean reading
    (a long request done before the short ones, other traffic on the server, or a server that
    counts a TTFT at the first token, as vLLM does: there the long ones count first, and the
    front end stays the one measured alone)."""
    prefills = [p for p in points if p.tokens > 1]
    decodes = sorted((p for p in points if p.tokens == 1), key=lambda p: p.batch)
    if not prefills or not decodes:
        return None
    lengths = (spread_lengths(probe.decode_prompts, streams) if probe.decode_prompts
               else [probe.decode_input] * streams)
    short = lengths[len(lengths) // 2]
    widest = max(prefills, key=lambda p: p.tokens)
    first = LOADED_SLACK * sum(lengths) * widest.ms / widest.tokens * 1e-3
    step = next((p for p in decodes if p.batch >= streams), decodes[-1]).ms * 1e-3
    n = probe.loaded_requests
    output = math.ceil((first + n * LOADED_GAP_S + LOADED_TAIL_S) / step)
    path = directory / f"loaded{tag}-{streams}.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                    + "".join(f"0,{p},{output}\n" for p in lengths)
                    + "".join(f"{first + k * LOADED_GAP_S:.4f},{short},{LOADED_OUTPUT}\n"
                              for k in range(n)))
    name = f"loaded{tag}-{streams}.json"
    flags = ["--dataset-name", "trace", "--dataset-path", str(path),
             "--num-prompts", str(streams + n)]
    before = server_ttft(url)
    if before is None:
        return None
    with subprocess.Popen(_bench_cmd(url, flags, directory, name), stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True) as proc:
        reading = before   # the server counts a request's TTFT when the request ends
        while proc.poll() is None and reading is not None and reading[1] - before[1] < n:
            time.sleep(LOADED_POLL_S)
            reading = server_ttft(url)
        stderr = proc.communicate()[1]
    result = _bench_result(proc.returncode, stderr, directory, name,
                           f"front end beside {streams} streams")
    if reading is None or reading[1] - before[1] != n:
        return None
    later = np.argsort(result["start_times"], kind="stable")[-n:]   # the short ones
    ttfts = [result["ttfts"][i] for i in later]
    if any(result["errors"][i] or t is None for i, t in zip(later, ttfts)):
        return None
    return max(0.0, sum(ttfts) / n - (reading[0] - before[0]) / n)


def pooled(*sets: ServerSteps) -> ServerSteps:
    """Probe sets taken at different moments as one: every point, and the front end and TTFTs
    averaged over the sets that measured them."""
    def mean(values):
        known = [v for v in values if v is not None]
        return sum(known) / len(known) if known else None

    fronts = [s.front_end_s for s in sets if s.client_ttft_ms is not None]
    return ServerSteps([p for s in sets for p in s.points], mean(fronts) or 0.0,
                       mean([s.client_ttft_ms for s in sets]),
                       mean([s.server_ttft_ms for s in sets]), [b for s in sets for b in s.buckets],
                       [point for s in sets for point in s.loaded])


@dataclass(frozen=True, slots=True)
class FrontEnd:
    """What the client and the HTTP front end add to a request's tokens: a fixed part and a
    part per other stream in flight when its first token comes."""

    base_s: float = 0.0
    per_stream_s: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return {"front_end_ms": self.base_s * 1e3, "front_end_ms_per_stream": self.per_stream_s * 1e3}


def probe_drift(before: ServerSteps, after: ServerSteps) -> list[float]:
    """For each probe timed in both sets, in `after`'s order, its step after / before - 1: how
    far the same step on the same server moved in the seconds between the two sets. It is the
    machine's own noise, the floor under any error a run can show against probes around it."""
    earlier = {(p.tokens, p.batch, p.context): p.ms for p in before.points}
    return [p.ms / earlier[key] - 1.0 for p in after.points
            if earlier.get(key := (p.tokens, p.batch, p.context), 0.0) > 0.0]


def fit_front_end(steps: ServerSteps) -> FrontEnd:
    """The least-squares line through the front end alone (0 streams, each probe set's) and
    beside streams; without loaded points, the front end alone (as before any growth was
    measured). Both parts are kept at 0 or more."""
    alone = [steps.front_end_s] if steps.client_ttft_ms is not None else []
    x = np.asarray([0.0] * len(alone) + [b for b, _ in steps.loaded], dtype=np.float64)
    y = np.asarray(alone + [f for _, f in steps.loaded], dtype=np.float64)
    if len(set(x.tolist())) < 2:
        return FrontEnd(float(y.mean()) if len(y) else steps.front_end_s)
    slope, base = np.polyfit(x, y, 1)
    if slope < 0:
        return FrontEnd(float(y.mean()))
    if base < 0:
        return FrontEnd(0.0, float(x @ y / (x @ x)))
    return FrontEnd(float(base), float(slope))


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

    Rates are divided, times multiplied: peak_flops by `compute`, mem_bandwidth, the per-token
    kernels' row bandwidths, the floors and a gather's time per row by `memory`, and matmul_half_tokens multiplied by
    memory / compute: the packing term is priced at the FLOP rate per weight, so it becomes
    `memory` times slower while the per-row FLOPs become `compute` times slower."""
    from batchlab.hardware.specs import OPERATOR_FIELDS

    if not isinstance(slow, Slowdown):
        slow = Slowdown(float(slow), float(slow))
    changes: dict[str, float] = {}
    for f in OPERATOR_FIELDS:
        value = getattr(gpu, f)
        if value is not None and f.endswith(("_floor_s", "_index_s")):
            changes[f] = value * slow.memory
        elif value is not None and f.endswith("_row_bandwidth"):
            changes[f] = value / slow.memory
    if gpu.matmul_half_tokens is not None and slow.memory != slow.compute:
        changes["matmul_half_tokens"] = gpu.matmul_half_tokens * slow.memory / slow.compute
    return dataclasses.replace(gpu, peak_flops=gpu.peak_flops / slow.compute,
                               mem_bandwidth=gpu.mem_bandwidth / slow.memory, **changes)


FACTOR_BOUNDS = (0.1, 20.0)   # a server 10 times faster to 20 times slower than calibrated


def fit_server(points: list, gpu, buckets: list | None = None, block_tokens: int = 16):
    """(spec, Slowdown): `gpu` with its work slowed per kind and its CPU overheads refitted, so
    that its steps match the server's (see the module doc).

    Least squares on relative error over (memory, compute, fixed, per sequence and, given each
    point's decode `buckets`, per bucket of the paged decode attention in blocks of
    `block_tokens`), every point priced by `predict_ms` on the scaled spec, exactly as the
    simulator prices its steps. Without prefill steps both factors stay 1: decodes alone cannot
    tell a slowdown from the overheads."""
    from scipy.optimize import least_squares

    from batchlab.calibrate.fit import predict_ms

    if not any(p.tokens == 1 for p in points):
        raise InputError("validate: no decode step of the server could be timed (each stream "
                         "came in one read: steps too short for the client to see)")
    free = dataclasses.replace(gpu, cost_model="operators", step_overhead_s=0.0,
                               seq_overhead_s=0.0, bucket_overhead_s=0.0)
    measured = np.asarray([p.ms for p in points])
    seqs = np.asarray([p.batch for p in points], dtype=np.float64)
    groups = None if buckets is None else np.asarray(buckets, dtype=np.float64)
    factors = 2 if any(p.tokens > 1 for p in points) else 0
    overheads = 2 if groups is None else 3

    def slowdown(x) -> Slowdown:
        return Slowdown(float(x[0]), float(x[1])) if factors else Slowdown()

    def predict(x):
        spec = scaled(free, slowdown(x))
        out = np.asarray([predict_ms(p, spec) for p in points]) + x[factors] + x[factors + 1] * seqs
        return out if groups is None else out + x[factors + 2] * groups

    low = [FACTOR_BOUNDS[0]] * factors + [0.0] * overheads
    high = [FACTOR_BOUNDS[1]] * factors + [np.inf] * overheads
    x = least_squares(lambda x: (predict(x) - measured) / measured,
                      np.asarray([1.0] * factors + [0.1, 0.01, 0.1][:overheads]), bounds=(low, high),
                      x_scale="jac", method="trf").x
    slow = slowdown(x)
    spec = dataclasses.replace(scaled(free, slow), step_overhead_s=float(x[factors]) * 1e-3,
                               seq_overhead_s=float(x[factors + 1]) * 1e-3)
    if groups is not None:
        spec = dataclasses.replace(spec, bucket_overhead_s=float(x[factors + 2]) * 1e-3,
                                   bucket_block_tokens=block_tokens)
    return spec, slow
