"""Clipper's model-selection layer: Exp3 and Exp4 when a model degrades; straggler mitigation."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from batchlab.plots.figure import COLORS, pyplot, save


def model_selection(out: dict, directory: str | Path, stem: str = "model_selection") -> list[Path]:
    """`out`: `selection_experiment()`: each policy's rolling error over the queries, then Exp3's
    probabilities and Exp4's weights per model; the degradation as a vertical line."""
    plt = pyplot()
    fig, axes = plt.subplots(3, 1, figsize=(11.0, 8.0), sharex=True, layout="constrained")
    every, width = out["trace_every"], out["rolling"]
    for k, policy in enumerate(out["policies"]):
        curve = np.asarray(policy["rolling_error"])
        # point j covers queries [j·every, j·every + width): drawn at its window's end
        axes[0].plot(np.arange(curve.size) * every + width, 100 * curve, color=COLORS[k % len(COLORS)],
                     label=policy["policy"])
    axes[0].set_ylabel(f"error (%), last {width} queries")
    axes[0].legend(fontsize="small")
    for ax, policy, what in ((axes[1], out["policies"][1], "Exp3: chance of picking"),
                             (axes[2], out["policies"][2], "Exp4: weight")):
        shares = np.asarray(policy["shares"])  # [points, models]
        x = np.arange(shares.shape[0]) * every
        for m in range(shares.shape[1]):
            ax.plot(x, shares[:, m], color=COLORS[m % len(COLORS)],
                    label=f"model {m} ({100 * out['accuracies'][m]:g}%)")
        ax.set_ylabel(what)
        ax.set_ylim(0, 1)
    axes[1].legend(fontsize="small", ncols=5)
    for ax in axes:
        ax.axvline(out["degrade_at"], color="black", linestyle="--", linewidth=1)
    axes[0].annotate(f"model {out['degraded_model']} drops to {100 * out['degraded_accuracy']:g}%",
                     (out["degrade_at"], 1), xycoords=("data", "axes fraction"), ha="left", va="top",
                     fontsize="small")
    axes[2].set_xlabel("query")
    fig.suptitle(f"model selection: Exp3 and Exp4 over {out['queries']:,} queries with feedback")
    return save(fig, directory, stem)


def stragglers(out: dict, directory: str | Path, stem: str = "stragglers") -> list[Path]:
    """`out`: `StragglerResult.to_dict()`: p99 latency and accuracy against ensemble size, waiting
    for all models or answering at the deadline; accuracy against confidence at the deadline."""
    plt = pyplot()
    fig, (ax_l, ax_a, ax_c) = plt.subplots(1, 3, figsize=(13.0, 4.5), layout="constrained")
    rows = out["rows"]
    sizes = [r["models"] for r in rows]
    for key, label, color in (("all", "wait for every model", COLORS[0]),
                              ("deadline", f"answer at {out['deadline_ms']:g} ms", COLORS[1])):
        ax_l.plot(sizes, [r[f"p99_latency_{key}_ms"] for r in rows], marker="o", color=color, label=label)
        ax_a.plot(sizes, [100 * r[f"accuracy_{key}"] for r in rows], marker="o", color=color, label=label)
    ax_l.set_xlabel("models in the ensemble")
    ax_l.set_ylabel("p99 latency (ms)")
    ax_l.set_ylim(bottom=0)
    ax_l.legend(fontsize="small")
    ax_a.set_xlabel("models in the ensemble")
    ax_a.set_ylabel("accuracy (%)")
    ax_a.legend(fontsize="small")
    levels = out["confidence"]
    ax_c.bar([f"{100 * c['confidence']:.0f}" for c in levels], [100 * c["accuracy"] for c in levels],
             color=COLORS[2])
    for k, c in enumerate(levels):
        ax_c.annotate(f"{c['queries']:,}", (k, 100 * c["accuracy"]), ha="center", va="bottom", fontsize="x-small")
    ax_c.set_xlabel(f"confidence (% of the {sizes[-1] if sizes else 0} models agreeing)")
    ax_c.set_ylabel("accuracy (%), queries above each bar")
    fig.suptitle("ensembles with long-tailed model latency: straggler mitigation at a deadline")
    return save(fig, directory, stem)
