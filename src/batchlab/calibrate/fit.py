"""Fit a GPU spec's operator parameters to measured times by least squares on relative error.

Each group of parameters is fitted from the points of its operators alone (they share no
parameter): matmul, attn_prefill, attn_decode (its compute side uses attn_prefill's mfu),
norm, elementwise, the all-reduce and send links, and last the CPU overhead from whole-step
points (linear once the operators are fitted). A group without points keeps the base spec's
values. The residual is (predicted - measured) / measured, so a 10 us kernel weighs as much as a
10 ms one, and the parameters are bounded to physical ranges (efficiencies in (0, 1]).

A GPU's matmul tiles (opcost.py: `matmul_tile_rows`, `matmul_tile_cols`) are discrete: on a base
spec with an `sm_count` every tile shape of TILE_SIZES, rows alone or rows and columns in waves,
and no tiles at all, is fitted in turn and the lowest cost wins, so the profiles choose whether
tile or wave quantisation describes the GPU. The winner's shortest tile for a thin product
(`matmul_min_tile_rows`, MIN_TILE_HEIGHTS) is chosen the same way after it. A CPU base (no `sm_count`, BLAS's matrix-vector
regime `matmul_vector_mbu`) without tiles of its own tries none and row tiles alone, of
REGISTER_TILE_ROWS: a CPU BLAS kernel computes its output a few rows at a time from registers
and handles the rows left over with narrower kernels (`batchlab calibrate --mini` timed 3 rows
as dear as 4 and 7 as 8). Any other base keeps its own.

On a GPU base each tile setting is fitted twice, on the hard roofline with the saturation curve
and on the smooth roofline with a floor by regime, and each per-token kernel (norm, rope, act,
add, embedding, elementwise) tries no row term and 1, 2, 4 or 8 rows per SM: the profiles
choose (opcost.py describes both).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from batchlab.calibrate.profiles import ProfilePoint
from batchlab.errors import InputError
from batchlab.io_checks import brief
from batchlab.hardware.opcost import (
    FLAT_ROOFLINE_P,
    OP_CLASS,
    ClassParams,
    Dims,
    OperatorCost,
    class_params,
    few_rows,
    MIN_TILE_ROWS,
    kernel_floor,
    op_class,
    op_time,
    op_work,
    paid_rows,
    roofline,
    row_waves,
    uniform_shape,
)
from batchlab.hardware.parallel import Layout, allreduce_s, send_s
from batchlab.hardware.specs import FLAT_KERNELS, ROW_KERNELS, GPUSpec

US = 1e-6
GB = 1e9


@dataclass(frozen=True, slots=True)
class Param:
    field: str       # GPUSpec field
    scale: float     # fitted value * scale = the field's value (floors in us, bandwidths in GB/s)
    low: float
    high: float
    starts: tuple    # initial values tried (in fitted units); the best fit wins


EFF = (1e-3, 1.0)
GROUPS: dict[str, tuple[tuple[str, ...], tuple[Param, ...]]] = {
    "matmul": (("qkv", "o", "up", "down", "lm_head"), (
        Param("matmul_mfu", 1.0, *EFF, (0.6,)), Param("matmul_mbu", 1.0, *EFF, (0.7,)),
        Param("matmul_half_tokens", 1.0, 0.0, 1e5, (1.0, 64.0)),
        Param("matmul_floor_s", US, 0.0, 1e5, (2.0,)))),
    "attn_prefill": (("attn_prefill",), (
        Param("attn_prefill_mfu", 1.0, *EFF, (0.4,)), Param("attn_prefill_mbu", 1.0, *EFF, (0.7,)),
        Param("attn_prefill_floor_s", US, 0.0, 1e5, (5.0,)))),
    "attn_decode": (("attn_decode",), (
        # Two starts: where the model has decode attention compute-bound (a CPU's batched
        # products of a few query rows) the efficiency has no gradient at the first.
        Param("attn_decode_mbu", 1.0, *EFF, (0.7, 0.1)),
        Param("attn_decode_floor_s", US, 0.0, 1e5, (5.0,)))),
    "norm": (("norm", "final_norm", "add_norm"), (
        Param("norm_mbu", 1.0, *EFF, (0.5,)), Param("norm_floor_s", US, 0.0, 1e5, (2.0,)))),
    "elementwise": (("kv_write",), (
        Param("elementwise_mbu", 1.0, *EFF, (0.5,)),
        Param("elementwise_floor_s", US, 0.0, 1e5, (2.0,)))),
    **{kind: ((kind,), (Param(f"{kind}_mbu", 1.0, *EFF, (0.5,)),
                        Param(f"{kind}_floor_s", US, 0.0, 1e5, (2.0,))))
       for kind in ("rope", "act", "add", "embedding")},
    "all_reduce": (("all_reduce",), (
        Param("allreduce_bandwidth", GB, 1e-3, 1e5, (100.0,)),
        Param("allreduce_latency_s", US, 0.0, 1e5, (10.0,)))),
    "send_recv": (("send_recv",), (
        Param("p2p_bandwidth", GB, 1e-3, 1e5, (100.0,)),
        Param("p2p_latency_s", US, 0.0, 1e5, (10.0,)))),
}
# A base spec that carries `matmul_vector_mbu` (one-row products in their own matrix-vector
# regime, opcost.py) has it fitted with the other matmul parameters; the others never grow one.
VECTOR = Param("matmul_vector_mbu", 1.0, *EFF, (0.5,))
# A GPU base's matmul fit also tries the smooth roofline with a floor by regime (opcost.py) in
# place of the saturation curve: matmul_half_tokens gives way to these (`matmul_candidates`).
GPU_MATMUL = (Param("matmul_roofline_p", 1.0, 1.0, 64.0, (1.5, 4.0)),
              Param("matmul_compute_floor_s", US, 0.0, 1e5, (5.0,)))
# A GPU base's embedding also fits its gather's time per row of few rows (opcost.SMALL_INDEX_MAX:
# PyTorch's small-index kernel); a CPU's gather has no such regime.
INDEX = Param("embedding_index_s", US, 0.0, 1e3, (0.5,))
# A GPU base's per-token kernels try each count of rows per SM (and none): the thread blocks
# of one row each that an SM holds at once (one to eight for kernels of 256-1,024 threads).
ROWS_PER_SM = (1, 2, 4, 8)
STEP_FIELDS = ("step_overhead_s", "seq_overhead_s")
# GEMM tile edges tried by the fit: the thread-block tiles CUTLASS ships for Ampere and Hopper
# tensor cores (64, 128, 256 rows or columns; cuBLAS picks among the same kernels).
TILE_SIZES = (64, 128, 256)
TILE_FIELDS = ("matmul_tile_rows", "matmul_tile_cols")
# The shortest tiles a thin product may run on a GPU (a tensor core's MMA is 16 rows; CUTLASS
# ships 32- and 64-row tiles): tried once the tiles are chosen (`_fit_group`), the profiles
# choosing how a decode's few rows are paid for.
MIN_TILE_HEIGHTS = (16, 32, 64)
# Row blocks of CPU GEMM micro-kernels (OpenBLAS and BLIS register blocks run 2 to 16 rows).
REGISTER_TILE_ROWS = (2, 4, 8, 16)
GROUP_OF = {op: group for group, (ops, _) in GROUPS.items() for op in ops}
GROUP_OF["step"] = "step"
# Fields chosen with a group beside its own parameters, by group.
CHOSEN_WITH = {**{f: "matmul" for f in (*TILE_FIELDS, "matmul_min_tile_rows", VECTOR.field,
                                       *(p.field for p in GPU_MATMUL))},
               **{f"{kind}_{f}": kind for kind in ROW_KERNELS
                  for f in ("row_bandwidth", "rows_per_sm")},
               INDEX.field: "embedding"}
HOLD_OUT_FIELDS = ("op", "tp", "tokens", "batch", "context", "source")
# Points of a group on which its tile candidates and starts are compared (`_fit_group`).
SEARCH_POINTS = 5_000


def group_of(point: ProfilePoint) -> str:
    """The parameter group a point is fitted in: its operator's, or where the model runs the
    operator on another class's kernel (a plain MLP's activation, `op_class`) that class's."""
    if point.model is not None and point.op in OP_CLASS:
        kind = op_class(point.op, point.model)
        if kind != OP_CLASS[point.op] and kind in GROUPS:
            return kind
    return GROUP_OF[point.op]


