"""Bad input on `fleet`, `plan`, `bench`, `calibrate`, `validate` and `serve`: exit code 2, one
line on stderr naming the flag, field or record, no traceback, no hang, nothing written, and
nothing allocated or started first (sizes are refused from estimates, `batchlab.limits`).

Cases run in this process through `batchlab.cli.main`, each in an empty directory holding only
the files it names, so the whole module takes seconds. Sizes are typed by hand where a human
would type them; most families are generated (every numeric flag times the same hostile values).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from batchlab.cli import main
from helpers import main_within

ONE = ["--workload", "fixed", "--prompt", "8", "--output", "4", "--requests", "3", "--jobs", "1"]
FLEET = ["fleet", *ONE]
PLAN = ["plan", *ONE, "--rate", "1", "--backend", "serial"]
DISAGG = [*FLEET, "--prefill-replicas", "1", "--decode-replicas", "1"]
BENCH = ["bench", "--base-url", "http://127.0.0.1:9", "--num-prompts", "2", "--disable-tqdm"]
CAL = ["calibrate", "p.csv", "--gpu", "H100-SXM", "--model", "Llama-3-8B"]
SERVE = ["serve", "--port", "0"]
DEEP = "[" * 100_000 + "]" * 100_000
PLAIN = "op,tokens,batch,context,ms,tp,bytes\n"
MLP = ("num_tokens,num_tensor_parallel_workers,n_head,n_kv_head,n_embd,n_expanded_embd,vocab_size,"
       "time_stats.mlp_up_proj.median\n")
NET = "size,num_workers,devices_per_node,time_stats.all_reduce.median\n"

# Hostile text for a flag that takes a number: each must be refused by every numeric flag.
NOT_NUMBERS = ("x", "", "nan", "inf", "-inf", "1e400", "0x10", "1,2")
HUGE = str(10**30)


def _plain(**cells) -> str:
    row = {"op": "qkv", "tokens": "8", "batch": "1", "context": "0", "ms": "1", "tp": "1", "bytes": ""}
    row.update(cells)
    return PLAIN + ",".join(row[c] for c in PLAIN.strip().split(",")) + "\n"


def _mlp(**cells) -> str:
    row = {"num_tokens": "8", "num_tensor_parallel_workers": "1", "n_head": "32", "n_kv_head": "8",
           "n_embd": "4096", "n_expanded_embd": "14336", "vocab_size": "32000",
           "time_stats.mlp_up_proj.median": "0.1"}
    row.update(cells)
    return MLP + ",".join(row[c] for c in MLP.strip().split(",")) + "\n"


def _net(**cells) -> str:
    row = {"size": "1048576", "num_workers": "2", "devices_per_node": "8", "time_stats.all_reduce.median": "0.1"}
    row.update(cells)
    return NET + ",".join(row[c] for c in NET.strip().split(",")) + "\n"


def _replica_table(**keys) -> str:
    return "[[replica]]\n" + "".join(f"{k} = {v}\n" for k, v in keys.items())


# (id, argv, what the one line must name, files to make first: name -> text, bytes or None for a directory)
CASES: list[tuple[str, list[str], str, dict]] = []


def case(name: str, argv: list[str], needle: str, files: dict | None = None) -> None:
    CASES.append((name, argv, needle, files or {}))


# -- fleet ---------------------------------------------------------------------------------
for flag in ("--replicas", "--tp", "--pp"):
    for k, value in enumerate((*NOT_NUMBERS, "0", "-1", "1.5", HUGE)):
        case(f"fleet{flag}-{k}", [*FLEET, flag, value], flag)
for flag in ("--prefill-replicas", "--decode-replicas"):
    other = "--decode-replicas" if flag == "--prefill-replicas" else "--prefill-replicas"
    for k, value in enumerate(("0", "-2", "x", "nan", "100000", HUGE)):
        case(f"fleet{flag}-{k}", [*FLEET, other, "1", flag, value], flag)
for k, value in enumerate(("0", "-1", "nan", "inf", "x", "1e-300", "1e-12")):
    case(f"fleet-kv-link-bandwidth-{k}", [*DISAGG, "--kv-link-bandwidth", value], "--kv-link-bandwidth")
for k, value in enumerate(("-1", "nan", "inf", "1e300", "1e10", "x")):
    case(f"fleet-kv-link-latency-{k}", [*DISAGG, "--kv-link-latency", value], "--kv-link-latency")
for k, value in enumerate(("-1", "nan", "inf", "1e308", "1e10")):
    case(f"fleet-overhead-ms-{k}", [*FLEET, "--overhead-ms", value], "--overhead-ms")
for flag in ("--kv-link-bandwidth", "--kv-link-latency"):
    case(f"fleet{flag}-colocated", [*FLEET, flag, "1"], flag)
REPLICA_SPECS = ("", ",", "count", "count=", "count=0", "count=-1", "count=1.5", "count=x",
                 f"count={HUGE}", "count=5000", "count=1,count=2", "bogus=1", "role=bogus",
                 "role=prefill", "role=decode", "tp=0", "tp=3", f"tp={HUGE}", "pp=0", "pp=33",
                 "system=bogus", "gpu=bogus", "model=bogus", "gpu=spec-huge-memory.toml",
                 "system=paged:block_size=1000000000", "count=1,=2", "count=1" + ",x" * 3)
for k, spec in enumerate(REPLICA_SPECS):
    case(f"fleet-replica-{k}", [*FLEET, "--replica", spec], "--replica")
case("fleet-replica-mixed-roles", [*FLEET, "--replica", "role=prefill", "--replica", "role=colocated"], "--replica")
case("fleet-replica-and-replicas", [*FLEET, "--replica", "count=1", "--replicas", "2"], "--replicas")
case("fleet-replicas-total", [*FLEET, *sum((["--replica", "count=4000"] for _ in range(2)), [])], "--replica")
FLEET_FILES = {
    "count-string": _replica_table(count='"2"'),
    "count-float": _replica_table(count="1.5"),
    "count-bool": _replica_table(count="true"),
    "count-zero": _replica_table(count="0"),
    "count-huge": _replica_table(count=HUGE),
    "count-digits": _replica_table(count="9" * 5000),
    "tp-string": _replica_table(tp='"2"'),
    "tp-zero": _replica_table(tp="0"),
    "pp-huge": _replica_table(pp="1000"),
    "role-bogus": _replica_table(role='"bogus"'),
    "role-list": _replica_table(role="[1]"),
    "gpu-int": _replica_table(gpu="3"),
    "system-table": _replica_table(system="{a = 1}"),
    "unknown-key": _replica_table(bogus="1"),
    "empty": "",
    "no-tables": "x = 1\n",
    "not-tables": "replica = 3\n",
    "list-of-ints": "replica = [1, 2]\n",
    "only-prefill": _replica_table(role='"prefill"'),
    "too-many": _replica_table(count="1") * 5000,
    "bad-syntax": "[[replica]\n",
    "deep": "a = " + DEEP + "\n",
}
for key, text in FLEET_FILES.items():
    case(f"fleet-config-{key}", [*FLEET, "--fleet-config", "f.toml"], "f.toml" if key not in
         ("bad-syntax", "only-prefill", "too-many") else "--fleet-config", {"f.toml": text})
case("fleet-config-binary", [*FLEET, "--fleet-config", "f.toml"], "f.toml", {"f.toml": bytes(range(128, 256))})
case("fleet-config-directory", [*FLEET, "--fleet-config", "d"], "--fleet-config", {"d": None})
case("fleet-config-missing", [*FLEET, "--fleet-config", "nope.toml"], "--fleet-config")
case("fleet-config-and-replicas", [*FLEET, "--fleet-config", "f.toml", "--replicas", "2"], "--replicas",
     {"f.toml": _replica_table(count="1")})
for k, value in enumerate(("", ",", "bogus", "round-robin,round-robin", "round-robin,,random")):
    case(f"fleet-router-{k}", [*FLEET, "--router", value], "--router")
case("fleet-decode-router", [*DISAGG, "--decode-router", "bogus"], "--decode-router")
case("fleet-requests-memory", ["fleet", "--requests", "10000000", "--rate", "1"], "--requests")
case("fleet-num-prompts-memory", ["fleet", "--num-prompts", "5000000", "--rate", "1"], "--num-prompts")
case("fleet-gpu-memory", [*FLEET, "--gpu", "spec-huge-memory.toml"], "--gpu")
case("fleet-gpu-memory-disaggregated", [*DISAGG, "--gpu", "spec-huge-memory.toml"], "--gpu")
case("fleet-gpu-slow-link", [*DISAGG, "--gpu", "spec-slow-link.toml"], "--gpu")
for k, (flag, value) in enumerate((("--result-filename", ""), ("--result-filename", " "), ("--result-filename", "a/"),
                                   ("--result-filename", "."), ("--result-filename", ".."), ("--result-dir", ""),
                                   ("--result-filename", "adir"), ("--result-dir", "afile"),
                                   ("--result-filename", "fifo"))):
    case(f"fleet-save-{k}", [*FLEET, "--save-result", flag, value], flag)
case("fleet-plot-empty", [*FLEET, "--plot", ""], "--plot")
case("fleet-plot-file", [*FLEET, "--plot", "afile"], "--plot")
case("fleet-metric-percentiles-many", [*FLEET, "--metric-percentiles", ",".join(str(k / 10) for k in range(200))],
     "--metric-percentiles")
for k, value in enumerate(("-1", str(2**64), "x")):
    case(f"fleet-seed-{k}", [*FLEET, "--seed", value], "--seed")
case("orca-requests-memory", ["fleet", "--experiment", "orca", "--requests", "1000000", "--jobs", "2"], "--requests")
case("orca-replicas", [*FLEET, "--experiment", "orca", "--replicas", "2"], "--replicas")
case("orca-systems", [*FLEET, "--experiment", "orca", "--systems", "bogus"], "--systems")
case("orca-pp", [*FLEET, "--experiment", "orca", "--pp", "64"], "--pp")
case("orca-gpu-memory", [*FLEET, "--experiment", "orca", "--systems", "paged", "--gpu", "spec-huge-memory.toml"],
     "--gpu")
for k, value in enumerate(("0", "-1", "nan", "x")):
    case(f"orca-latency-bound-{k}", [*FLEET, "--experiment", "orca", "--latency-bound", value], "--latency-bound")

# -- plan ----------------------------------------------------------------------------------
for flag in ("--tp", "--pp"):
    for k, value in enumerate(("", ",", "0", "-1", "x", "1,1", "1,,2", HUGE, "64")):
        case(f"plan{flag}-{k}", [*PLAN, flag, value], flag)
for k, value in enumerate(("", ",", "bogus", "h100,h100", "spec-huge-memory.toml")):
    case(f"plan-gpus-{k}", [*PLAN, "--gpus", value], "--gpus")
case("plan-gpus-deep", [*PLAN, "--gpus", "deep.json"], "deep.json")
case("plan-gpu-memory", [*PLAN, "--gpu", "spec-huge-memory.toml"], "--gpu")
for k, value in enumerate(("0", "-1", "x", "4097", HUGE)):
    case(f"plan-max-replicas-{k}", [*PLAN, "--max-replicas", value], "--max-replicas")
case("plan-gpu-slow-link", [*PLAN, "--disaggregated", "--gpu", "spec-slow-link.toml"], "--gpu")
case("plan-max-replicas-time", [*PLAN, "--disaggregated", "--max-replicas", "4096"], "--max-replicas")
for k, value in enumerate(("0", "-1", "nan", "1e-9", "x")):
    case(f"plan-rate-{k}", ["plan", *ONE, "--rate", value], "--rate")
for k, value in enumerate(("0", "-0.5", "1.5", "nan", "x")):
    case(f"plan-slo-target-{k}", [*PLAN, "--slo-target", value], "--slo-target")
for k, value in enumerate(("0", "100000", "x")):
    case(f"plan-jobs-{k}", [*PLAN, "--jobs", value], "--jobs")
case("plan-backend", [*PLAN, "--backend", "bogus"], "--backend")
case("plan-router", [*PLAN, "--router", "bogus"], "--router")
case("plan-system", [*PLAN, "--system", "bogus"], "--system")
case("plan-requests-memory", ["plan", "--rate", "1", "--requests", "10000000", "--backend", "serial"], "--requests")
case("plan-no-rate", ["plan", *ONE], "--request-rate")

# -- bench (every case fails before a request is sent: nothing listens on port 9) ------------
BENCH_NUMBERS = {"--num-prompts": ("0", "-1", "1.5", "10000000000"),
                 "--random-input-len": ("0", "-1", "1.5", HUGE),
                 "--random-output-len": ("0", "-1", "1.5", HUGE),
                 "--random-range-ratio": ("-0.1", "1", "2"),
                 "--request-rate": ("0", "-1", "1e-300"),
                 "--burstiness": ("0", "-1", "1e-300", "1e300"),
                 "--max-concurrency": ("0", "-1", "1.5", HUGE),
                 "--vocab-size": ("0", "-1", "1.5", str(2**31), HUGE),
                 "--temperature": ("-1", "1e400"),
                 "--request-timeout": ("0", "-1", "1e300", "100000"),
                 "--connect-timeout": ("0", "-1", "1e300"),
                 "--seed": ("-1", str(2**64), "1.5")}
for flag, values in BENCH_NUMBERS.items():
    for k, value in enumerate((*values, *NOT_NUMBERS[:5])):
        if flag == "--request-rate" and value == "inf":
            continue   # inf: every request at once, as vLLM's
        case(f"bench{flag}-{k}", [*BENCH, flag, value], flag)
BASE_URLS = ("", "notaurl", "ftp://127.0.0.1", "http://", "http://[::1", "http://[::1]:x",
             "http://127.0.0.1:99999", "http://127.0.0.1:-1", "http://127.0.0.1:0", "http://a b",
             "http://127.0.0.1\x00", "http://127.0.0.1/?x=1", "http://127.0.0.1/#x",
             "http://" + "a" * 5000, "http://u:p@[::1]:x", "http:///path", "//127.0.0.1:9")
for k, url in enumerate(BASE_URLS):
    case(f"bench-base-url-{k}", ["bench", "--base-url", url, "--num-prompts", "2"], "--base-url")
EXTRA_BODIES = ("{bad", "[1]", "3", '"x"', "null", '{"a": NaN}', '{"a": Infinity}', '{"a": ' + "1" * 5000 + "}",
                '{"a": ' + DEEP + "}", '{"model": "x"}', '{"stream": false}', '{"prompt": [1]}',
                '{"messages": []}', '{"stream_options": {}}', "")
for k, body in enumerate(EXTRA_BODIES):
    case(f"bench-extra-body-{k}", [*BENCH, "--extra-body", body], "--extra-body")
for k, (flag, value) in enumerate((("--endpoint", "v1/completions"), ("--endpoint", "/v1/embeddings"),
                                   ("--endpoint", "/" + "a" * 5000 + "completions"), ("--endpoint", ""),
                                   ("--model", ""), ("--model", " "), ("--model", "a\nb"), ("--model", "m" * 5000),
                                   ("--label", ""), ("--label", "a\x00b"), ("--prompt-format", "bogus"))):
    case(f"bench-text-{k}", [*BENCH, flag, value], flag)
case("bench-chat-tokens", [*BENCH, "--endpoint", "/v1/chat/completions", "--prompt-format", "tokens"], "--prompt-format")
for k, value in enumerate(("ttft:x", "ttft:-1", "ttft:0", "ttft:nan", "bogus:1", "ttft", ":1")):
    case(f"bench-goodput-{k}", [*BENCH, "--goodput", value], "--goodput")
case("bench-goodput-twice", [*BENCH, "--goodput", "ttft:1", "ttft:2"], "--goodput")
for k, value in enumerate(("", "101", "-1", "x", ",".join(str(k / 10) for k in range(200)))):
    case(f"bench-metric-percentiles-{k}", [*BENCH, "--metric-percentiles", value], "--metric-percentiles")
for k, value in enumerate(("", "bogus", "ttft,ttft")):
    case(f"bench-percentile-metrics-{k}", [*BENCH, "--percentile-metrics", value], "--percentile-metrics")
for k, (flag, value) in enumerate((("--result-filename", ""), ("--result-filename", "a/"), ("--result-filename", ".."),
                                   ("--result-filename", "adir"), ("--result-dir", ""), ("--result-dir", "afile"),
                                   ("--result-dir", "afile/x"))):
    case(f"bench-save-{k}", [*BENCH, "--save-result", flag, value], flag)
for k, (argv, needle) in enumerate((
        (["--dataset-name", "bogus"], "--dataset-name"),
        (["--dataset-name", "trace"], "--dataset-path"),
        (["--dataset-path", "ok.csv"], "--dataset-path"),
        (["--dataset-name", "fixed"], "--input-len"),
        (["--dataset-name", "fixed", "--input-len", "3"], "--output-len"),
        (["--input-len", "3", "--output-len", "3"], "--input-len"),
        (["--dataset-name", "chat", "--random-input-len", "3"], "--random-input-len"),
        (["--trace-columns", "prompt=x"], "--trace-columns"),
        (["--dataset-name", "trace", "--dataset-path", "ok.csv", "--trace-columns", "bogus"], "--trace-columns"),
        (["--dataset-name", "trace", "--dataset-path", "ok.csv", "--burstiness", "2"], "--burstiness"),
        (["--dataset-name", "trace", "--dataset-path", "huge-tokens.csv"], "--dataset-path"),
        (["--dataset-name", "trace", "--dataset-path", "deep.jsonl"], "deep.jsonl"),
        (["--dataset-name", "trace", "--dataset-path", "nope.csv"], "nope.csv"),
        (["--random-input-len", "1000000000"], "--random-input-len"),
        (["--random-output-len", "1000000000"], "--random-output-len"),
        (["--dataset-name", "fixed", "--input-len", "1000000000", "--output-len", "1"], "--input-len"),
        (["--num-prompts", "10000000"], "--num-prompts"),
        (["--num-prompts", "1000000", "--random-input-len", "4096"], "--num-prompts"))):
    case(f"bench-dataset-{k}", [*BENCH[:3], "--disable-tqdm", *argv], needle)

# -- calibrate -----------------------------------------------------------------------------
PROFILE_CELLS = {"tokens": ("0", "-1", "1.5", "1e30", HUGE), "batch": ("0", "1.5", "1e30"),
                 "context": ("-1", "1.5", "1e30"), "ms": ("0", "-1", "1e308", "1e-320", "1e10"),
                 "tp": ("0", "1.5", "1000000000000"), "op": ("bogus", "")}
for column, values in PROFILE_CELLS.items():
    for k, value in enumerate((*values, *(NOT_NUMBERS[:5] if column != "op" else ()))):
        if column == "tp" and value == "":
            continue   # an empty tp is the default, 1
        case(f"calibrate-{column}-{k}", CAL, f"column '{column}'", {"p.csv": _plain(**{column: value})})
for k, value in enumerate(("0", "1e300", "x", "1.5")):
    case(f"calibrate-bytes-{k}", CAL, "column 'bytes'", {"p.csv": _plain(op="all_reduce", tp="2", bytes=value)})
case("calibrate-prefill-one-token", CAL, "column 'tokens'", {"p.csv": _plain(op="attn_prefill", tokens="1")})
case("calibrate-all-reduce-one-gpu", CAL, "column 'tp'", {"p.csv": _plain(op="all_reduce", bytes="8")})
MLP_CELLS = {"n_embd": ("0", "1e30", "x"), "n_head": ("0", "1000000000000"), "n_kv_head": ("0", "1.5"),
             "n_expanded_embd": ("1e30",), "vocab_size": ("0", str(2**40)), "num_tokens": ("0", "1e30"),
             "num_tensor_parallel_workers": ("0", "1000000"), "time_stats.mlp_up_proj.median": ("-1", "1e308", "nan")}
for column, values in MLP_CELLS.items():
    for k, value in enumerate(values):
        case(f"calibrate-vidur-{column}-{k}", ["calibrate", "m.csv", "--gpu", "H100-SXM"], "m.csv: row 2",
             {"m.csv": _mlp(**{column: value})})
NET_CELLS = {"size": ("0", "1e300", "x"), "num_workers": ("1", "1000000000000"), "devices_per_node": ("0", "1e30"),
             "time_stats.all_reduce.median": ("0", "1e308")}
for column, values in NET_CELLS.items():
    for k, value in enumerate(values):
        case(f"calibrate-network-{column}-{k}", ["calibrate", "n.csv", "--gpu", "H100-SXM"], "n.csv: row 2",
             {"n.csv": _net(**{column: value})})
for k, (argv, needle, files) in enumerate((
        (["calibrate", "--mini", "--repeats", "0"], "--repeats", {}),
        (["calibrate", "--mini", "--repeats", "101"], "--repeats", {}),
        (["calibrate", "--mini", "--repeats", HUGE], "--repeats", {}),
        (["calibrate", "--mini", "--repeats", "x"], "--repeats", {}),
        (["calibrate", "--mini", "--model", "mini:max_context=1000000000"], "--model", {}),
        (["calibrate", "--mini", "--model", "mini:n_layers=1000000"], "--model", {}),
        (["calibrate", "--mini", "--model", "mini:hidden=200000"], "--model", {}),
        (["calibrate", "--mini", "--model", "mini:ffn=100000000"], "--model", {}),
        (["calibrate", "--mini", "--model", "Llama-3-70B"], "--model", {}),
        (["calibrate", "--mini", "--model", "mini:bogus=1"], "--model", {}),
        (["calibrate", "--mini", "--model", "mini:n_layers=x"], "--model", {}),
        (["calibrate", "--mini", "--model", "nope"], "--model", {}),
        (["calibrate", "--mini", "p.csv"], "--mini", {"p.csv": _plain()}),
        ([*CAL, "--name", ""], "--name", {"p.csv": _plain()}),
        ([*CAL, "--name", "a\nb"], "--name", {"p.csv": _plain()}),
        ([*CAL, "--out", ""], "--out", {"p.csv": _plain()}),
        ([*CAL, "--out", "adir"], "--out", {"p.csv": _plain()}),
        ([*CAL, "--out", "afile/x.toml"], "--out", {"p.csv": _plain()}),
        ([*CAL, "--hold-out", "x"], "--hold-out", {"p.csv": _plain()}),
        ([*CAL, "--hold-out", "op=qkv"], "--hold-out", {"p.csv": _plain()}),
        ([*CAL, "--hold-out", "tokens=" + "9" * 5000], "--hold-out", {"p.csv": _plain()}),
        ([*CAL, "--hold-out", "op=up"], "--hold-out", {"p.csv": _plain()}),
        (["calibrate", "p.csv", "p.csv", "--gpu", "H100-SXM", "--model", "Llama-3-8B"], "PROFILE", {"p.csv": _plain()}),
        (["calibrate", "p.csv", "--gpu", "bogus", "--model", "Llama-3-8B"], "--gpu", {"p.csv": _plain()}),
        (["calibrate", "p.csv", "--gpu", "H100-SXM", "--model", "bogus"], "--model", {"p.csv": _plain()}),
        (["calibrate", "p.csv", "--model", "Llama-3-8B"], "--gpu", {"p.csv": _plain()}),
        (["calibrate", "--gpu", "H100-SXM"], "PROFILE", {}),
        (["calibrate", "adir", "--gpu", "H100-SXM"], "adir", {}),
        (["calibrate", "binary.csv", "--gpu", "H100-SXM"], "binary.csv", {}),
        (["calibrate", "p.csv", "--gpu", "H100-SXM"], "p.csv", {"p.csv": "op,tokens\n"}),
        (["calibrate", "p.csv", "--gpu", "H100-SXM"], "p.csv", {"p.csv": PLAIN}),
        (["calibrate", "p.csv", "--gpu", "H100-SXM"], "p.csv", {"p.csv": "a,b\n1,2\n"}),
        (["calibrate", "p.csv.gz", "--gpu", "H100-SXM"], "p.csv.gz", {"p.csv.gz": b"\x1f\x8b\x08\x00garbage"}))):
    case(f"calibrate-flags-{k}", argv, needle, files)

# -- validate (every case fails before a server starts or the machine is timed) -------------
for k, (argv, needle) in enumerate((
        (["--kv-cache-tokens", "0"], "--kv-cache-tokens"),
        (["--kv-cache-tokens", "1"], "--kv-cache-tokens"),
        (["--kv-cache-tokens", "15"], "--kv-cache-tokens"),
        (["--kv-cache-tokens", HUGE], "--kv-cache-tokens"),
        (["--kv-cache-tokens", "1000000000"], "--kv-cache-tokens"),
        (["--kv-cache-tokens", "x"], "--kv-cache-tokens"),
        (["--system", "paged:block_size=128", "--kv-cache-tokens", "64"], "--kv-cache-tokens"),
        (["--model", "mini:max_context=1000000000"], "--model"),
        (["--model", "mini:n_layers=1000000"], "--model"),
        (["--model", "bogus"], "--model"),
        (["--system", "bogus"], "--system"),
        (["--rates", ""], "--rates"), (["--rates", "0"], "--rates"), (["--rates", "1e-300"], "--rates"),
        (["--rates", "1,1"], "--rates"), (["--rates", "x"], "--rates"), (["--rates", "inf"], "--rates"),
        (["--rates", "0.00001"], "--rates"),
        (["--repeats", "0"], "--repeats"), (["--repeats", "101"], "--repeats"), (["--repeats", HUGE], "--repeats"),
        (["--num-prompts", "0"], "--num-prompts"), (["--num-prompts", "10000000"], "--num-prompts"),
        (["--random-input-len", "0"], "--random-input-len"),
        (["--random-input-len", "1000000000"], "--random-input-len"),
        (["--random-range-ratio", "1"], "--random-range-ratio"),
        (["--burstiness", "0"], "--burstiness"), (["--burstiness", "1e-300"], "--burstiness"),
        (["--seed", "-1"], "--seed"),
        (["--base-url", "http://[::1"], "--base-url"), (["--base-url", "notaurl"], "--base-url"),
        (["--base-url", "http://127.0.0.1:99999"], "--base-url"),
        (["--plot", ""], "--plot"), (["--plot", "afile"], "--plot"),
        (["--device", "nope.toml"], "nope.toml"),
        (["--dataset-name", "bogus"], "--dataset-name"),
        (["--dataset-name", "trace", "--dataset-path", "huge-tokens.csv"], "--dataset-path"))):
    case(f"validate-{k}", ["validate", *argv], needle)

# -- serve (every case fails before the server listens) --------------------------------------
for k, (argv, needle) in enumerate((
        (["--port", "65536"], "--port"), (["--port", "-1"], "--port"), (["--port", "x"], "--port"),
        (["--host", "256.1.1.1"], "--host"), (["--host", ""], "--host"), (["--host", "192.0.2.1"], "--host"),
        (["--host", "[::1"], "--host"), (["--host", "a" * 300], "--host"),
        (["--served-model-name", ""], "--served-model-name"), (["--served-model-name", " "], "--served-model-name"),
        (["--served-model-name", "a\nb"], "--served-model-name"),
        (["--served-model-name", "m" * 500], "--served-model-name"),
        (["--kv-cache-tokens", "0"], "--kv-cache-tokens"), (["--kv-cache-tokens", "1"], "--kv-cache-tokens"),
        (["--kv-cache-tokens", HUGE], "--kv-cache-tokens"),
        (["--kv-cache-tokens", "1000000000"], "--kv-cache-tokens"),
        (["--system", "paged:block_size=100000"], "--kv-cache-tokens"),
        (["--max-model-len", "0"], "--max-model-len"), (["--max-model-len", HUGE], "--max-model-len"),
        (["--max-model-len", "4096"], "--max-model-len"),
        (["--model", "mini:max_context=1000000000"], "--model"), (["--model", "mini:n_layers=1000000"], "--model"),
        (["--model", "mini:hidden=300000"], "--model"), (["--model", "mini:vocab=10"], "--model"),
        (["--model", "bogus"], "--model"),
        (["--max-waiting", "0"], "--max-waiting"), (["--max-waiting", HUGE], "--max-waiting"),
        (["--seed", "-1"], "--seed"), (["--seed", "x"], "--seed"),
        (["--drain-timeout", "nan"], "--drain-timeout"), (["--drain-timeout", "1e300"], "--drain-timeout"),
        (["--drain-timeout", "0"], "--drain-timeout"),
        (["--save-trace", ""], "--save-trace"), (["--save-trace", "adir"], "--save-trace"),
        (["--save-trace", "afile/x.csv"], "--save-trace"),
        (["--system", "bogus"], "--system"))):
    case(f"serve-{k}", [*SERVE, *argv], needle)


# Files a case may name; made only when its argv or files name them.
SHARED = {
    "afile": "not a directory\n",
    "adir": None,
    "ok.csv": "TIMESTAMP,ContextTokens,GeneratedTokens\n0,3,2\n1,4,2\n",
    "huge-tokens.csv": "TIMESTAMP,ContextTokens,GeneratedTokens\n0,1000000000,2\n1,1000000000,2\n",
    "deep.jsonl": DEEP + "\n",
    "deep.json": DEEP,
    "binary.csv": bytes(range(128, 256)) * 4,
    "spec-huge-memory.toml": '[gpu]\nbase = "H100-SXM"\nmemory = 1e20\n',
    "spec-slow-link.toml": '[gpu]\nbase = "H100-SXM"\np2p_bandwidth = 1\n',
}
FIFOS = ("fifo",)


def _make(root: Path, argv: list[str], files: dict) -> None:
    wanted = {**{name: SHARED[name] for name in SHARED if any(name in arg for arg in argv)}, **files}
    for name, content in wanted.items():
        path = root / name
        if content is None:
            path.mkdir(parents=True, exist_ok=True)
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    for name in FIFOS:
        if name in argv:
            os.mkfifo(root / name)    # nobody reads it: writing must fail at once, not hang


def _listing(root: Path) -> dict:
    return {str(p.relative_to(root)): (p.is_dir(), p.is_fifo(), None if p.is_dir() or p.is_fifo() else p.read_bytes())
            for p in sorted(root.rglob("*"))}



@pytest.mark.parametrize("argv, needle, files", [pytest.param(a, n, f, id=i) for i, a, n, f in CASES])
def test_bad_input_exits_2_with_one_line(tmp_path, monkeypatch, capsys, argv, needle, files):
    monkeypatch.chdir(tmp_path)
    _make(tmp_path, argv, files)
    before = _listing(tmp_path)
    code = main_within(argv)
    out, err = capsys.readouterr()
    lines = err.strip("\n").splitlines()
    assert code == 2, f"exit {code}; stderr: {err[-2000:]!r}"
    assert len(lines) == 1, f"stderr is not one line: {err[-2000:]!r}"
    assert "Traceback" not in err
    assert needle in lines[0], f"{needle!r} not named in {lines[0]!r}"
    assert len(lines[0]) < 1000
    assert out == ""
    assert _listing(tmp_path) == before, "the command left a file behind or changed one"


def test_there_are_three_hundred_cases_over_every_newer_command():
    commands = {argv[0] for _, argv, _, _ in CASES}
    assert commands == {"fleet", "plan", "bench", "calibrate", "validate", "serve"}
    assert len(CASES) >= 300
    assert len({name for name, *_ in CASES}) == len(CASES)


def test_a_garbage_server_is_covered_elsewhere():
    # bench against a server answering garbage: tests/test_bench_hostile_server.py
    assert Path(__file__).with_name("test_bench_hostile_server.py").exists()


def test_json_cases_are_hostile_json():
    # the nested --extra-body really is deeper than the parser's recursion limit
    with pytest.raises(RecursionError):
        json.loads(DEEP)


@pytest.mark.parametrize("command", [["simulate", "--system", "paged"], ["goodput", "--system", "paged"],
                                     ["compare", "--systems", "paged", "--rates", "1", "--no-goodput"]])
def test_a_kv_cache_too_large_to_track_is_refused_by_every_simulating_command(tmp_path, monkeypatch, capsys, command):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "g.toml").write_text(SHARED["spec-huge-memory.toml"])
    code = main([*command, *ONE[:-2], "--gpu", "g.toml"])
    out, err = capsys.readouterr()
    lines = err.strip("\n").splitlines()
    assert code == 2 and out == "" and len(lines) == 1 and "'--gpu'" in lines[0] and "blocks of 16" in lines[0]
