"""Bad input on every command: exit code 2, one line on stderr naming the flag or key the user
typed, no traceback, no hang, and no file left behind.

Every case runs in this process through `batchlab.cli.main` (no subprocess) in an empty
directory holding only the inputs the case names, on a workload of three tiny requests, so the
whole suite takes seconds.
"""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

import pytest

from batchlab.cli import main
from helpers import main_within

TINY = ["--workload", "fixed", "--prompt", "8", "--output", "4", "--requests", "3"]
ONE = [*TINY, "--jobs", "1"]
CMP = [*ONE, "--rates", "1", "--no-goodput", "--overload-rate", "0"]
DIR = object()   # an input that is a directory



def _tick(**fields) -> str:
    request = {"id": "a", "arrival": 0, "prompt_tokens": 2, "output_tokens": 2, **fields}
    return json.dumps({"requests": [request], "max_active": 1, "token_budget": 4, "chunk_size": 4})


def _toml(workload: str = "", grid: str = "rate = [1]", slo: str = "", goodput: str = "") -> str:
    text = f'[workload]\nkind = "fixed"\nprompt = 8\noutput = 4\nrequests = 3\n{workload}\n[grid]\n{grid}\n'
    if slo:
        text += f"[slo]\n{slo}\n"
    if goodput:
        text += f"[goodput]\nenabled = true\n{goodput}\n"
    return text


def _jsonl(*rows: dict) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def _row(t=0, p=3, o=2) -> dict:
    return {"TIMESTAMP": t, "ContextTokens": p, "GeneratedTokens": o}


DEEP = "[" * 100_000 + "]" * 100_000
BIG_INT = "1" * 5000
CSV_HEAD = "TIMESTAMP,ContextTokens,GeneratedTokens\n"

