"""matplotlib figures of runs and experiments, each written as PNG and SVG.

matplotlib is imported inside the drawing functions, with the Agg backend, so importing this
package (or the CLI) costs nothing. Every function takes plain data (a `Trace`, report rows,
controller runs), an output directory and a file stem, and returns the paths it wrote.
"""

from batchlab.plots.curves import goodput_bars, rate_curves
from batchlab.plots.clipper import aimd_trace
from batchlab.plots.clipper_cache import cache_hit_rate, cache_load
from batchlab.plots.clipper_selection import model_selection, stragglers
from batchlab.plots.compare import plot_compare, plot_report
from batchlab.plots.latency import latency_cdfs
from batchlab.plots.timeline import request_timeline
from batchlab.plots.usage import batch_size, kv_memory
from batchlab.plots.run import plot_run
from batchlab.plots.goodput import goodput_probes
from batchlab.plots.workload import workload_figure
from batchlab.plots.cost import step_cost_curve
from batchlab.plots.sweep import sweep_figures
from batchlab.plots.knobs import knobs_figure
from batchlab.plots.mini import decode_speedup

__all__ = ["aimd_trace", "batch_size", "cache_hit_rate", "cache_load", "decode_speedup", "goodput_bars", "goodput_probes", "knobs_figure", "kv_memory", "latency_cdfs",
           "model_selection", "plot_compare", "plot_report", "plot_run", "rate_curves", "request_timeline", "step_cost_curve",
           "stragglers", "sweep_figures", "workload_figure"]