def predict_ms(point: ProfilePoint, gpu: GPUSpec) -> float:
    """What the operators model says the point should take, in ms."""
    if point.op == "all_reduce":
        return allreduce_s(gpu, point.nbytes, point.tp) * 1e3
    if point.op == "send_recv":
        return send_s(gpu, point.nbytes) * 1e3
    shape = uniform_shape(point.batch, point.context, point.tokens)
    if point.op == "step":
        return float(OperatorCost(point.model, gpu, Layout(tp=point.tp)).step_time(shape)) * 1e3
    work = op_work(point.op, Dims.of(point.model, point.tp), shape)
    return point.instances * float(op_time(class_params(gpu)[op_class(point.op, point.model)],
                                           *work)) * 1e3


def group_params(group: str, gpu: GPUSpec) -> tuple[Param, ...]:
    """The parameters fitted for `group` from a base spec `gpu` (a per-token kernel's row
    bandwidth comes with its rows per SM: `row_candidates`)."""
    params = GROUPS[group][1]
    if group == "matmul" and gpu.matmul_roofline_p is not None:
        params = (*(p for p in params if p.field != "matmul_half_tokens"), *GPU_MATMUL)
    if group == "matmul" and gpu.matmul_vector_mbu is not None:
        params = (*params, dataclasses.replace(VECTOR, starts=(gpu.matmul_vector_mbu,)))
    if group in ROW_KERNELS and getattr(gpu, f"{group}_rows_per_sm") is not None:
        params = (*params, Param(f"{group}_row_bandwidth", GB, 1e-3, 1e5, (10.0, 50.0)))
    if group == "embedding" and gpu.sm_count is not None:
        params = (*params, INDEX)
    return params