# Input files, created for a case when its argv names them (or a path under them).
INPUTS: dict[str, object] = {
    "afile": "not a directory\n",
    "adir": DIR,
    "adir.html": DIR,
    "binary.bin": bytes(range(128, 256)) * 4,
    "binary.json": bytes(range(128, 256)) * 4,
    "binary.csv": CSV_HEAD.encode() + bytes(range(128, 256)),
    "binary.toml": bytes(range(128, 256)) * 4,
    "deep.json": DEEP,
    "deep.jsonl": DEEP + "\n",
    "bigint.json": '{"requests": [{"id": "a", "arrival": 0, "prompt_tokens": %s, "output_tokens": 1}], '
                   '"max_active": 1, "token_budget": 1, "chunk_size": 1}' % BIG_INT,
    "bigint.jsonl": '{"TIMESTAMP": 0, "ContextTokens": %s, "GeneratedTokens": 5}\n' % BIG_INT,
    "empty.json": "",
    "list.json": "[1, 2]\n",
    "nan.json": '{"requests": [{"id": "a", "arrival": NaN, "prompt_tokens": 1, "output_tokens": 1}], '
                '"max_active": 1, "token_budget": 1, "chunk_size": 1}',
    # tick cases
    "tick-1e25.json": _tick(prompt_tokens=10**25),
    "tick-str.json": _tick(prompt_tokens="5"),
    "tick-half.json": _tick(prompt_tokens=2.5),
    "tick-zero.json": _tick(output_tokens=0),
    "tick-neg.json": _tick(arrival=-1),
    "tick-inf.json": _tick(arrival=1e400),
    "tick-huge-arrival.json": _tick(arrival=10**30),
    "tick-bool.json": _tick(output_tokens=True),
    "tick-work.json": json.dumps({"requests": [{"id": str(k), "arrival": 0, "prompt_tokens": 60_000,
                                                "output_tokens": 1} for k in range(2)],
                                  "max_active": 1, "token_budget": 4, "chunk_size": 4}),
    "tick-dup.json": json.dumps({"requests": [{"id": "a", "arrival": 0, "prompt_tokens": 1, "output_tokens": 1}] * 2,
                                 "max_active": 1, "token_budget": 1, "chunk_size": 1}),
    "tick-unknown.json": json.dumps({"requests": [], "max_active": 1, "token_budget": 1, "chunk_size": 1,
                                     "bogus_setting": 3}),
    "tick-nosetting.json": json.dumps({"requests": [{"id": "a", "arrival": 0, "prompt_tokens": 1,
                                                     "output_tokens": 1}], "max_active": 1, "token_budget": 1}),
    "tick-setting.json": json.dumps({"requests": [{"id": "a", "arrival": 0, "prompt_tokens": 1,
                                                   "output_tokens": 1}], "max_active": 1, "token_budget": "4",
                                     "chunk_size": 1}),
    "tick-budget.json": json.dumps({"requests": [{"id": "a", "arrival": 0, "prompt_tokens": 1,
                                                  "output_tokens": 1}], "max_active": 1, "token_budget": 1e30,
                                    "chunk_size": 1}),
    "tick-noid.json": json.dumps({"requests": [{"id": "", "arrival": 0, "prompt_tokens": 1, "output_tokens": 1}],
                                  "max_active": 1, "token_budget": 1, "chunk_size": 1}),
    "tick-ok.json": _tick(),
    # traces
    "ok.csv": CSV_HEAD + "0,3,2\n1,4,2\n",
    "big-field.csv": CSV_HEAD + "0," + "1" * 200_000 + ",5\n",
    "huge-tokens.csv": CSV_HEAD + "0,%d,5\n" % 2**70,
    "half.csv": CSV_HEAD + "0,3.5,5\n",
    "inf-time.csv": CSV_HEAD + "0,3,5\ninf,3,5\n",
    "short-row.csv": CSV_HEAD + "0,3\n",
    "one-row.csv": CSV_HEAD + "0,3,2\n",
    "nul.csv": CSV_HEAD + "0,3\x00,2\n",
    "quote.csv": CSV_HEAD + '0,"3,2\n',
    "tok30.jsonl": _jsonl(_row(p=1e30), _row(t=1)),
    "tokstr.jsonl": _jsonl(_row(p="5"), _row(t=1)),
    "tokbool.jsonl": _jsonl(_row(o=True), _row(t=1)),
    "toknull.jsonl": _jsonl(_row(o=None), _row(t=1)),
    "time-nan.jsonl": '{"TIMESTAMP": 0, "ContextTokens": 3, "GeneratedTokens": 2}\n'
                      '{"TIMESTAMP": NaN, "ContextTokens": 3, "GeneratedTokens": 2}\n',
    "time-huge.jsonl": _jsonl(_row(), _row(t=1e308), _row(t=0)),
    "notobj.jsonl": "[1, 2, 3]\n",
    "noext.txt": CSV_HEAD + "0,3,2\n",
    "mooncake-str.jsonl": '{"timestamp": 0, "input_length": "5", "output_length": 2, "hash_ids": [1]}\n',
    "mooncake-huge.jsonl": '{"timestamp": 0, "input_length": 1e30, "output_length": 2, "hash_ids": [1]}\n',
    # hardware specs
    "spec-deep.json": '{"model": %s}' % DEEP,
    "spec-bigint.json": '{"gpu": {"base": "H100-SXM", "mfu": %s}}' % BIG_INT,
    "spec-bad.toml": "[model\nbase = 1\n",
    "spec-str.toml": '[model]\nbase = "Llama-3-8B"\nn_layers = "32"\n',
    "spec-unknown.toml": '[model]\nbase = "Llama-3-8B"\nlayers = 32\n',
    "spec-inf.toml": '[gpu]\nbase = "H100-SXM"\nmfu = inf\n',
    "spec-denormal.toml": '[gpu]\nbase = "H100-SXM"\nmfu = 1e-320\n',
    "spec-nan.toml": '[gpu]\nbase = "H100-SXM"\nmemory = nan\n',
    "spec-huge.toml": '[gpu]\nbase = "H100-SXM"\npeak_flops = 1e400\n',
    "spec-zero.toml": '[model]\nbase = "Llama-3-8B"\nn_layers = 0\n',
    "spec-bigctx.json": '{"model": {"base": "Llama-3-8B", "max_context": 1e30}}',
    "spec.txt": "[model]\n",
    # report sources
    "notreport.json": '{"systems": 3}\n',
    # sweeps
    "ok.toml": _toml(),
    "bad-syntax.toml": "[workload\n",
    "deep.toml": "a = " + DEEP + "\n",
    "bigint.toml": "[workload]\nrequests = " + BIG_INT + "\n",
    "spec-deep.toml": '[gpu]\nbase = "H100-SXM"\nmfu = ' + DEEP + "\n",
    "dup-rate.toml": _toml(grid="rate = [1, 1.0]"),
    "dup-rate2.toml": _toml(grid="rate = [2, 2]"),
    "inf-rate.toml": _toml(grid="rate = [inf]"),
    "nan-rate.toml": _toml(grid="rate = [nan]"),
    "str-rate.toml": _toml(grid='rate = ["x"]'),
    "empty-rate.toml": _toml(grid="rate = []"),
    "fleet-str.toml": _toml(goodput='fleet_rate = "x"'),
    "fleet-nan.toml": _toml(goodput="fleet_rate = nan"),
    "fleet-inf.toml": _toml(goodput="fleet_rate = inf"),
    "fleet-neg.toml": _toml(goodput="fleet_rate = -1"),
    "enabled-str.toml": _toml(goodput='enabled = "yes"').replace("enabled = true\n", ""),
    "req-str.toml": _toml().replace("requests = 3", 'requests = "3"'),
    "req-zero.toml": _toml().replace("requests = 3", "requests = 0"),
    "req-huge.toml": _toml().replace("requests = 3", "requests = 10000000000000"),
    "req-float.toml": _toml().replace("requests = 3", "requests = 2.5"),
    "kind-bad.toml": _toml().replace('kind = "fixed"', 'kind = "bogus"'),
    "prompt-str.toml": _toml().replace("prompt = 8", 'prompt = "8"'),
    "prompt-huge.toml": _toml().replace("prompt = 8", "prompt = 1e30"),
    "output-zero.toml": _toml().replace("output = 4", "output = 0"),
    "seed-neg.toml": _toml(workload="seed = -1"),
    "burst-nan.toml": _toml(workload='arrival = "gamma"\nburstiness = nan'),
    "arrival-bad.toml": _toml(workload='arrival = "uniform"'),
    "mode-bad.toml": _toml(workload='context_mode = "x"'),
    "ttft-nan.toml": _toml(slo="ttft = nan"),
    "ttft-str.toml": _toml(slo='ttft = "1"'),
    "tpot-neg.toml": _toml(slo="tpot_ms = -1"),
    "e2e-inf.toml": _toml(slo="e2e = inf"),
    "target-big.toml": _toml(slo="target = 2"),
    "maxbs-zero.toml": _toml(grid="max_bs = [0]\nrate = [1]"),
    "maxbs-dup.toml": _toml(grid="max_bs = [4, 4]\nrate = [1]"),
    "system-bad.toml": _toml(grid='system = ["bogus"]\nrate = [1]'),
    "model-bad.toml": _toml(grid='model = ["nope"]\nrate = [1]'),
    "axis-bad.toml": _toml(grid="bogus = [1]\nrate = [1]"),
    "section-bad.toml": _toml() + "[bogus]\nx = 1\n",
    "gpu-deep.toml": _toml(grid='gpu = ["spec-deep.json"]\nrate = [1]'),
    # sweep output directories
    "prog-dir": DIR, "prog-dir/progress.jsonl": DIR,
    "points-dir": DIR, "points-dir/points.csv": DIR,
    "bin-progress": DIR, "bin-progress/progress.jsonl": bytes(range(128, 256)) * 4,
    "done": DIR,
}


def _needed(argv: list[str]) -> list[str]:
    """The input names a case's argv mentions, with what they depend on, parents first."""
    names = set()
    for arg in argv:
        for name in INPUTS:
            if arg == name or arg.startswith(name + "/") or arg.startswith(name + "."):
                names.add(name)
    for name in list(names):
        if name == "gpu-deep.toml":
            names.add("spec-deep.json")
        for other in INPUTS:
            if name.startswith(other + "/"):
                names.add(other)
        names.update(n for n in INPUTS if n.startswith(name + "/"))
    return sorted(names, key=lambda n: n.count("/"))


def _make(root: Path, names: list[str]) -> None:
    for name in names:
        path, content = root / name, INPUTS[name]
        if content is DIR:
            path.mkdir(parents=True, exist_ok=True)
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")


def _listing(root: Path) -> dict[str, tuple]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            st = path.stat()
            out[str(path.relative_to(root))] = (path.is_dir(), None if path.is_dir() else st.st_size,
                                                None if path.is_dir() else st.st_mtime_ns)
    return out


