"""One self-contained HTML page for a system comparison: figures, tables and the configuration.

Everything is inside the file: figures are SVG images in `data:` URIs (base64), the style is
inline, there is no script and no external resource, so the page opens offline and can be mailed.
"""

from __future__ import annotations

import base64
import html
import json
import tempfile
from pathlib import Path

from batchlab.display import formats
from batchlab.errors import InputError
from batchlab.io_checks import reading, write_atomic

# Narrow windows: the page never scrolls sideways; a table wider than the window scrolls inside
# its own box (div.wide), figures shrink to the width, and long configuration lines scroll in <pre>.
STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; padding: 0 1em; max-width: 1200px; color: #222; background: #fff; }
div.wide { overflow-x: auto; max-width: 100%; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #f0f4f8; } td.name, th.name { text-align: left; white-space: nowrap; }
figure { margin: 1em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { font-size: 0.9em; color: #555; }
pre { background: #f7f7f7; padding: 1em; overflow-x: auto; font-size: 0.85em; }
"""


FORMATS = {"ms": formats.millis, "pct": formats.pct, "int": formats.num, "rate": formats.rate,
           "one": lambda x: formats.num(x, 1)}


def _fmt(value, kind: str) -> str:
    return FORMATS[kind](value)


def _table(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f'<th class="{"name" if k == 0 else ""}">{html.escape(h)}</th>' for k, h in enumerate(headers))
    body = "".join("<tr>" + "".join(f'<td class="{"name" if k == 0 else ""}">{html.escape(c)}</td>'
                                    for k, c in enumerate(row)) + "</tr>" for row in rows)
    return f'<div class="wide"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


RATE_COLUMNS = (("rate (req/s)", "rate", "rate"), ("TTFT median (ms)", "median_ttft_ms", "ms"),
                ("TTFT p99 (ms)", "p99_ttft_ms", "ms"), ("TPOT mean (ms)", "mean_tpot_ms", "ms"),
                ("ITL p99 (ms)", "p99_itl_ms", "ms"), ("output (tok/s)", "output_throughput", "int"),
                ("steady (tok/s)", "steady_output_throughput", "int"),
                ("SLO attainment", "slo_attainment", "pct"), ("mean batch", "mean_batch", "one"),
                ("KV held", "kv_held_share", "pct"), ("KV stored", "kv_stored_share", "pct"))


def rate_table(report: dict) -> str:
    rows = []
    for sys in report["systems"]:
        for row in sys["rates"]:
            rows.append([sys["name"], *(_fmt(row.get(key), kind) for _, key, kind in RATE_COLUMNS)])
    return _table(["system", *(h for h, _, _ in RATE_COLUMNS)], rows)


def goodput_table(report: dict) -> str:
    fleet = report["config"]["fleet_rate"]
    rows = [[s["name"], formats.goodput_rate(s["max_goodput_rate"], s.get("max_goodput_rate_above", False)),
             "∞" if s["gpus_needed"] is None else f"{s['gpus_needed']:,}",
             str(len(s["goodput_search"]["probes"])), s["goodput_search"]["status"]]
            for s in report["systems"] if "max_goodput_rate" in s]
    return _table(["system", "max goodput rate (req/s)", f"GPUs for {fleet:g} req/s", "probes", "search"], rows)


def overload_table(report: dict) -> str:
    rows = []
    for s in report["systems"]:
        o = s.get("overload")
        if o:
            overall, steady = o.get("output_throughput"), o.get("steady_output_throughput")
            ratio = steady / overall if overall and steady is not None else None
            rows.append([s["name"], _fmt(overall, "int"), _fmt(steady, "int"),
                         "—" if ratio is None else f"{ratio:.2f}"])
    return _table(["system", "overall (tok/s)", "steady (tok/s)", "steady / overall"], rows)


def svg_image(path: Path, caption: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return (f'<figure><img alt="{html.escape(caption)}" src="data:image/svg+xml;base64,{data}">'
            f"<figcaption>{html.escape(caption)}</figcaption></figure>")


CAPTIONS = {
    "rate_curves": "TTFT (median dashed, p99 solid) and mean TPOT against arrival rate, with the SLO bounds",
    "goodput": "max goodput rate: the largest arrival rate whose SLO attainment meets the target",
    "run_timeline": "request timeline of the representative run: waiting, prefill, decode",
    "run_kv_memory": "KV memory held (reserved) vs stored over time, representative run",
    "run_batch_size": "batch size over time, representative run",
    "run_latency_cdf": "latency CDFs of the representative run",
}


def render(report: dict, figures: list[Path], title: str | None = None) -> str:
    """The page of a `compare` report dict and the SVG figures drawn from it."""
    cfg = report["config"]
    slo_ms = cfg["slo_ms"]
    title = title or (f"{cfg['model']} on {cfg['gpu']}: {cfg['requests']} {cfg['workload']} requests, "
                      f"{len(report['systems'])} systems")
    bounds = [f"{name} ≤ {slo_ms[key]:g} ms" for key, name in (("ttft", "TTFT"), ("tpot", "TPOT"), ("e2el", "E2EL"))
              if slo_ms.get(key)]
    parts = [f"<h1>{html.escape(title)}</h1>",
             f"<p>SLO: {html.escape(' and '.join(b for b in bounds if b) or 'none')}; goodput target "
             f"{cfg['slo_target'] * 100:g}% of requests; seed {cfg['seed']}.</p>",
             "<h2>Latency and throughput per arrival rate</h2>", rate_table(report)]
    if any("max_goodput_rate" in s for s in report["systems"]):
        parts += ["<h2>Largest rate within the SLO</h2>", goodput_table(report)]
    if any(s.get("overload") for s in report["systems"]):
        parts += [f"<h2>Throughput under overload ({cfg['overload_rate']:g} req/s)</h2>", overload_table(report)]
    svgs = {p.stem: p for p in figures if p.suffix == ".svg"}
    if svgs:
        parts.append("<h2>Figures</h2>")
        parts += [svg_image(path, CAPTIONS.get(stem, stem)) for stem, path in svgs.items()]
    parts += ["<h2>Configuration</h2>", f"<pre>{html.escape(json.dumps(cfg, indent=2))}</pre>"]
    body = "\n".join(parts)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<link rel="icon" href="data:,">'
            f"<title>{html.escape(title)}</title><style>{STYLE}</style></head>\n<body>\n{body}\n</body></html>\n")


def write_report(report: dict, out: str | Path, cfg=None) -> Path:
    """Draw the figures (with a representative run when the CompareConfig `cfg` is given) and
    write the page to `out`."""
    from batchlab.plots import plot_compare, plot_report

    out = Path(out)
    with tempfile.TemporaryDirectory() as tmp:
        figures = plot_report(report, tmp) if cfg is None else plot_compare(report, cfg, tmp)
        page = render(report, figures)
    return write_atomic(out, page, "--out")


def read_report(path: str | Path) -> dict:
    """A `batchlab compare --json` file, checked for the fields the page needs."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"field '--from': cannot read {str(path)!r}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"field '--from': {str(path)!r} is not JSON: {exc}") from None
    try:
        with reading(f"field '--from': {str(path)!r}"):
            report = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"field '--from': {str(path)!r} is not JSON: {exc}") from None
    if not isinstance(report, dict) or not isinstance(report.get("systems"), list) or "config" not in report:
        raise InputError(f"field '--from': {str(path)!r} is not a `batchlab compare --json` report "
                         "(needs 'config' and 'systems')")
    for k, sys in enumerate(report["systems"]):
        if not isinstance(sys, dict) or "name" not in sys or not isinstance(sys.get("rates"), list):
            raise InputError(f"field '--from': {str(path)!r}: systems[{k}]: needs 'name' and a 'rates' list")
    for key in ("model", "gpu", "workload", "requests", "seed", "slo_ms", "slo_target", "fleet_rate"):
        if key not in report["config"]:
            raise InputError(f"field '--from': {str(path)!r}: config: field {key!r} missing")
    return report