def _works(points: list[ProfilePoint]):
    """(FLOPs, bytes, rows, cols) arrays of operator points (cols 0 but for matrix products);
    the parameters never change them."""
    out = [op_work(p.op, Dims.of(p.model, p.tp), uniform_shape(p.batch, p.context, p.tokens))
           for p in points]
    return tuple(np.asarray([w[i] if i < len(w) else 0.0 for w in out], dtype=np.float64)
                 for i in range(4))


def tile_candidates(gpu: GPUSpec) -> list[dict]:
    """The tile settings the matmul fit tries (module docstring)."""
    if gpu.sm_count is None:
        if gpu.matmul_vector_mbu is None or gpu.matmul_tile_rows is not None:
            return [{f: getattr(gpu, f) for f in TILE_FIELDS}]
        return [dict.fromkeys(TILE_FIELDS)] + [
            {"matmul_tile_rows": rows, "matmul_tile_cols": None} for rows in REGISTER_TILE_ROWS]
    return [dict.fromkeys(TILE_FIELDS)] + [
        {"matmul_tile_rows": rows, "matmul_tile_cols": cols}
        for rows in TILE_SIZES for cols in (None, *TILE_SIZES)]


def matmul_candidates(gpu: GPUSpec) -> list[dict]:
    """Every tile setting, on a GPU base each twice: on the hard roofline with the saturation
    curve and one floor, and on the smooth roofline with the floor by regime (GPU_MATMUL; the
    values set here only mark the candidate, the fit replaces them). The lowest cost wins."""
    tiles = tile_candidates(gpu)
    if gpu.sm_count is None:
        return tiles
    # The shortest tile starts at the default; `min_tile_candidates` tries the others.
    hard = {"matmul_roofline_p": None, "matmul_compute_floor_s": None, "matmul_min_tile_rows": None}
    smooth = {"matmul_roofline_p": 2.0, "matmul_compute_floor_s": 0.0, "matmul_half_tokens": None,
              "matmul_min_tile_rows": None}
    return [{**t, **hard} for t in tiles] + [{**t, **smooth} for t in tiles]


def row_candidates(group: str, gpu: GPUSpec) -> list[dict]:
    """The rows per SM a per-token kernel's fit tries: on a GPU base none and ROWS_PER_SM, the
    profiles choosing; on any other base its own. PyTorch's flat elementwise kernels
    (FLAT_KERNELS) spread all of a tensor's elements over the GPU, whatever its rows: none."""
    if group not in ROW_KERNELS:
        return [{}]
    field = f"{group}_rows_per_sm"
    if group in FLAT_KERNELS:
        return [{field: None}]
    if gpu.sm_count is None:
        return [{field: getattr(gpu, field)}]
    return [{field: None}] + [{field: n} for n in ROWS_PER_SM]


