"""Figures: every kind written as PNG and SVG, of the expected size, not blank, reproducible."""

import json
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from batchlab import plots
from batchlab.hardware import resolve_gpu, resolve_model
from batchlab.metrics import SLO
from batchlab.plots.figure import DPI
from batchlab.experiments.run import simulate
from batchlab.experiments.systems import parse_system
from batchlab.tick import parse_case, run_case
from batchlab.workload import make_workload

from helpers import EXAMPLES, count_colours

SLO_ = SLO(ttft=1.0, tpot=0.05)


@pytest.fixture(scope="module")
def sim_trace():
    w = make_workload("chat", 60, 16.0, 0)
    return simulate(w, parse_system("paged"), resolve_model("Llama-3-8B"), resolve_gpu("H100-SXM"), slo=SLO_).trace


@pytest.fixture(scope="module")
def tick_result():
    case = parse_case((EXAMPLES / "l11-s5-static-vs-continuous.json").read_text(), "case")
    return run_case(case, "static")


def png_info(path):
    import matplotlib.image as mpimg
    img = mpimg.imread(path)                      # [height, width, channels] floats in [0, 1]
    return img.shape[1], img.shape[0], count_colours(img)


def check_pair(paths, size_in, min_colours=3):
    png, svg = paths
    assert png.suffix == ".png" and svg.suffix == ".svg"
    width, height, colours = png_info(png)
    assert (width, height) == (round(size_in[0] * DPI), round(size_in[1] * DPI))
    assert colours >= min_colours, f"{png} looks blank ({colours} colours)"
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg")
    drawn = [el for el in root.iter() if el.tag.endswith(("path", "use", "rect"))]
    assert len(drawn) > 20


def pair(directory, stem):
    return [directory / f"{stem}.png", directory / f"{stem}.svg"]


def test_run_figures(sim_trace, tmp_path):
    paths = plots.plot_run(sim_trace, tmp_path, "run_", slo=SLO_, title="paged")
    assert sorted(p.name for p in paths) == _pairs(*(f"run_{k}" for k in ("timeline", "kv_memory", "batch_size",
                                                                          "latency_cdf")))
    check_pair(pair(tmp_path, "run_kv_memory"), plots.usage.SIZE_IN)
    check_pair(pair(tmp_path, "run_batch_size"), plots.usage.SIZE_IN)
    check_pair(pair(tmp_path, "run_latency_cdf"), plots.latency.SIZE_IN)
    check_pair(pair(tmp_path, "run_timeline"),
               (plots.timeline.WIDTH_IN, plots.timeline._height(len(sim_trace))))


def test_figures_are_reproducible(sim_trace, tmp_path):
    first = plots.batch_size(sim_trace, tmp_path / "a")
    second = plots.batch_size(sim_trace, tmp_path / "b")
    for p, q in zip(first, second):
        assert p.read_bytes() == q.read_bytes(), p.name
    svg = first[1].read_text()
    assert "<dc:date>" not in svg and "Matplotlib v" not in svg    # no stamp of when or by what


def test_timeline_draws_the_ascii_grid(tick_result, tmp_path):
    """Each P and D cell of the ASCII chart is a lettered rectangle in the SVG."""
    from batchlab.display.timeline import timeline_rows
    paths = plots.request_timeline(tick_result.trace, tmp_path, static=True)
    check_pair(paths, (plots.timeline.WIDTH_IN, plots.timeline._height(len(tick_result.trace))))
    _, rows = timeline_rows(tick_result.trace, static=True)
    letters = sum(r.cells.count("P") + r.cells.count("D") for r in rows)
    svg = paths[1].read_text()
    # svg.fonttype "none": each letter is a <text> element of its own
    assert sum(svg.count(f">{c}</text>") for c in "PD") == letters


def test_phase_spans_follow_the_timestamps(sim_trace):
    spans = plots.timeline.phase_spans(sim_trace)
    first = sim_trace.token_times[sim_trace.token_offsets[:-1]]
    np.testing.assert_array_equal(spans["waiting"][:, 0], sim_trace.arrival)
    np.testing.assert_array_equal(spans["prefill"][:, 1], first)
    assert (spans["waiting"][:, 1] <= spans["prefill"][:, 1]).all()
    assert (spans["decode"][:, 0] <= spans["decode"][:, 1]).all()


def test_plot_dir_that_is_a_file(sim_trace, tmp_path):
    from batchlab.errors import InputError
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(InputError, match="--plot"):
        plots.batch_size(sim_trace, blocker)


