"""Figures: every kind written as PNG and SVG, of the expected size, not blank, reproducible."""

import xml.etree.ElementTree as ET

import numpy as np
import pytest

from batchlab import plots
from batchlab.clipper import experiments as clipper_ex
from batchlab.hardware import resolve_gpu, resolve_model
from batchlab.metrics import SLO
from batchlab.plots.figure import DPI
from batchlab.serving.compare import CompareConfig, compare
from batchlab.serving.experiments import Setting
from batchlab.serving.run import simulate
from batchlab.serving.systems import parse_system
from batchlab.tick import parse_case, run_case
from batchlab.workload import make_workload

from conftest import EXAMPLES

SLO_ = SLO(ttft=1.0, tpot=0.05)


@pytest.fixture(scope="module")
def sim_trace():
    w = make_workload("chat", 60, 16.0, 0)
    return simulate(w, parse_system("paged"), resolve_model("Llama-3-8B"), resolve_gpu("H100-SXM"), slo=SLO_).trace


@pytest.fixture(scope="module")
def tick_result():
    case = parse_case((EXAMPLES / "l11-s5-static-vs-continuous.json").read_text(), "case")
    return run_case(case, "static")


@pytest.fixture(scope="module")
def report():
    setting = Setting(make_workload("chat", 50, 1.0, 0), resolve_model("Llama-3-8B"), resolve_gpu("H100-SXM"), SLO_)
    cfg = CompareConfig(setting, (parse_system("static"), parse_system("orca-oracle")), (2.0, 8.0, 32.0),
                        overload_rate=None)
    return compare(cfg, jobs=1)


def png_info(path):
    import matplotlib.image as mpimg
    img = mpimg.imread(path)                      # [height, width, channels] floats
    colours = np.unique(img.reshape(-1, img.shape[-1]), axis=0)
    return img.shape[1], img.shape[0], len(colours)


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


def test_run_figures(sim_trace, tmp_path):
    paths = plots.plot_run(sim_trace, tmp_path, "run_", slo=SLO_, title="paged")
    names = sorted(p.name for p in paths)
    assert names == sorted(f"run_{k}.{e}" for k in ("timeline", "kv_memory", "batch_size", "latency_cdf")
                           for e in ("png", "svg"))
    by_stem = {p.stem: [q for q in paths if q.stem == p.stem] for p in paths}
    for stem, size in (("run_kv_memory", plots.usage.SIZE_IN), ("run_batch_size", plots.usage.SIZE_IN),
                       ("run_latency_cdf", plots.latency.SIZE_IN)):
        check_pair(by_stem[stem], size)
    width, height, _ = png_info(by_stem["run_timeline"][0])
    assert width == plots.timeline.WIDTH_IN * DPI
    assert height == round(plots.timeline._height(len(sim_trace)) * DPI)


def test_figures_are_reproducible(sim_trace, tmp_path):
    first = plots.kv_memory(sim_trace, tmp_path / "a")
    second = plots.kv_memory(sim_trace, tmp_path / "b")
    for p, q in zip(first, second):
        assert p.read_bytes() == q.read_bytes(), p.name


def test_timeline_draws_the_ascii_grid(tick_result, tmp_path):
    """Each P and D cell of the ASCII chart is a lettered rectangle in the SVG."""
    from batchlab.display.timeline import timeline_rows
    paths = plots.request_timeline(tick_result.trace, tmp_path, static=True)
    check_pair(paths, (plots.timeline.WIDTH_IN, plots.timeline._height(len(tick_result.trace))))
    _, rows = timeline_rows(tick_result.trace, static=True)
    letters = sum(r.cells.count("P") + r.cells.count("D") for r in rows)
    svg = paths[1].read_text()
    # svg.fonttype "path": each letter drawn is one <use> of a glyph, in a text group
    assert svg.count('<g id="text_') >= letters


def test_phase_spans_follow_the_timestamps(sim_trace):
    spans = plots.timeline.phase_spans(sim_trace)
    first = sim_trace.token_times[sim_trace.token_offsets[:-1]]
    np.testing.assert_array_equal(spans["waiting"][:, 0], sim_trace.arrival)
    np.testing.assert_array_equal(spans["prefill"][:, 1], first)
    assert (spans["waiting"][:, 1] <= spans["prefill"][:, 1]).all()
    assert (spans["decode"][:, 0] <= spans["decode"][:, 1]).all()


def test_rate_curves_and_goodput(report, tmp_path):
    slo = report["config"]["slo"]
    check_pair(plots.rate_curves(report["systems"], tmp_path, slo=slo), plots.curves.SIZE_IN)
    check_pair(plots.goodput_bars(report["systems"], tmp_path, target=0.9, fleet_rate=100.0),
               plots.curves.BAR_SIZE_IN)
    svg = (tmp_path / "rate_curves.svg").read_text()
    assert svg.count("<path") > 20


def test_aimd_trace(tmp_path):
    runs = [r.to_dict() for r in clipper_ex.controller_experiment(0, 20.0)]
    check_pair(plots.aimd_trace(runs, tmp_path, slo_ms=20.0), plots.clipper.SIZE_IN)


def test_plot_dir_that_is_a_file(sim_trace, tmp_path):
    from batchlab.errors import InputError
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(InputError, match="--plot"):
        plots.batch_size(sim_trace, blocker)