def _residual_fn(group: str, points: list[ProfilePoint], gpu: GPUSpec, params: tuple[Param, ...],
                 works=None):
    """Relative errors as a function of the parameters; `works`: `_works(points)`, made once
    for all of a group's candidates (it is most of the cost on a large profile)."""
    # A point timing several instances of its kernel is priced as that many.
    measured = np.asarray([p.ms / p.instances for p in points]) * 1e-3
    if group in ("all_reduce", "send_recv"):
        size = np.asarray([p.nbytes for p in points])
        workers = np.asarray([p.tp for p in points], dtype=np.float64)
        factor = 2.0 * (workers - 1) / workers if group == "all_reduce" else np.ones_like(size)

        def predict(x):
            return x[1] * US + factor * size / (x[0] * GB)
    else:
        flops, nbytes, rows, cols = works if works is not None else _works(points)
        peak, bw = gpu.peak_flops, gpu.mem_bandwidth
        paid = rows  # the rows a matmul pays for: whole tiles and waves when the spec has them
        if group == "matmul" and gpu.matmul_tile_rows is not None:
            tiles = ClassParams(1.0, 1.0, 0.0, 0.0, 0.0, float(gpu.matmul_tile_rows),
                                float(gpu.matmul_tile_cols or 0), float(gpu.sm_count or 0),
                                min_tile_rows=float(gpu.matmul_min_tile_rows or MIN_TILE_ROWS))
            paid = paid_rows(tiles, rows, cols)
        per_sm = getattr(gpu, f"{group}_rows_per_sm", None)
        # A per-token kernel's waves of rows (cols holds its bytes per row).
        waves = row_waves(rows, float(per_sm * gpu.sm_count)) if per_sm else None
        names = [p.field for p in params]

        def predict(x):
            v = dict(zip(names, x))
            if group == "matmul":
                mfu, mbu, half, floor = v["matmul_mfu"], v["matmul_mbu"], \
                    v.get("matmul_half_tokens", 0.0), v["matmul_floor_s"]
            elif group == "attn_prefill":
                mfu, mbu, half, floor = v["attn_prefill_mfu"], v["attn_prefill_mbu"], 0.0, \
                    v["attn_prefill_floor_s"]
            elif group == "attn_decode":
                mfu, mbu, half, floor = gpu.op_param("attn_prefill_mfu"), v["attn_decode_mbu"], \
                    0.0, v["attn_decode_floor_s"]
            else:
                mfu, mbu, half, floor = gpu.mfu, v[f"{group}_mbu"], 0.0, v[f"{group}_floor_s"]
            compute = flops / (peak * mfu) * ((paid + half) / rows)
            memory = nbytes / (bw * mbu)
            if waves is not None:
                memory = np.maximum(memory, waves * cols / (v[f"{group}_row_bandwidth"] * GB))
            if group in FLAT_KERNELS:   # the launch floor and the stream (opcost.op_time)
                return roofline(floor * US, np.maximum(compute, memory), FLAT_ROOFLINE_P)
            compute_floor = v.get("matmul_compute_floor_s")   # the floor by regime, when fitted
            fixed = kernel_floor(floor * US, None if compute_floor is None else compute_floor * US,
                                 compute, memory)
            time = roofline(compute, memory, v.get("matmul_roofline_p", 0.0)) + fixed
            if "embedding_index_s" in v:  # a gather of few rows, one after another
                time = few_rows(rows, floor * US + rows * (v["embedding_index_s"] * US), time)
            if "matmul_vector_mbu" in v:  # one row: the matrix-vector kernel
                vector = np.maximum(flops / (peak * mfu), nbytes / (bw * v["matmul_vector_mbu"]))
                time = np.where(rows == 1, vector + floor * US, time)
            return time

    return lambda x: (predict(x) - measured) / measured


def min_tile_candidates(gpu: GPUSpec, tiles: dict) -> list[dict]:
    """The chosen tiles with each shorter tile a thin product may run (MIN_TILE_HEIGHTS), on a
    GPU base whose products have row tiles of more than the shortest height; else none."""
    rows = tiles.get("matmul_tile_rows")
    if gpu.sm_count is None or rows is None or rows <= min(MIN_TILE_HEIGHTS):
        return []
    return [{**tiles, "matmul_min_tile_rows": h} for h in MIN_TILE_HEIGHTS
            if h < rows and h != MIN_TILE_ROWS]