# (id, argv, what the one line must name)
CASES: list[tuple[str, list[str], str]] = [
    # -- tick ---------------------------------------------------------------------------
    ("tick-missing-file", ["tick", "nope.json"], "nope.json"),
    ("tick-directory", ["tick", "adir"], "adir"),
    ("tick-binary", ["tick", "binary.json"], "binary.json"),
    ("tick-empty", ["tick", "empty.json"], "empty.json"),
    ("tick-deep", ["tick", "deep.json"], "deep.json"),
    ("tick-bigint", ["tick", "bigint.json"], "bigint.json"),
    ("tick-nan-literal", ["tick", "nan.json"], "nan.json"),
    ("tick-not-object", ["tick", "list.json"], "list.json"),
    ("tick-1e25-tokens", ["tick", "tick-1e25.json"], "prompt_tokens"),
    ("tick-string-tokens", ["tick", "tick-str.json"], "prompt_tokens"),
    ("tick-half-tokens", ["tick", "tick-half.json"], "prompt_tokens"),
    ("tick-zero-output", ["tick", "tick-zero.json"], "output_tokens"),
    ("tick-bool-output", ["tick", "tick-bool.json"], "output_tokens"),
    ("tick-negative-arrival", ["tick", "tick-neg.json"], "arrival"),
    ("tick-inf-arrival", ["tick", "tick-inf.json"], "tick-inf.json"),
    ("tick-huge-arrival", ["tick", "tick-huge-arrival.json"], "arrival"),
    ("tick-too-much-work", ["tick", "tick-work.json"], "prompt_tokens"),
    ("tick-duplicate-id", ["tick", "tick-dup.json"], "'id'"),
    ("tick-empty-id", ["tick", "tick-noid.json"], "'id'"),
    ("tick-unknown-field", ["tick", "tick-unknown.json"], "bogus_setting"),
    ("tick-missing-setting", ["tick", "tick-nosetting.json"], "chunk_size"),
    ("tick-string-setting", ["tick", "tick-setting.json"], "token_budget"),
    ("tick-huge-setting", ["tick", "tick-budget.json"], "token_budget"),
    ("tick-max-active-zero", ["tick", "tick-ok.json", "--max-active", "0"], "--max-active"),
    ("tick-token-budget-negative", ["tick", "tick-ok.json", "--token-budget", "-1"], "--token-budget"),
    ("tick-chunk-size-text", ["tick", "tick-ok.json", "--chunk-size", "abc"], "--chunk-size"),
    ("tick-chunk-size-huge", ["tick", "tick-ok.json", "--chunk-size", str(10**30)], "--chunk-size"),
    ("tick-policy", ["tick", "tick-ok.json", "--policy", "eager"], "--policy"),
    ("tick-plot-under-file", ["tick", "tick-ok.json", "--plot", "afile/figs"], "--plot"),
    ("tick-plot-is-file", ["tick", "tick-ok.json", "--plot", "afile"], "--plot"),
    # -- workload -----------------------------------------------------------------------
    ("workload-requests-zero", ["workload", "--requests", "0"], "--requests"),
    ("workload-requests-huge", ["workload", "--requests", str(10**13)], "--requests"),
    ("workload-requests-text", ["workload", "--requests", "many"], "--requests"),
    ("workload-num-prompts-negative", ["workload", "--num-prompts", "-5"], "--num-prompts"),
    ("workload-rate-nan", ["workload", "--rate", "nan"], "--rate"),
    ("workload-rate-negative", ["workload", "--rate", "-1"], "--rate"),
    ("workload-rate-zero", ["workload", "--request-rate", "0"], "--request-rate"),
    ("workload-burstiness-zero", ["workload", "--burstiness", "0"], "--burstiness"),
    ("workload-burstiness-nan", ["workload", "--burstiness", "nan"], "--burstiness"),
    ("workload-burstiness-inf", ["workload", "--burstiness", "inf"], "--burstiness"),
    ("workload-prompt-zero", ["workload", "--workload", "fixed", "--prompt", "0", "--output", "4"], "--prompt"),
    ("workload-prompt-huge", ["workload", "--workload", "fixed", "--prompt", str(10**30), "--output", "4"],
     "--prompt"),
    ("workload-prompt-float", ["workload", "--workload", "fixed", "--prompt", "1e3", "--output", "4"], "--prompt"),
    ("workload-output-negative", ["workload", "--workload", "fixed", "--prompt", "4", "--output", "-3"],
     "--output"),
    ("workload-fixed-without-output", ["workload", "--workload", "fixed", "--prompt", "4"], "--output"),
    ("workload-prompt-on-chat", ["workload", "--prompt", "4"], "--prompt"),
    ("workload-prompt-on-trace-kind", ["workload", "--workload", "azure-conv", "--prompt", "4"], "--prompt"),
    ("workload-kind", ["workload", "--workload", "bogus"], "--workload"),
    ("workload-seed-negative", ["workload", "--seed", "-1"], "--seed"),
    ("workload-seed-huge", ["workload", "--seed", str(10**30)], "--seed"),
    ("workload-arrival", ["workload", "--arrival", "uniform"], "--arrival"),
    ("workload-trace-missing", ["workload", "--trace", "nope.csv"], "nope.csv"),
    ("workload-trace-directory", ["workload", "--trace", "adir"], "adir"),
    ("workload-trace-no-format", ["workload", "--trace", "noext.txt"], "noext.txt"),
    ("workload-trace-binary", ["workload", "--trace", "binary.csv"], "binary.csv"),
    ("workload-trace-field-limit", ["workload", "--trace", "big-field.csv"], "big-field.csv"),
    ("workload-trace-huge-tokens-csv", ["workload", "--trace", "huge-tokens.csv"], "ContextTokens"),
    ("workload-trace-half-tokens", ["workload", "--trace", "half.csv"], "ContextTokens"),
    ("workload-trace-inf-time", ["workload", "--trace", "inf-time.csv"], "TIMESTAMP"),
    ("workload-trace-short-row", ["workload", "--trace", "short-row.csv"], "short-row.csv"),
    ("workload-trace-no-span-to-rescale", ["workload", "--trace", "one-row.csv", "--request-rate", "5"],
     "--request-rate"),
    ("workload-trace-nul-byte", ["workload", "--trace", "nul.csv"], "nul.csv"),
    ("workload-trace-open-quote", ["workload", "--trace", "quote.csv"], "quote.csv"),
    ("workload-trace-1e30-tokens", ["workload", "--trace", "tok30.jsonl"], "ContextTokens"),
    ("workload-trace-string-tokens", ["workload", "--trace", "tokstr.jsonl"], "ContextTokens"),
    ("workload-trace-bool-tokens", ["workload", "--trace", "tokbool.jsonl"], "GeneratedTokens"),
    ("workload-trace-null-tokens", ["workload", "--trace", "toknull.jsonl"], "GeneratedTokens"),
    ("workload-trace-nan-time", ["workload", "--trace", "time-nan.jsonl"], "time-nan.jsonl"),
    ("workload-trace-huge-time", ["workload", "--trace", "time-huge.jsonl"], "TIMESTAMP"),
    ("workload-trace-bigint", ["workload", "--trace", "bigint.jsonl"], "bigint.jsonl"),
    ("workload-trace-deep", ["workload", "--trace", "deep.jsonl"], "deep.jsonl"),
    ("workload-trace-not-object", ["workload", "--trace", "notobj.jsonl"], "notobj.jsonl"),
    ("workload-mooncake-string-tokens", ["workload", "--trace", "mooncake-str.jsonl"], "input_length"),
    ("workload-mooncake-huge-tokens", ["workload", "--trace", "mooncake-huge.jsonl"], "input_length"),
    ("workload-rate-subnormal", ["workload", *TINY, "--rate", "1e-320"], "--rate"),
    ("workload-columns-bad", ["workload", "--trace", "ok.csv", "--columns", "foo=bar"], "--columns"),
    ("workload-columns-empty-name", ["workload", "--trace", "ok.csv", "--columns", "prompt="], "--columns"),
    ("workload-columns-without-trace", ["workload", "--columns", "prompt=p"], "--columns"),
    ("workload-columns-missing", ["workload", "--trace", "ok.csv", "--columns", "prompt=Nope"], "Nope"),
    ("workload-plot-is-file", ["workload", *TINY, "--plot", "afile"], "--plot"),
    # -- cost ---------------------------------------------------------------------------
    ("cost-batch-zero", ["cost", "--batch", "0"], "--batch"),
    ("cost-batch-text", ["cost", "--batch", "two"], "--batch"),
    ("cost-batch-huge", ["cost", "--batch", str(10**30)], "--batch"),
    ("cost-context-negative", ["cost", "--context", "-1"], "--context"),
    ("cost-context-huge", ["cost", "--context", str(10**30)], "--context"),
    ("cost-new-tokens-zero", ["cost", "--new-tokens", "0"], "--new-tokens"),
    ("cost-new-tokens-huge", ["cost", "--new-tokens", str(10**25)], "--new-tokens"),
    ("cost-max-batch-under-1e308", ["cost", "--max-batch-under", "1e308"], "--max-batch-under"),
    ("cost-max-batch-under-inf", ["cost", "--max-batch-under", "inf"], "--max-batch-under"),
    ("cost-max-batch-under-nan", ["cost", "--max-batch-under", "nan"], "--max-batch-under"),
    ("cost-max-batch-under-zero", ["cost", "--max-batch-under", "0"], "--max-batch-under"),
    ("cost-reservations-zero", ["cost", "--reservations", "0"], "--reservations"),
    ("cost-reservations-huge", ["cost", "--reservations", str(10**30)], "--reservations"),
    ("cost-mfu-zero", ["cost", "--mfu", "0"], "--mfu"),
    ("cost-mfu-nan", ["cost", "--mfu", "nan"], "--mfu"),
    ("cost-mfu-above-one", ["cost", "--mfu", "2"], "--mfu"),
    ("cost-mbu-inf", ["cost", "--mbu", "inf"], "--mbu"),
    ("cost-overhead-negative", ["cost", "--overhead-ms", "-1"], "--overhead-ms"),
    ("cost-overhead-nan", ["cost", "--overhead-ms", "nan"], "--overhead-ms"),
    ("cost-memory-utilization", ["cost", "--memory-utilization", "1.5"], "--memory-utilization"),
    ("cost-memory-utilization-zero", ["cost", "--memory-utilization", "0"], "--memory-utilization"),
    ("cost-model-unknown", ["cost", "--model", "gpt-9"], "--model"),
    ("cost-gpu-unknown", ["cost", "--gpu", "Z100"], "--gpu"),
    ("cost-model-missing-file", ["cost", "--model", "nope.toml"], "nope.toml"),
    ("cost-model-wrong-suffix", ["cost", "--model", "spec.txt"], "spec.txt"),
    ("cost-model-deep", ["cost", "--model", "spec-deep.json"], "spec-deep.json"),
    ("cost-gpu-deep-toml", ["cost", "--gpu", "spec-deep.toml"], "spec-deep.toml"),
    ("cost-gpu-bigint", ["cost", "--gpu", "spec-bigint.json"], "spec-bigint.json"),
    ("cost-model-bad-toml", ["cost", "--model", "spec-bad.toml"], "spec-bad.toml"),
    ("cost-model-binary", ["cost", "--model", "binary.json"], "binary.json"),
    ("cost-model-string-int", ["cost", "--model", "spec-str.toml"], "n_layers"),
    ("cost-model-unknown-key", ["cost", "--model", "spec-unknown.toml"], "layers"),
    ("cost-model-zero-layers", ["cost", "--model", "spec-zero.toml"], "n_layers"),
    ("cost-model-huge-context", ["cost", "--model", "spec-bigctx.json"], "max_context"),
    ("cost-gpu-inf-mfu", ["cost", "--gpu", "spec-inf.toml"], "mfu"),
    ("simulate-gpu-denormal-mfu", ["simulate", "--gpu", "spec-denormal.toml"], "mfu"),
    ("cost-gpu-nan-memory", ["cost", "--gpu", "spec-nan.toml"], "memory"),
    ("cost-gpu-huge-peak", ["cost", "--gpu", "spec-huge.toml"], "peak_flops"),
    ("cost-cost-model", ["cost", "--cost", "exact"], "--cost"),
    ("cost-plot-under-file", ["cost", "--plot", "afile/x"], "--plot"),
    ("cost-tp-zero", ["cost", "--tp", "0"], "--tp"),
    ("cost-tp-not-dividing", ["cost", "--tp", "3"], "--tp"),
    ("cost-tp-huge", ["cost", "--tp", str(10**30)], "--tp"),
    # -- simulate -----------------------------------------------------------------------
    ("simulate-system-unknown", ["simulate", *TINY, "--system", "bogus"], "--system"),
    ("simulate-system-field-zero", ["simulate", *TINY, "--system", "orca-oracle:max_bs=0"], "max_bs"),
    ("simulate-system-field-text", ["simulate", *TINY, "--system", "orca-oracle:max_bs=lots"], "max_bs"),
    ("simulate-block-over-capacity", ["simulate", *TINY, "--system", "paged:block_size=100000000"], "block_size"),
    ("simulate-system-field-unknown", ["simulate", *TINY, "--system", "orca-oracle:bogus=1"], "bogus"),
    ("simulate-csv-under-file", ["simulate", *TINY, "--csv", "afile/r.csv"], "--csv"),
    ("simulate-csv-directory", ["simulate", *TINY, "--csv", "adir"], "--csv"),
    ("simulate-csv-no-parent", ["simulate", *TINY, "--csv", "nodir/r.csv"], "--csv"),
    ("simulate-requests-json-directory", ["simulate", *TINY, "--requests-json", "adir"], "--requests-json"),
    ("simulate-perfetto-under-file", ["simulate", *TINY, "--perfetto", "afile/t.json"], "--perfetto"),
    ("simulate-perfetto-directory", ["simulate", *TINY, "--perfetto", "adir"], "--perfetto"),
    ("simulate-plot-is-file", ["simulate", *TINY, "--plot", "afile"], "--plot"),
    ("simulate-late-output-bad", ["simulate", *TINY, "--csv", "r.csv", "--perfetto", "adir"], "--perfetto"),
    ("simulate-slo-ttft-nan", ["simulate", *TINY, "--slo-ttft", "nan"], "--slo-ttft"),
    ("simulate-slo-ttft-negative", ["simulate", *TINY, "--slo-ttft", "-1"], "--slo-ttft"),
    ("simulate-slo-tpot-inf", ["simulate", *TINY, "--slo-tpot", "inf"], "--slo-tpot"),
    ("simulate-slo-target-zero", ["simulate", *TINY, "--slo-target", "0"], "--slo-target"),
    ("simulate-slo-target-nan", ["simulate", *TINY, "--slo-target", "nan"], "--slo-target"),
    ("simulate-goodput-key", ["simulate", *TINY, "--goodput", "latency:5"], "--goodput"),
    ("simulate-goodput-value", ["simulate", *TINY, "--goodput", "ttft:abc"], "--goodput"),
    ("simulate-goodput-nan", ["simulate", *TINY, "--goodput", "ttft:nan"], "--goodput"),
    ("simulate-goodput-negative", ["simulate", *TINY, "--goodput", "tpot:-5"], "--goodput"),
    ("simulate-goodput-twice", ["simulate", *TINY, "--goodput", "ttft:5", "ttft:6"], "--goodput"),
    ("simulate-goodput-and-slo", ["simulate", *TINY, "--goodput", "ttft:5", "--slo-ttft", "1"], "--goodput"),
    ("simulate-percentile-metrics", ["simulate", *TINY, "--percentile-metrics", "ttft,bogus"],
     "--percentile-metrics"),
    ("simulate-metric-percentiles-101", ["simulate", *TINY, "--metric-percentiles", "50,101"],
     "--metric-percentiles"),
    ("simulate-metric-percentiles-text", ["simulate", *TINY, "--metric-percentiles", "p99"],
     "--metric-percentiles"),
    ("simulate-result-dir-under-file", ["simulate", *TINY, "--save-result", "--result-dir", "afile/r"],
     "--result-dir"),
    ("simulate-result-filename-directory", ["simulate", *TINY, "--save-result", "--result-filename", "adir"],
     "--result-filename"),
    ("simulate-rate-nan", ["simulate", *TINY, "--rate", "nan"], "--rate"),
    ("simulate-overhead-nan", ["simulate", *TINY, "--overhead-ms", "nan"], "--overhead-ms"),
    ("simulate-overhead-inf", ["simulate", *TINY, "--overhead-ms", "inf"], "--overhead-ms"),
    ("simulate-mfu-above-one", ["simulate", *TINY, "--mfu", "1.5"], "--mfu"),
    ("simulate-mfu-subnormal", ["simulate", *TINY, "--mfu", "1e-320"], "--mfu"),
    ("simulate-mbu-subnormal", ["simulate", *TINY, "--mbu", "1e-320"], "--mbu"),
    ("simulate-trace-1e30", ["simulate", "--trace", "tok30.jsonl"], "ContextTokens"),
    ("simulate-trace-deep", ["simulate", "--trace", "deep.jsonl"], "deep.jsonl"),
    ("simulate-model-deep", ["simulate", *TINY, "--model", "spec-deep.json"], "spec-deep.json"),
    ("simulate-context-mode", ["simulate", *TINY, "--context-mode", "truncate"], "--context-mode"),
    ("simulate-requests-huge", ["simulate", "--requests", str(10**12)], "--requests"),
    # -- goodput ------------------------------------------------------------------------
    *[(f"goodput-fleet-rate-{v}", ["goodput", *ONE, "--fleet-rate", v], "--fleet-rate")
      for v in ("nan", "inf", "0", "-1")],
    ("goodput-tolerance-zero", ["goodput", *ONE, "--tolerance", "0"], "--tolerance"),
    ("goodput-tolerance-nan", ["goodput", *ONE, "--tolerance", "nan"], "--tolerance"),
    ("goodput-start-zero", ["goodput", *ONE, "--start", "0"], "--start"),
    ("goodput-start-inf", ["goodput", *ONE, "--start", "inf"], "--start"),
    ("goodput-start-above-ceiling", ["goodput", *ONE, "--start", "1e300"], "--start"),
    ("goodput-jobs-zero", ["goodput", *TINY, "--jobs", "0"], "--jobs"),
    ("goodput-systems-empty", ["goodput", *ONE, "--systems", ","], "--systems"),
    ("goodput-systems-duplicate", ["goodput", *ONE, "--systems", "paged,paged"], "--systems"),
    ("goodput-systems-unknown", ["goodput", *ONE, "--systems", "orca-oracle,bogus"], "--systems"),
    ("goodput-slo-target-above-one", ["goodput", *ONE, "--slo-target", "1.5"], "--slo-target"),
    ("goodput-plot-is-file", ["goodput", *ONE, "--plot", "afile"], "--plot"),
    ("goodput-result-dir-under-file", ["goodput", *ONE, "--result-dir", "afile/x"], "--result-dir"),
    # -- compare ------------------------------------------------------------------------
    ("compare-rates-duplicate", ["compare", *ONE, "--rates", "1,1"], "--rates"),
    ("compare-rates-duplicate-spelled", ["compare", *ONE, "--rates", "2,2.0"], "--rates"),
    ("compare-rates-inf", ["compare", *ONE, "--rates", "1,inf"], "--rates"),
    ("compare-rates-nan", ["compare", *ONE, "--rates", "nan"], "--rates"),
    ("compare-rates-negative", ["compare", *ONE, "--rates", "1,-2"], "--rates"),
    ("compare-rates-empty", ["compare", *ONE, "--rates", ""], "--rates"),
    ("compare-rates-text", ["compare", *ONE, "--rates", "1,fast"], "--rates"),
    ("compare-overload-nan", ["compare", *CMP[:-1], "nan"], "--overload-rate"),
    ("compare-overload-negative", ["compare", *CMP[:-1], "-1"], "--overload-rate"),
    ("compare-overload-inf", ["compare", *CMP[:-1], "inf"], "--overload-rate"),
    ("compare-overload-subnormal", ["compare", *CMP[:-1], "1e-320"], "--overload-rate"),
    ("compare-jobs-huge", ["compare", *CMP[:-2], "--jobs", str(10**23)], "--jobs"),
    *[(f"compare-fleet-rate-{v}", ["compare", *CMP, "--fleet-rate", v], "--fleet-rate")
      for v in ("nan", "inf", "0", "-1")],
    ("compare-systems-unknown", ["compare", *CMP, "--systems", "static,bogus"], "--systems"),
    ("compare-systems-duplicate", ["compare", *CMP, "--systems", "static,static"], "--systems"),
    ("compare-plot-under-file", ["compare", *CMP, "--plot", "afile/figs"], "--plot"),
    ("compare-result-filename-dir", ["compare", *CMP, "--save-result", "--result-filename", "adir"],
     "--result-filename"),
    ("compare-requests-zero", ["compare", *CMP, "--requests", "0"], "--requests"),
    # -- knobs --------------------------------------------------------------------------
    ("knobs-experiment-unknown", ["knobs", "bogus", *ONE], "bogus"),
    ("knobs-rates-duplicate", ["knobs", "max_bs", *ONE, "--rates", "2,2"], "--rates"),
    ("knobs-rates-nan", ["knobs", "max_bs", *ONE, "--rates", "nan"], "--rates"),
    ("knobs-rates-inf", ["knobs", "max_bs", *ONE, "--rates", "inf"], "--rates"),
    ("knobs-slo-ttft-nan", ["knobs", "max_bs", *ONE, "--slo-ttft", "nan"], "--slo-ttft"),
    ("knobs-slo-tpot-negative", ["knobs", "max_bs", *ONE, "--slo-tpot", "-1"], "--slo-tpot"),
    ("knobs-systems-empty", ["knobs", "max_bs", *ONE, "--systems", ","], "--systems"),
    ("knobs-systems-unknown", ["knobs", "max_bs", *ONE, "--systems", "bogus"], "--systems"),
    ("knobs-plot-is-file", ["knobs", "max_bs", *ONE, "--rates", "1", "--plot", "afile"], "--plot"),
    ("knobs-jobs-zero", ["knobs", "max_bs", *TINY, "--jobs", "0"], "--jobs"),
    ("knobs-requests-huge", ["knobs", "max_bs", "--requests", str(10**13)], "--requests"),
    # -- mini ---------------------------------------------------------------------------
    ("mini-seed-negative", ["mini", "--seed", "-1"], "--seed"),
    ("mini-seed-huge", ["mini", "--seed", str(10**30)], "--seed"),
    ("mini-seed-text", ["mini", "--seed", "x"], "--seed"),
    ("mini-max-batch-large", ["mini", "--max-batch", "1000"], "--max-batch"),
    ("mini-max-batch-negative", ["mini", "--max-batch", "-1"], "--max-batch"),
    ("mini-repeats-zero", ["mini", "--repeats", "0"], "--repeats"),
    # -- clipper ------------------------------------------------------------------------
    *[(f"clipper-slo-ms-{v}", ["clipper", "--requests", "10", "--slo-ms", v], "--slo-ms")
      for v in ("1e9", "nan", "inf", "0", "-1")],
    ("clipper-requests-zero", ["clipper", "--requests", "0"], "--requests"),
    ("clipper-requests-huge", ["clipper", "--requests", str(10**13)], "--requests"),
    ("clipper-seed-negative", ["clipper", "--requests", "10", "--seed", "-1"], "--seed"),
    ("clipper-plot-is-file", ["clipper", "--requests", "10", "--plot", "afile"], "--plot"),
    # -- report -------------------------------------------------------------------------
    ("report-out-not-html", ["report", *CMP, "--out", "page.txt"], "--out"),
    ("report-out-no-parent", ["report", *CMP, "--out", "nodir/page.html"], "--out"),
    ("report-out-under-file", ["report", *CMP, "--out", "afile/page.html"], "--out"),
    ("report-out-directory", ["report", *CMP, "--out", "adir.html"], "--out"),
    ("report-from-missing", ["report", "--out", "page.html", "--from", "nope.json"], "--from"),
    ("report-from-deep", ["report", "--out", "page.html", "--from", "deep.json"], "--from"),
    ("report-from-bigint", ["report", "--out", "page.html", "--from", "bigint.json"], "--from"),
    ("report-from-binary", ["report", "--out", "page.html", "--from", "binary.json"], "--from"),
    ("report-from-not-report", ["report", "--out", "page.html", "--from", "notreport.json"], "--from"),
    ("report-from-list", ["report", "--out", "page.html", "--from", "list.json"], "--from"),
    ("report-fleet-rate-nan", ["report", *CMP, "--out", "page.html", "--fleet-rate", "nan"], "--fleet-rate"),
    ("report-rates-duplicate", ["report", *ONE, "--out", "page.html", "--rates", "4,4"], "--rates"),
    # -- sweep --------------------------------------------------------------------------
    ("sweep-config-missing", ["sweep", "nope.toml", "--out", "o"], "nope.toml"),
    ("sweep-config-directory", ["sweep", "adir", "--out", "o"], "adir"),
    ("sweep-config-syntax", ["sweep", "bad-syntax.toml", "--out", "o"], "bad-syntax.toml"),
    ("sweep-config-deep", ["sweep", "deep.toml", "--out", "o"], "deep.toml"),
    ("sweep-config-bigint", ["sweep", "bigint.toml", "--out", "o"], "bigint.toml"),
    ("sweep-config-binary", ["sweep", "binary.toml", "--out", "o"], "binary.toml"),
    ("sweep-rate-duplicate", ["sweep", "dup-rate.toml", "--out", "o"], "rate"),
    ("sweep-rate-duplicate-int", ["sweep", "dup-rate2.toml", "--out", "o"], "rate"),
    ("sweep-rate-inf", ["sweep", "inf-rate.toml", "--out", "o"], "rate"),
    ("sweep-rate-nan", ["sweep", "nan-rate.toml", "--out", "o"], "rate"),
    ("sweep-rate-text", ["sweep", "str-rate.toml", "--out", "o"], "rate"),
    ("sweep-rate-empty", ["sweep", "empty-rate.toml", "--out", "o"], "rate"),
    ("sweep-fleet-rate-text", ["sweep", "fleet-str.toml", "--out", "o"], "fleet_rate"),
    ("sweep-fleet-rate-nan", ["sweep", "fleet-nan.toml", "--out", "o"], "fleet_rate"),
    ("sweep-fleet-rate-inf", ["sweep", "fleet-inf.toml", "--out", "o"], "fleet_rate"),
    ("sweep-fleet-rate-negative", ["sweep", "fleet-neg.toml", "--out", "o"], "fleet_rate"),
    ("sweep-goodput-enabled-text", ["sweep", "enabled-str.toml", "--out", "o"], "enabled"),
    ("sweep-requests-text", ["sweep", "req-str.toml", "--out", "o"], "requests"),
    ("sweep-requests-zero", ["sweep", "req-zero.toml", "--out", "o"], "requests"),
    ("sweep-requests-huge", ["sweep", "req-huge.toml", "--out", "o"], "requests"),
    ("sweep-requests-fraction", ["sweep", "req-float.toml", "--out", "o"], "requests"),
    ("sweep-kind", ["sweep", "kind-bad.toml", "--out", "o"], "kind"),
    ("sweep-prompt-text", ["sweep", "prompt-str.toml", "--out", "o"], "prompt"),
    ("sweep-prompt-huge", ["sweep", "prompt-huge.toml", "--out", "o"], "prompt"),
    ("sweep-output-zero", ["sweep", "output-zero.toml", "--out", "o"], "output"),
    ("sweep-seed-negative", ["sweep", "seed-neg.toml", "--out", "o"], "seed"),
    ("sweep-burstiness-nan", ["sweep", "burst-nan.toml", "--out", "o"], "burstiness"),
    ("sweep-arrival", ["sweep", "arrival-bad.toml", "--out", "o"], "arrival"),
    ("sweep-context-mode", ["sweep", "mode-bad.toml", "--out", "o"], "context_mode"),
    ("sweep-slo-ttft-nan", ["sweep", "ttft-nan.toml", "--out", "o"], "ttft"),
    ("sweep-slo-ttft-text", ["sweep", "ttft-str.toml", "--out", "o"], "ttft"),
    ("sweep-slo-tpot-negative", ["sweep", "tpot-neg.toml", "--out", "o"], "tpot_ms"),
    ("sweep-slo-e2e-inf", ["sweep", "e2e-inf.toml", "--out", "o"], "e2e"),
    ("sweep-slo-target", ["sweep", "target-big.toml", "--out", "o"], "target"),
    ("sweep-max-bs-zero", ["sweep", "maxbs-zero.toml", "--out", "o"], "max_bs"),
    ("sweep-max-bs-duplicate", ["sweep", "maxbs-dup.toml", "--out", "o"], "max_bs"),
    ("sweep-system-unknown", ["sweep", "system-bad.toml", "--out", "o"], "bogus"),
    ("sweep-model-unknown", ["sweep", "model-bad.toml", "--out", "o"], "nope"),
    ("sweep-axis-unknown", ["sweep", "axis-bad.toml", "--out", "o"], "bogus"),
    ("sweep-section-unknown", ["sweep", "section-bad.toml", "--out", "o"], "bogus"),
    ("sweep-gpu-file-deep", ["sweep", "gpu-deep.toml", "--out", "o"], "spec-deep.json"),
    ("sweep-out-is-file", ["sweep", "ok.toml", "--out", "afile"], "--out"),
    ("sweep-out-under-file", ["sweep", "ok.toml", "--out", "afile/o"], "--out"),
    ("sweep-out-progress-is-dir", ["sweep", "ok.toml", "--out", "prog-dir"], "--out"),
    ("sweep-out-points-is-dir", ["sweep", "ok.toml", "--out", "points-dir", "--backend", "serial"], "--out"),
    ("sweep-resume-binary-progress", ["sweep", "ok.toml", "--out", "bin-progress", "--resume"], "progress.jsonl"),
    ("sweep-jobs-zero", ["sweep", "ok.toml", "--out", "o", "--jobs", "0"], "--jobs"),
    ("sweep-jobs-huge", ["sweep", "ok.toml", "--out", "o", "--jobs", str(10**23)], "--jobs"),
    ("sweep-plot-is-file", ["sweep", "ok.toml", "--out", "o", "--plot", "afile"], "--plot"),
    ("sweep-backend", ["sweep", "ok.toml", "--out", "o", "--backend", "mpi"], "--backend"),
    # -- calibrate, serve, bench: refused before any timing, server or connection -----------
    ("calibrate-no-profile", ["calibrate"], "PROFILE"),
    ("calibrate-repeats-zero", ["calibrate", "--mini", "--repeats", "0"], "--repeats"),
    ("calibrate-hold-out", ["calibrate", "--mini", "--repeats", "1", "--hold-out", "bogus"], "--hold-out"),
    ("calibrate-out-under-file", ["calibrate", "--mini", "--repeats", "1", "--out", "afile/gpu.toml"], "--out"),
    ("calibrate-out-directory", ["calibrate", "--mini", "--repeats", "1", "--out", "adir"], "--out"),
    ("serve-port", ["serve", "--port", "70000"], "--port"),
    ("serve-host-unresolvable", ["serve", "--host", "256.1.1.1", "--port", "0"], "--host"),
    ("serve-kv-cache-tokens", ["serve", "--kv-cache-tokens", "0"], "--kv-cache-tokens"),
    ("serve-max-waiting", ["serve", "--max-waiting", "0"], "--max-waiting"),
    ("serve-system", ["serve", "--system", "bogus"], "--system"),
    ("serve-drain-timeout-nan", ["serve", "--drain-timeout", "nan"], "--drain-timeout"),
    ("serve-save-trace-under-file", ["serve", "--save-trace", "afile/trace.json"], "--save-trace"),
    ("serve-max-model-len", ["serve", "--max-model-len", "0"], "--max-model-len"),
    ("serve-model", ["serve", "--model", "nope"], "--model"),
    ("bench-num-prompts-zero", ["bench", "--num-prompts", "0"], "--num-prompts"),
    ("bench-num-prompts-huge", ["bench", "--num-prompts", str(10**13)], "--num-prompts"),
    ("bench-request-rate-nan", ["bench", "--request-rate", "nan"], "--request-rate"),
    ("bench-burstiness-zero", ["bench", "--burstiness", "0"], "--burstiness"),
    ("bench-goodput", ["bench", "--goodput", "ttft:x"], "--goodput"),
    ("bench-extra-body-syntax", ["bench", "--extra-body", "{bad"], "--extra-body"),
    ("bench-extra-body-list", ["bench", "--extra-body", "[1]"], "--extra-body"),
    ("bench-range-ratio", ["bench", "--random-range-ratio", "2"], "--random-range-ratio"),
    ("bench-max-concurrency", ["bench", "--max-concurrency", "0"], "--max-concurrency"),
    ("bench-dataset-name", ["bench", "--dataset-name", "bogus"], "--dataset-name"),
    ("bench-dataset-missing", ["bench", "--dataset-name", "trace", "--dataset-path", "nope.csv"], "nope.csv"),
    ("bench-dataset-deep", ["bench", "--dataset-name", "trace", "--dataset-path", "deep.jsonl"], "deep.jsonl"),
    ("bench-result-dir", ["bench", "--save-result", "--result-dir", "afile/x"], "--result-dir"),
    ("bench-base-url", ["bench", "--base-url", "notaurl"], "--base-url"),
    ("bench-temperature", ["bench", "--temperature", "nan"], "--temperature"),
    ("bench-request-timeout", ["bench", "--request-timeout", "0"], "--request-timeout"),
    ("bench-input-len", ["bench", "--random-input-len", "0"], "--random-input-len"),
    ("fleet-replicas-zero", ["fleet", *ONE, "--replicas", "0"], "--replicas"),
    ("fleet-replicas-huge", ["fleet", *ONE, "--replicas", str(10**9)], "--replicas"),
    ("fleet-router", ["fleet", *ONE, "--router", "bogus"], "--router"),
    ("fleet-config-missing", ["fleet", *ONE, "--fleet-config", "nope.toml"], "--fleet-config"),
    ("fleet-config-deep", ["fleet", *ONE, "--fleet-config", "deep.toml"], "deep.toml"),
    ("fleet-config-bigint", ["fleet", *ONE, "--fleet-config", "bigint.toml"], "bigint.toml"),
    ("fleet-kv-link-nan", ["fleet", *ONE, "--prefill-replicas", "1", "--decode-replicas", "1",
                           "--kv-link-bandwidth", "nan"], "--kv-link-bandwidth"),
    ("fleet-replica-syntax", ["fleet", *ONE, "--replica", "bogus"], "--replica"),
    ("fleet-latency-bound-nan", ["fleet", *ONE, "--latency-bound", "nan"], "--latency-bound"),
    ("fleet-half-disaggregated", ["fleet", *ONE, "--prefill-replicas", "1"], "--decode-replicas"),
    ("fleet-plot-is-file", ["fleet", *ONE, "--plot", "afile"], "--plot"),
    ("fleet-requests-huge", ["fleet", "--requests", str(10**13)], "--requests"),
    ("plan-needs-rate", ["plan", *ONE], "--request-rate"),
    ("plan-rate-nan", ["plan", *ONE, "--rate", "nan"], "--rate"),
    ("plan-gpus-duplicate", ["plan", *ONE, "--rate", "1", "--gpus", "h100,h100"], "--gpus"),
    ("plan-tp-zero", ["plan", *ONE, "--rate", "1", "--tp", "0"], "--tp"),
    ("plan-tp-text", ["plan", *ONE, "--rate", "1", "--tp", "x"], "--tp"),
    ("plan-tp-not-dividing", ["plan", *ONE, "--rate", "1", "--tp", "3"], "--tp"),
    ("plan-max-replicas-zero", ["plan", *ONE, "--rate", "1", "--max-replicas", "0"], "--max-replicas"),
    ("plan-router", ["plan", *ONE, "--rate", "1", "--router", "bogus"], "--router"),
    ("plan-system", ["plan", *ONE, "--rate", "1", "--system", "bogus"], "--system"),
    ("validate-rates-duplicate", ["validate", "--rates", "1,1"], "--rates"),
    ("validate-rates-nan", ["validate", "--rates", "1,nan"], "--rates"),
    ("validate-num-prompts-zero", ["validate", "--num-prompts", "0"], "--num-prompts"),
    ("validate-num-prompts-huge", ["validate", "--num-prompts", str(10**13)], "--num-prompts"),
    ("validate-plot-is-file", ["validate", "--plot", "afile"], "--plot"),
    ("validate-device-missing", ["validate", "--device", "nope.toml"], "nope.toml"),
    ("validate-kv-cache-tokens", ["validate", "--kv-cache-tokens", "0"], "--kv-cache-tokens"),
    ("validate-range-ratio", ["validate", "--random-range-ratio", "2"], "--random-range-ratio"),
    ("validate-system", ["validate", "--system", "bogus"], "--system"),
    ("validate-model", ["validate", "--model", "nope"], "--model"),
]


