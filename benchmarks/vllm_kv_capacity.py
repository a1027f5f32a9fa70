"""batchlab's KV capacity against vLLM's own startup logs (batchlab/data/vllm_kv_logs.json).

Run: OPENBLAS_NUM_THREADS=1 PYTHONPATH=src python benchmarks/vllm_kv_capacity.py [--fit]

Prints, per logged run, the pieces vLLM's profile computes (requested memory, weights,
activation peak, non-torch memory, KV, all GiB), the predicted and logged KV tokens, the error,
and the error of the rule used before (datasheet GB x utilization − weights). The logged pieces
follow each predicted one in brackets where the log printed them. `--fit` prints the
LOGIT_COPIES that reproduces the 'fit' rows' logged activation peaks where the sampler sets them.
"""

from __future__ import annotations

import argparse

from batchlab.hardware.vllm_kv_logs import load_rows, predict, row_model
from batchlab.hardware.vllm_memory import FP32_BYTES, GIB, layer_peak_bytes


def _piece(value: float, logged: dict, key: str) -> str:
    return f"{value:6.2f}" + (f" [{logged[key]:.2f}]" if key in logged else "")


def fit_logit_copies() -> float:
    """LOGIT_COPIES from the one-GPU fit rows whose logged activation the sampler sets (it exceeds
    the layer's peak): (activation − last hidden states) / (4 bytes x requests x vocab),
    averaged. (With tp > 1 vLLM 0 samples on one rank only, and a log may print another's.)"""
    copies = []
    for row in load_rows():
        logged = row["logged"]
        if row["role"] != "fit" or row["tp"] != 1 or "activation_gib" not in logged:
            continue
        model, tokens = row_model(row), row["max_num_batched_tokens"]
        activation = logged["activation_gib"] * GIB
        if activation <= layer_peak_bytes(model, tokens, row["tp"]):
            continue
        hidden = model.bytes_per_value * tokens * model.hidden
        requests = min(row["max_num_seqs"], tokens)
        copies.append((activation - hidden) / (FP32_BYTES * requests * model.vocab))
    return sum(copies) / len(copies)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", action="store_true", help="print the fitted LOGIT_COPIES")
    args = parser.parse_args()
    if args.fit:
        print(f"LOGIT_COPIES = {fit_logit_copies():.4g}")
        return
    print(f"{'run':34} {'role':5} {'requested':>16} {'weights':>16} {'activation':>16} "
          f"{'non-torch':>16} {'KV GiB':>16} {'tokens':>9} {'logged':>9} {'error':>7} "
          f"{'before':>7}")
    errors = {"fit": [], "check": []}
    before, overheads = [], []
    for row in load_rows():
        p = predict(row)
        logged = row["logged"]
        if p.started:
            errors[row["role"]].append(abs(p.error))
            before.append(abs(p.old_error))
            tokens = f"{p.kv_tokens:>9,} {p.logged_tokens:>9,} {100 * p.error:+6.1f}% {100 * p.old_error:+6.1f}%"
        else:
            tokens = f"{p.kv_tokens:>9,} {'none':>9} {'-':>7} {'-':>7}"
        if p.logged_overhead_gib is not None:
            overheads.append((row["id"], p.overhead_gib, p.logged_overhead_gib))
        print(f"{row['id']:34} {row['role']:5} {_piece(p.requested_gib, logged, 'requested_gib'):>16} "
              f"{_piece(p.weights_gib, logged, 'weights_gib'):>16} "
              f"{_piece(p.activation_gib, logged, 'activation_gib'):>16} "
              f"{_piece(p.non_torch_gib, logged, 'non_torch_gib'):>16} "
              f"{_piece(p.kv_gib, logged, 'kv_gib'):>16} {tokens}")
    print("[logged]; tokens: predicted and logged KV tokens; error: of the tokens; before: the "
          "datasheet rule's error")
    for role, errs in errors.items():
        print(f"{role} rows: {len(errs)}, mean |error| {100 * sum(errs) / len(errs):.1f}%, "
              f"worst {100 * max(errs):.1f}%")
    print(f"before (datasheet GB x utilization − weights): mean |error| "
          f"{100 * sum(before) / len(before):.1f}%, worst {100 * max(before):.1f}%")
    print("\nactivation + non-torch, predicted against requested − weights − KV as logged (GiB):")
    for run, predicted, implied in overheads:
        print(f"  {run:34} {predicted:6.2f} {implied:6.2f} {predicted - implied:+6.2f}")

if __name__ == "__main__":
    main()