def _search(group: str, points: list[ProfilePoint], gpu: GPUSpec, works, candidates):
    """(least-squares result, candidate, parameters, bounds) of the lowest cost over the
    candidates (fields set on `gpu`) and each one's starts."""
    from itertools import product

    from scipy.optimize import least_squares

    best, best_tiles, best_params, best_bounds = None, {}, (), None
    for tiles in candidates:
        trial = dataclasses.replace(gpu, **tiles)
        params = group_params(group, trial)
        low = np.asarray([p.low for p in params])
        high = np.asarray([p.high for p in params])
        residual = _residual_fn(group, points, trial, params, works)
        for start in product(*(p.starts for p in params)):
            result = least_squares(residual, np.clip(np.asarray(start, dtype=np.float64), low,
                                                     high),
                                   bounds=(low, high), x_scale="jac", method="trf")
            if best is None or result.cost < best.cost:
                best, best_tiles, best_params, best_bounds = result, tiles, params, (low, high)
    return best, best_tiles, best_params, best_bounds


def _fit_group(group: str, points: list[ProfilePoint], gpu: GPUSpec) -> dict[str, float]:
    from scipy.optimize import least_squares

    # A large group picks its tiles and start on an even sample of its points, then refits the
    # winner on all of them: a 100,000-row profile fits in seconds, and every profile of up to
    # SEARCH_POINTS points per group fits exactly as it always has.
    search = points if len(points) <= SEARCH_POINTS else points[::-(-len(points) // SEARCH_POINTS)]
    works = None if group in ("all_reduce", "send_recv") else _works(search)
    best = _search(group, search, gpu, works,
                   matmul_candidates(gpu) if group == "matmul" else row_candidates(group, gpu))
    heights = min_tile_candidates(gpu, best[1]) if group == "matmul" else []
    if heights:
        narrow = _search(group, search, gpu, works, heights)
        if narrow[0].cost < best[0].cost:
            best = narrow
    best, best_tiles, best_params, best_bounds = best
    if search is not points:
        residual = _residual_fn(group, points, dataclasses.replace(gpu, **best_tiles), best_params)
        best = least_squares(residual, best.x, bounds=best_bounds, x_scale="jac", method="trf")
    out = {**best_tiles, **{p.field: float(x) * p.scale for p, x in zip(best_params, best.x)}}
    if group in ROW_KERNELS and out.get(f"{group}_rows_per_sm") is None:
        out[f"{group}_row_bandwidth"] = None
    return out


def _fit_overhead(points: list[ProfilePoint], gpu: GPUSpec) -> dict[str, float]:
    """Fixed and per-sequence CPU time from whole steps, non-negative, by linear least squares."""
    from scipy.optimize import lsq_linear

    free = dataclasses.replace(gpu, step_overhead_s=0.0, seq_overhead_s=0.0)
    measured = np.asarray([p.ms for p in points]) * 1e-3
    gpu_part = np.asarray([predict_ms(p, free) for p in points]) * 1e-3
    batch = np.asarray([p.batch for p in points], dtype=np.float64)
    a = np.column_stack([1.0 / measured, batch / measured])
    result = lsq_linear(a, (measured - gpu_part) / measured, bounds=(0.0, np.inf))
    return {"step_overhead_s": float(result.x[0]), "seq_overhead_s": float(result.x[1])}


@dataclass(slots=True)
class FitResult:
    gpu: GPUSpec                      # the fitted spec
    fitted: dict[str, int]            # group -> points it was fitted on
    rows: list[tuple[ProfilePoint, float, bool]]  # (point, predicted ms, held out)
    skipped: list[tuple[ProfilePoint, str]]       # points not modelled, with the reason


def parse_hold_out(items) -> list[tuple[str, set[str]]]:
    """`FIELD=V1,V2` items: the points whose FIELD is one of the values are held out."""
    out = []
    for item in items or ():
        field, sep, values = item.partition("=")
        if not sep or field not in HOLD_OUT_FIELDS or not values:
            raise InputError(f"field '--hold-out': {item!r} must be FIELD=V1,V2,... with FIELD one "
                             f"of {', '.join(HOLD_OUT_FIELDS)}")
        out.append((field, {v.strip() for v in values.split(",")}))
    return out


def _held(point: ProfilePoint, rules) -> bool:
    return any(str(getattr(point, field)) in values for field, values in rules)


def check(points: list[ProfilePoint], gpu: GPUSpec) -> FitResult:
    """Every point priced with `gpu`'s operators as they are, nothing fitted: a spec checked
    on measurements it was not fitted to (each row is held out)."""
    if not points:
        raise InputError("calibrate: the profiles hold no points")
    gpu = dataclasses.replace(gpu, cost_model="operators")
    skipped = [(p, "cross-node collective (not modelled)") for p in points if not p.intra_node]
    rows = [(p, predict_ms(p, gpu), True) for p in points if p.intra_node]
    return FitResult(gpu, {}, rows, skipped)


def fit(points: list[ProfilePoint], base: GPUSpec, hold_out=(), name: str | None = None,
        source: str = "") -> FitResult:
    """Fit `base`'s parameters to `points` (minus the held-out ones) and predict every point."""
    if not points:
        raise InputError("calibrate: the profiles hold no points")
    for field, values in hold_out:   # a value no point has holds nothing out: a typo
        seen = {str(getattr(p, field)) for p in points}
        missing = sorted(values - seen)
        if missing:
            raise InputError(f"field '--hold-out': no point has {field} = {brief(missing[0])} "
                             f"({len(seen):,} distinct values in the profiles)")
    skipped = [(p, "cross-node collective (not modelled)") for p in points if not p.intra_node]
    used = [p for p in points if p.intra_node]
    train = [p for p in used if not _held(p, hold_out)]
    if not train:
        raise InputError("field '--hold-out': every point is held out; nothing is left to fit")
    gpu = dataclasses.replace(base, cost_model="operators")
    fitted: dict[str, int] = {}
    by_group: dict[str, list[ProfilePoint]] = {}
    for p in train:
        by_group.setdefault(group_of(p), []).append(p)
    for group in GROUPS:  # in order: attn_decode reads attn_prefill's fitted mfu
        if group in by_group:
            gpu = dataclasses.replace(gpu, **_fit_group(group, by_group[group], gpu))
            fitted[group] = len(by_group[group])
    if "step" in by_group:
        gpu = dataclasses.replace(gpu, **_fit_overhead(by_group["step"], gpu))
        fitted["step"] = len(by_group["step"])
    if name is not None or source:
        gpu = dataclasses.replace(gpu, name=name or gpu.name, source=source or gpu.source)
    rows = [(p, predict_ms(p, gpu), _held(p, hold_out)) for p in used]
    return FitResult(gpu, fitted, rows, skipped)


def summary(rows) -> list[dict]:
    """Per (op, fit or held out): points, mean and worst relative error in percent."""
    groups: dict[tuple[str, bool], list[float]] = {}
    for point, predicted, held in rows:
        groups.setdefault((point.op, held), []).append(100.0 * (predicted - point.ms) / point.ms)
    out = []
    for (op, held), errors in groups.items():
        errs = np.abs(np.asarray(errors))
        out.append({"op": op, "set": "held-out" if held else "fit", "points": len(errors),
                    "mean_abs_error_pct": float(errs.mean()), "worst_abs_error_pct": float(errs.max()),
                    "mean_error_pct": float(np.mean(errors))})
    order = {op: i for i, op in enumerate((*OP_CLASS, "all_reduce", "send_recv", "step"))}
    return sorted(out, key=lambda r: (r["set"] != "fit", order.get(r["op"], 99)))


def row_sums(rows) -> list[dict]:
    """Error of each profile row's operators summed (one layer of Vidur's mlp.csv): how far off a
    whole layer is, where errors of different signs partly cancel. Per set, as `summary`."""
    groups: dict[tuple[str, int], list] = {}
    for point, predicted, held in rows:
        if point.op not in ("all_reduce", "send_recv", "step"):
            groups.setdefault((point.source, point.row), []).append((point.ms, predicted, held))
    errors: dict[bool, list[float]] = {}
    for items in groups.values():
        if len(items) < 3:
            continue  # a single operator per row is already in `summary`
        measured = sum(m for m, _, _ in items)
        predicted = sum(p for _, p, _ in items)
        errors.setdefault(any(h for _, _, h in items), []).append(
            100.0 * (predicted - measured) / measured)
    out = []
    for held, errs in sorted(errors.items()):
        a = np.abs(np.asarray(errs))
        out.append({"op": "row sum", "set": "held-out" if held else "fit", "points": len(errs),
                    "mean_abs_error_pct": float(a.mean()), "worst_abs_error_pct": float(a.max()),
                    "mean_error_pct": float(np.mean(errs))})
    return out