@pytest.mark.parametrize("argv, needle", [pytest.param(argv, needle, id=name) for name, argv, needle in CASES])
def test_bad_input_exits_2_with_one_line(tmp_path, monkeypatch, capsys, argv, needle):
    monkeypatch.chdir(tmp_path)
    _make(tmp_path, _needed(argv))
    before = _listing(tmp_path)
    code = main_within(argv)
    out, err = capsys.readouterr()
    lines = err.strip("\n").splitlines()
    assert code == 2, f"exit {code}; stderr: {err!r}"
    assert len(lines) == 1, f"stderr is not one line: {err!r}"
    assert "Traceback" not in err
    assert needle in lines[0], f"{needle!r} not named in {lines[0]!r}"
    assert out == ""
    assert _listing(tmp_path) == before, "the command left a file behind or changed one"


@pytest.mark.parametrize("data, needle", [(bytes(range(128, 256)), "<stdin>"),
                                          (b"[" * 100_000, "<stdin>"),
                                          (_tick(prompt_tokens=10**25).encode(), "prompt_tokens")])
def test_tick_reads_bad_standard_input_as_one_line(monkeypatch, capsys, data, needle):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))
    assert main(["tick", "-"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and needle in err and "Traceback" not in err


def test_the_suite_covers_every_command():
    from batchlab.cli import COMMANDS

    covered = {argv[0] for _, argv, _ in CASES}
    assert set(COMMANDS) <= covered
    assert len(CASES) >= 150