def _names(directory):
    return sorted(p.name for p in directory.iterdir())


def _pairs(*stems):
    return sorted(f"{s}.{e}" for s in stems for e in ("png", "svg"))


def test_tick_plot_flag(tmp_path, cli):
    res = cli("tick", str(EXAMPLES / "l11-s5-static-vs-continuous.json"), "--policy", "continuous",
              "--plot", str(tmp_path))
    assert res.returncode == 0, res.stderr
    assert _names(tmp_path) == _pairs(*(f"continuous_{k}" for k in ("timeline", "batch_size", "latency_cdf")))


def test_compare_plot_flag(tmp_path, cli):
    """Rate curves, goodput bars and the figures of one representative run, re-run."""
    from batchlab.plots.compare import representative
    res = cli("compare", "--systems", "static,orca-oracle", "--rates", "2,8,32", "--requests", "50",
              "--overload-rate", "0", "--jobs", "1", "--plot", str(tmp_path), "--json")
    assert res.returncode == 0, res.stderr
    assert _names(tmp_path) == _pairs("rate_curves", "goodput", "run_timeline", "run_kv_memory",
                                      "run_batch_size", "run_latency_cdf")
    check_pair(pair(tmp_path, "rate_curves"), plots.curves.SIZE_IN)
    check_pair(pair(tmp_path, "goodput"), plots.curves.BAR_SIZE_IN)
    report = json.loads(res.stdout)
    k, rate = representative(report)
    healthy = [(r["rate"], -j) for j, s in enumerate(report["systems"]) for r in s["rates"]
               if r["slo_attainment"] >= 0.9]
    assert healthy, "the case should have a system that meets the SLO"
    assert (rate, -k) == max(healthy)
    name = report["systems"][k]["name"]
    assert f"{name}, 50 chat requests at {rate:g} req/s" in (tmp_path / "run_timeline.svg").read_text()
    svg = (tmp_path / "rate_curves.svg").read_text()
    assert ">static<" in svg and ">orca-oracle<" in svg and "SLO 1000 ms" in svg


def test_clipper_plot_flag(tmp_path, cli):
    res = cli("clipper", "--requests", "200", "--plot", str(tmp_path), "--json")
    assert res.returncode == 0, res.stderr
    assert _names(tmp_path) == _pairs("aimd_trace")
    check_pair(pair(tmp_path, "aimd_trace"), plots.clipper.SIZE_IN)
    svg = (tmp_path / "aimd_trace.svg").read_text()
    for run in json.loads(res.stdout)["controllers"]:
        assert run["controller"] in svg


def test_cli_start_does_not_import_matplotlib():
    import subprocess
    import sys
    code = ("import sys; from batchlab.cli import build_parser; build_parser(); "
            "import batchlab.plots, batchlab.perfetto, batchlab.report_html, batchlab.sweep; "
            "print('matplotlib' in sys.modules, 'pyarrow' in sys.modules, 'ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False", "False"]


# -- figures that show what they claim ------------------------------------------------------

def test_latency_cdfs_zoom_to_the_data(sim_trace):
    """A bound far beyond the samples stays off the axis (named in the legend); one inside the
    samples is a line that does not widen the axis."""
    from batchlab.plots.latency import latency_cdf_figure, latency_samples
    import matplotlib.pyplot as plt

    samples = latency_samples(sim_trace)
    ttft_max_ms = samples["ttft"].max() * 1e3
    far = latency_cdf_figure(sim_trace, SLO(ttft=100.0, tpot=10.0))       # 100 s, 10 s
    ax_ttft, ax_tpot = far.axes[0], far.axes[1]
    assert ax_ttft.get_xlim()[1] < 2 * ttft_max_ms < 100_000
    labels = [t.get_text() for t in ax_ttft.get_legend().get_texts()]
    assert labels == ["SLO 100000 ms: 100.0% within (off the axis)"]
    plt.close(far)
    inside_ms = float(np.median(samples["ttft"])) * 1e3
    near = latency_cdf_figure(sim_trace, SLO(ttft=inside_ms / 1e3))
    lo, hi = near.axes[0].get_xlim()
    assert lo <= inside_ms <= hi and hi < 2 * ttft_max_ms
    (label,) = [t.get_text() for t in near.axes[0].get_legend().get_texts()]
    assert label.startswith(f"SLO {inside_ms:g} ms: 50") and "off the axis" not in label
    plt.close(near)


