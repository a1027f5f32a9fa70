"""A running server's own records of a run, read over HTTP: its step log and the requests it
finished (GET /debug/batchlab/steps and /debug/batchlab/requests, `serve/served_log.py`); and
the settings it says it serves, against which validate's flags are checked (`check_flags`).

`mark` notes where both logs stand before a run; `since` reads everything logged after it,
page by page. A server without the routes (vLLM, an older batchlab) has no mark, and a run
longer than the server's rings hold has lost its first records: either way the reason is
given instead of the records, and the run keeps no error split.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request

import numpy as np

from batchlab.errors import InputError
from batchlab.serve.served_log import MAX_INDEX, PAGE_MAX

ROUTE = "/debug/batchlab/"
PAGE_BYTES = 8 * 1024 * 1024   # the most one page is read for: a full page is a few MB at most


class NotLogged(Exception):
    """Why a run's records cannot be had from the server."""


def _get(url: str, which: str, since: int, limit: int) -> dict:
    try:
        with urllib.request.urlopen(f"{url}{ROUTE}{which}?since={since}&limit={limit}", timeout=30) as r:
            page = json.loads(r.read(PAGE_BYTES))
    except urllib.error.HTTPError as exc:
        raise NotLogged(f"{url} answers {exc.code} to GET {ROUTE}{which} (not a batchlab server "
                        "that logs its steps)") from None
    except (OSError, ValueError, http.client.HTTPException) as exc:
        raise NotLogged(f"{url}{ROUTE}{which} cannot be read ({type(exc).__name__})") from None
    if not isinstance(page, dict) or not isinstance(page.get(which), list) or not all(
            isinstance(page.get(k), int) for k in ("first", "total", "next")):
        raise NotLogged(f"{url}{ROUTE}{which} answers what is not a page of its log")
    return page


def mark(url: str) -> tuple[int, int]:
    """The index the next step and the next finished request will get; NotLogged if none."""
    return tuple(_get(url, which, MAX_INDEX, 1)["total"] for which in ("steps", "requests"))


def _since(url: str, which: str, since: int) -> list[dict]:
    records = []
    while True:
        page = _get(url, which, since, PAGE_MAX)
        if page["first"] > since:
            raise NotLogged(f"the server's {which} log no longer holds the run's first records "
                            f"(it keeps the last {page['total'] - page['first']:,}): a shorter run splits")
        records += page[which]
        if not page[which] or page["next"] >= page["total"]:
            return records
        since = page["next"]


class RunLog:
    """Where a server's logs stood before a run (`mark`), or why they cannot be read."""

    def __init__(self, url: str) -> None:
        self.url = url
        try:
            self.at, self.missing = mark(url), None
        except NotLogged as exc:
            self.at, self.missing = None, str(exc)

    def records(self):
        """`since` the mark; NotLogged with the reason if there is none."""
        if self.at is None:
            raise NotLogged(self.missing)
        return since(self.url, self.at)


def since(url: str, at: tuple[int, int]) -> tuple[list[dict], tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Everything logged after `at` (`mark`): (the finished requests' rows, as `batchlab serve
    --save-trace` writes them; the steps' (start, duration, batch), as `read_steps` reads a
    --save-steps file)."""
    steps = _since(url, "steps", at[0])
    rows = _since(url, "requests", at[1])
    start = np.asarray([s["start"] for s in steps], dtype=np.float64)
    order = np.argsort(start, kind="stable")
    return rows, (start[order], np.asarray([s["duration"] for s in steps], dtype=np.float64)[order],
                  np.asarray([s["batch"] for s in steps], dtype=np.int64)[order])


def mini_info(url: str) -> dict | None:
    """The model spec, system and KV capacity a mini server says it serves (its
    `batchlab:server_info` at /metrics); None if it says nothing or cannot be read."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        with urllib.request.urlopen(f"{url}/metrics", timeout=5) as r:
            text = r.read(PAGE_BYTES).decode("utf-8", errors="replace")
        for family in text_string_to_metric_families(text):
            if family.name == "batchlab:server_info":
                for sample in family.samples:
                    labels = sample.labels
                    kv = labels.get("kv_cache_tokens", "")
                    if labels.get("model") and labels.get("system") and kv.isascii() and kv.isdigit():
                        return {"model": labels["model"], "system": labels["system"],
                                "kv_cache_tokens": int(kv)}
    except (OSError, ValueError, http.client.HTTPException):
        return None
    return None


# validate's flags that describe the server, by the names the servers' info gauges use
SERVER_FLAGS = {"model": "--model", "system": "--system", "kv_cache_tokens": "--kv-cache-tokens"}


def check_flags(given: dict, info: dict, url: str, twin: bool) -> None:
    """Each server flag given (`given`: SERVER_FLAGS' keys, None where not given) must say what
    the server says it serves (`info`: a twin's `twin_info` or a mini server's `mini_info`),
    or an InputError names the flag and both values: the replay runs on the server's own
    settings, so a flag that disagrees would be ignored unseen."""
    who = "twin" if twin else "server"
    for key, flag in SERVER_FLAGS.items():
        value = given.get(key)
        if value is not None and not _agrees(key, value, info, twin):
            raise InputError(f"field '{flag}': {value!r} disagrees with the {who} at {url}, which "
                             f"serves {info[key]!r} (leave {flag} out to use the {who}'s own)")


def _agrees(key: str, value, info: dict, twin: bool) -> bool:
    """Whether `value` names what the server serves: the same model (a twin's preset by its
    name, a mini spec by its fields), the same system fields, the same KV capacity (a twin's
    once rounded down to its blocks)."""
    from dataclasses import replace

    from batchlab.experiments.systems import parse_system

    try:
        if key == "model":
            if twin:
                from batchlab.hardware import resolve_model
                return resolve_model(value).name == info["model"]
            from batchlab.serve.model_spec import parse_model
            return parse_model(value) == parse_model(info["model"])
        served = parse_system(info["system"], "--system")
        if key == "system":
            return replace(parse_system(value, "--system"), name="") == replace(served, name="")
        blocks = served.block_size if twin and served.memory == "paged" else 1
        return value // blocks * blocks == info["kv_cache_tokens"]
    except InputError:   # what cannot be read as a model or system is not the server's
        return False
