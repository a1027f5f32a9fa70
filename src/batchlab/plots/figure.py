"""One place that sets matplotlib up and saves figures reproducibly.

Reproducible bytes: the SVG writer derives element ids from `svg.hashsalt` (random by default)
and stamps the current date unless told otherwise; PNG stamps the matplotlib version only.
"""

from __future__ import annotations

import io
from pathlib import Path

from batchlab.errors import InputError
from batchlab.io_checks import write_atomic

DPI = 100                       # PNG pixels per inch: a 10 x 4 in figure is 1000 x 400 px
HASH_SALT = "batchlab"          # fixed, so SVG ids are the same from run to run
FORMATS = ("png", "svg")
# A palette that stays readable in grey and for colour-blind readers (Okabe & Ito, 2008).
COLORS = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
PHASE_COLORS = {"waiting": "#D9D9D9", "prefill": "#E69F00", "decode": "#0072B2", "seat": "#9FB8CC"}


def pyplot():
    """matplotlib.pyplot on the Agg backend with the reproducibility settings applied."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.hashsalt": HASH_SALT, "svg.fonttype": "none", "figure.dpi": DPI,
                         "savefig.dpi": DPI, "axes.grid": True, "grid.alpha": 0.3,
                         "axes.prop_cycle": matplotlib.cycler(color=COLORS)})
    return plt


def out_dir(path: str | Path) -> Path:
    """The directory figures go to, created if missing; InputError if it cannot be."""
    directory = Path(path)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"field '--plot': cannot create directory {str(path)!r}: {exc.strerror}") from None
    if not directory.is_dir():
        raise InputError(f"field '--plot': {str(path)!r} is not a directory")
    return directory


def save(fig, directory: str | Path, stem: str) -> list[Path]:
    """Write `stem.png` and `stem.svg` into `directory`, close the figure, return both paths."""
    plt = pyplot()
    directory = out_dir(directory)
    paths = []
    metadata = {"png": {"Software": None}, "svg": {"Date": None, "Creator": None}}
    engine = fig.get_layout_engine()
    if engine is not None:   # lay out once, not once per format: the layout is half the drawing time
        engine.execute(fig)
        fig.set_layout_engine("none")
    for fmt in FORMATS:
        drawn = io.BytesIO()      # drawn in memory, then written whole or not at all
        fig.savefig(drawn, format=fmt, metadata=metadata[fmt])
        paths.append(write_atomic(directory / f"{stem}.{fmt}", drawn.getvalue(), "--plot"))
    plt.close(fig)
    return paths


def time_label(unit: str) -> str:
    return "time (ticks)" if unit == "tick" else f"time ({unit})"