@pytest.fixture(scope="module")
def knobs_report():
    """The reservation, max_bs and order experiments, shrunk to a few runs of 60 requests."""
    from batchlab.experiments.experiments import Setting
    from batchlab.experiments.knobs import Overrides, run_knobs, select

    plan = []
    for e in select(["reservation", "max_bs", "order"], Overrides(rates=(8.0, 24.0))):
        kind = e.workload
        setting = Setting(make_workload(kind, 60, 1.0, 0), resolve_model("Llama-3-8B"), resolve_gpu("H100-SXM"),
                          SLO(ttft=e.slo[0], tpot=e.slo[1]))
        plan.append((e, setting))
    return plan, run_knobs(plan, 1)


def test_knobs_figures_draw_their_claims(knobs_report, tmp_path):
    plan, report = knobs_report
    by_name = {exp["name"]: (exp, e, setting) for exp, (e, setting) in zip(report["experiments"], plan)}
    exp, e, setting = by_name["reservation"]
    paths = plots.knobs_figure(exp, tmp_path, setting, e.parsed_systems())
    svg = paths[1].read_text()
    assert "KV reservation: memory held vs stored" in svg and "§" not in svg
    assert "held (reserved)" in svg and "stored (tokens in cache)" in svg and "8 req/s" in svg
    assert svg.count(">orca-max<") == 2                       # one tick label per rate panel

    exp, e, setting = by_name["max_bs"]
    svg = plots.knobs_figure(exp, tmp_path, setting, e.parsed_systems())[1].read_text()
    assert "mean TPOT (ms)" in svg and "output throughput (tok/s)" in svg
    assert "max_bs 8" in svg and "24 req/s" in svg

    exp, e, setting = by_name["order"]
    svg = plots.knobs_figure(exp, tmp_path, setting, e.parsed_systems())[1].read_text()
    assert "TTFT per order" in svg and "at 24 req/s" in svg
    runs = [simulate(setting.workload.with_rate(24.0), s, setting.model, setting.gpu, slo=setting.slo)
            for s in e.parsed_systems()[:2]]
    for system, run in zip(e.parsed_systems(), runs):     # the legend's medians are the runs'
        median = float(np.nanmedian(run.metrics.requests.ttft)) * 1e3
        assert f"{system.name}: median {median:,.0f} ms" in svg
    assert sorted(p.name for p in tmp_path.iterdir()) == _pairs("knobs_max_bs", "knobs_order", "knobs_reservation")


def test_goodput_probes_and_bars(tmp_path):
    systems = [{"name": "a", "max_goodput_rate": 4.0, "max_goodput_rate_above": False, "gpus_needed": 25,
                "probes": [{"rate": 1.0, "attainment": 1.0}, {"rate": 8.0, "attainment": 0.5},
                           {"rate": 4.0, "attainment": 0.95}]},
               {"name": "b", "max_goodput_rate": 1e4, "max_goodput_rate_above": True, "gpus_needed": 1,
                "probes": [{"rate": 1e4, "attainment": 1.0}]}]
    svg = plots.goodput_probes(systems, tmp_path, target=0.9)[1].read_text()
    assert "a: 4 req/s" in svg and "b: &gt; 1e+04 req/s" in svg and "target 90%" in svg
    svg = plots.goodput_bars(systems, tmp_path, target=0.9, fleet_rate=100)[1].read_text()
    assert "&gt; 1e+04" in svg and "25 GPUs for 100/s" in svg


def test_workload_and_cost_figures(tmp_path):
    w = make_workload("orca", 200, 4.0, 0)
    paths = plots.workload_figure(w, tmp_path, title="200 orca requests")
    check_pair(paths, plots.workload.SIZE_IN)
    model, gpu = resolve_model("Llama-3-8B"), resolve_gpu("H100-SXM")
    from batchlab.hardware import max_batch_under
    limit = max_batch_under(model, gpu, 0.020, 2048)
    paths = plots.step_cost_curve(model, gpu, 2048, 1, tmp_path, batch=64, limit_ms=20.0, max_batch=limit)
    check_pair(paths, plots.cost.SIZE_IN)
    svg = paths[1].read_text()
    assert f"B ≤ {limit:,}" in svg and "B = 64:" in svg


def test_legend_columns_shrink_for_long_names():
    from batchlab.plots.curves import _legend_columns
    assert _legend_columns(["a", "b", "c"]) == 3
    assert _legend_columns(["A100-80GB, orca-oracle, max_bs=256"] * 8) < 8
