"""`batchlab report`: one self-contained HTML page, loaded in headless Chromium.

Chromium is Debian's package, installed by `.ci/run` when missing; without it the browser tests
skip, saying so (in CI they fail instead). The page must load without a console message, its
screenshot must not be blank, and at a 700 px wide window it must not scroll sideways."""

import json
import re
import subprocess
from pathlib import Path

import pytest

from helpers import need, run_cli

CHROMIUM = Path("/usr/bin/chromium")
# Flags for this machine: no sandbox as root, no GPU, and nothing that reaches for the network.
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--enable-logging=stderr", "--v=0", "--window-size=1200,1600")
CONSOLE = re.compile(r":CONSOLE[^\]]*\] (.*)")
CHROMIUM_TIMEOUT_S = 120


@pytest.fixture(scope="session")
def chromium():
    need(CHROMIUM.exists(), f"headless Chromium is not installed at {CHROMIUM} "
                            "(apt-get install chromium; .ci/run does)")
    return CHROMIUM


def load(chromium, page: Path, tmp_path: Path) -> tuple[list[str], Path]:
    """Console messages of the page, and its screenshot."""
    shot = tmp_path / f"{page.stem}.png"
    profile = tmp_path / f"profile-{page.stem}"
    res = subprocess.run([str(chromium), *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
                          f"--screenshot={shot}", page.resolve().as_uri()],
                         capture_output=True, text=True, timeout=CHROMIUM_TIMEOUT_S)
    assert shot.exists(), res.stderr[-2000:]
    return CONSOLE.findall(res.stderr), shot


def distinct_colours(png: Path) -> int:
    import matplotlib.image as mpimg
    from helpers import count_colours
    return count_colours(mpimg.imread(png))


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "report.html"
    res = run_cli("report", "--systems", "static,orca-oracle", "--rates", "2,8,32", "--requests", "50",
              "--overload-rate", "64", "--jobs", "1", "--out", str(out), "--json")
    assert res.returncode == 0, res.stderr
    return out, json.loads(res.stdout)


def test_page_is_self_contained(page):
    out, report = page
    text = out.read_text()
    refs = re.findall(r'(?:src|href)="([^"]*)"', text)
    assert refs and all(r.startswith("data:") for r in refs), [r[:40] for r in refs if not r.startswith("data:")]
    assert "<script" not in text and "url(" not in text and "@import" not in text
    images = re.findall(r'src="data:image/svg\+xml;base64,', text)
    assert len(images) == 6      # rate curves, goodput, and the representative run's four
    for sys in report["systems"]:
        assert text.count(f'<td class="name">{sys["name"]}</td>') == len(sys["rates"]) + 2  # + goodput, overload
    # the full configuration, as JSON
    embedded = re.search(r"<pre>(.*?)</pre>", text, re.S).group(1)
    import html
    assert json.loads(html.unescape(embedded)) == report["config"]


def test_page_in_chromium(chromium, page, tmp_path):
    out, _ = page
    messages, shot = load(chromium, out, tmp_path)
    assert messages == []
    import matplotlib.image as mpimg
    height, width = mpimg.imread(shot).shape[:2]
    assert (width, height) == (1200, 1600)
    assert distinct_colours(shot) > 16


NARROW_PX = 700
# Appended to a copy of the page: the widths the browser laid it out at, as the page's title.
MEASURE = ("<script>document.title = 'widths ' + document.documentElement.scrollWidth + ' ' "
           "+ window.innerWidth;</script>")


def widths_at(chromium, page: Path, tmp_path: Path, width: int) -> tuple[int, int]:
    """(document scrollWidth, window innerWidth) of `page` laid out in a `width`-px window."""
    probe = tmp_path / f"{page.stem}-measured.html"
    probe.write_text(page.read_text().replace("</body>", MEASURE + "</body>"))
    flags = [f for f in CHROMIUM_FLAGS if not f.startswith("--window-size")]
    res = subprocess.run([str(chromium), *flags, f"--window-size={width},1000",
                          f"--user-data-dir={tmp_path / 'profile-narrow'}", "--dump-dom", probe.resolve().as_uri()],
                         capture_output=True, text=True, timeout=CHROMIUM_TIMEOUT_S)
    found = re.search(r"<title>widths (\d+) (\d+)</title>", res.stdout)
    assert found, res.stderr[-2000:]
    return int(found.group(1)), int(found.group(2))


def test_no_sideways_scroll_at_700px(chromium, page, tmp_path):
    out, _ = page
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in out.read_text()
    scroll, inner = widths_at(chromium, out, tmp_path, NARROW_PX)
    assert inner == NARROW_PX
    assert scroll <= NARROW_PX


def test_width_check_sees_a_wide_page(chromium, tmp_path):
    """The same measurement on a page with a 1500 px table reports it wider than the window."""
    wide = tmp_path / "wide.html"
    wide.write_text('<!DOCTYPE html><html><head><meta name="viewport" content="width=device-width">'
                    '<link rel="icon" href="data:,"></head><body>'
                    '<table style="width:1500px"><tr><td>x</td></tr></table></body></html>')
    scroll, _ = widths_at(chromium, wide, tmp_path, NARROW_PX)
    assert scroll > NARROW_PX


def test_chromium_check_catches_errors(chromium, tmp_path):
    """The same check on a broken page sees its console error and its blank screenshot."""
    bad = tmp_path / "bad.html"
    bad.write_text('<!DOCTYPE html><html><head><link rel="icon" href="data:,"></head><body>'
                   '<script>console.error("broken page"); missingFunction();</script></body></html>')
    messages, shot = load(chromium, bad, tmp_path)
    assert any("broken page" in m for m in messages)
    assert any("missingFunction" in m for m in messages)
    assert distinct_colours(shot) == 1


def test_report_from_compare_json(tmp_path, cli, page):
    _, report = page
    src = tmp_path / "compare.json"
    src.write_text(json.dumps(report))
    out = tmp_path / "again.html"
    res = cli("report", "--from", str(src), "--out", str(out))
    assert res.returncode == 0, res.stderr
    text = out.read_text()
    assert len(re.findall(r'src="data:image/svg\+xml;base64,', text)) == 2   # no run to redraw
    assert "Throughput under overload (64 req/s)" in text


@pytest.mark.parametrize("content, message", [
    ("{not json", "is not JSON"),
    ('{"systems": []}', "needs 'config' and 'systems'"),
    ('{"config": {}, "systems": [{"name": "x"}]}', "systems[0]: needs 'name' and a 'rates' list"),
])
def test_bad_from_file(tmp_path, cli, content, message):
    src = tmp_path / "bad.json"
    src.write_text(content)
    res = cli("report", "--from", str(src), "--out", str(tmp_path / "x.html"))
    assert res.returncode == 2
    assert message in res.stderr and "--from" in res.stderr
    assert not (tmp_path / "x.html").exists()


@pytest.mark.parametrize("out, message", [("page.txt", "must end in .html"),
                                          ("missing/page.html", "does not exist")])
def test_bad_out_exits_before_running(tmp_path, cli, out, message):
    res = cli("report", "--out", str(tmp_path / out))
    assert res.returncode == 2 and message in res.stderr
