"""`batchlab bench`: measure any OpenAI-compatible server with `vllm bench serve`'s flags and output."""

from __future__ import annotations

import argparse
import math
import os

from batchlab.commands import flagtypes

# Token ids are int32 in every tokenizer (vocabularies are under a million): a larger --vocab-size
# is a typo.
MAX_VOCAB = 2**31 - 1
# Characters of --base-url, --endpoint and --model: each goes into every request.
MAX_TEXT = 2048
# The random dataset's lengths unless given (vllm bench serve's).
RANDOM_DEFAULTS = {"input": 1024, "output": 128, "ratio": 0.0}


def add_dataset_flags(g, *, num_prompts: int, per: str, random: dict) -> None:
    """The dataset flags, which `batchlab validate` takes too: `num_prompts` requests `per` ...
    by default, `random` the random dataset's defaults (input, output, ratio). The random flags
    default to None, so that a given one is seen; `dataset_spec` puts the defaults in."""
    g.add_argument("--dataset-name", default="random", metavar="NAME",
                   help="random, chat, long, orca, fixed, azure-conv, or trace (with --dataset-path) "
                        "(default: %(default)s)")
    g.add_argument("--dataset-path", metavar="FILE", help="CSV or JSONL trace for --dataset-name trace")
    g.add_argument("--trace-columns", metavar="MAP",
                   help="trace columns, e.g. timestamp=TIMESTAMP,prompt=ContextTokens,output=GeneratedTokens "
                        "(default: the Azure trace's)")
    g.add_argument("--num-prompts", type=flagtypes.requests, default=num_prompts, metavar="N",
                   help=f"requests {per} (traces: the first N records) (default: %(default)s)")
    g.add_argument("--random-input-len", type=flagtypes.positive_tokens, metavar="L",
                   help=f"random: mean prompt tokens (default: {random['input']})")
    g.add_argument("--random-output-len", type=flagtypes.positive_tokens, metavar="L",
                   help=f"random: mean output tokens (default: {random['output']})")
    g.add_argument("--random-range-ratio", type=flagtypes.real(ge=0, lt=1), metavar="R",
                   help=f"random: lengths uniform on [L(1-R), L(1+R)], R in [0, 1) (default: {random['ratio']})")
    g.add_argument("--input-len", type=flagtypes.positive_tokens, metavar="L", help="prompt tokens of the fixed dataset")
    g.add_argument("--output-len", type=flagtypes.positive_tokens, metavar="L", help="output tokens of the fixed dataset")
    g.add_argument("--seed", type=flagtypes.seed, default=0, help="seed of lengths, arrivals and prompts (default: %(default)s)")


def random_given(args: argparse.Namespace) -> list[tuple[str, str, float]]:
    """(flag, key of the defaults, value) of each random-dataset flag given."""
    return [(f, k, v) for f, k, v in (("--random-input-len", "input", args.random_input_len),
                                      ("--random-output-len", "output", args.random_output_len),
                                      ("--random-range-ratio", "ratio", args.random_range_ratio))
            if v is not None]


def dataset_spec(args: argparse.Namespace, random: dict, request_rate: float | None = None):
    """The DatasetSpec of `add_dataset_flags`' flags (and --burstiness), a random flag not given
    taking its default from `random`; InputError names the flag."""
    from batchlab.bench.dataset import DatasetSpec
    from batchlab.errors import InputError

    columns = None
    if args.trace_columns:
        from batchlab.commands.options import _columns
        try:
            columns = _columns(args.trace_columns)
        except InputError as exc:
            raise InputError(str(exc).replace("'--columns'", "'--trace-columns'")) from None
    lengths = dict(random)
    lengths.update((k, v) for _, k, v in random_given(args))
    return DatasetSpec(name=args.dataset_name, num_prompts=args.num_prompts, request_rate=request_rate,
                       burstiness=args.burstiness, seed=args.seed, random_input_len=lengths["input"],
                       random_output_len=lengths["output"], random_range_ratio=lengths["ratio"],
                       input_len=args.input_len, output_len=args.output_len, path=args.dataset_path,
                       columns=columns)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "bench", help="load-test an OpenAI-compatible server (vllm bench serve's flags and output)",
        description="Send streamed requests to a running OpenAI-compatible server (batchlab serve, "
                    "vLLM, SGLang, TGI) on an arrival schedule, time every output token on the "
                    "client and print TTFT, TPOT, ITL, E2E and throughput as `vllm bench serve` does "
                    "(docs/serving.md).")
    g = p.add_argument_group("server")
    g.add_argument("--base-url", default="http://127.0.0.1:8000", metavar="URL",
                   help="the server, http:// or https:// (default: %(default)s)")
    g.add_argument("--endpoint", default="/v1/completions",
                   help="/v1/completions or /v1/chat/completions (default: %(default)s)")
    g.add_argument("--model", help="model name to send (default: the first model of GET /v1/models)")
    g.add_argument("--request-timeout", type=flagtypes.wait_s, default=600.0, metavar="S",
                   help="seconds one request may take, stream included (default: %(default)s)")
    g.add_argument("--connect-timeout", type=flagtypes.wait_s, default=10.0, metavar="S",
                   help="seconds to open a connection (default: %(default)s)")

    add_dataset_flags(p.add_argument_group("dataset"), num_prompts=1000, per="to send",
                      random=RANDOM_DEFAULTS)

    g = p.add_argument_group("traffic")
    g.add_argument("--request-rate", type=flagtypes.rate, metavar="R",
                   help="mean requests per second, or inf: all at once (default: inf; traces: their own "
                        "timestamps, rescaled to R when given)")
    g.add_argument("--burstiness", type=flagtypes.burstiness, default=1.0,
                   help="gamma shape of the gaps: 1 is Poisson, below 1 burstier (default: %(default)s)")
    g.add_argument("--max-concurrency", type=flagtypes.requests, metavar="N", help="at most N requests in flight")
    g.add_argument("--warm-connections", action=argparse.BooleanOptionalAction, default=True,
                   help="before the clock starts, open one connection per request due in the first 4 s "
                        "(at most --max-concurrency), so no request pays a connect after its send time "
                        "(default: on)")

    g = p.add_argument_group("requests")
    g.add_argument("--prompt-format", default="auto", metavar="FMT",
                   help="tokens (a list of token ids of the exact length), text, or auto: tokens on "
                        "/v1/completions, text on chat (default: %(default)s)")
    g.add_argument("--vocab-size", type=flagtypes.integer(ge=1, le=MAX_VOCAB), default=256, metavar="V",
                   help="prompt token ids are drawn from [0, V) (default: %(default)s)")
    g.add_argument("--ignore-eos", action=argparse.BooleanOptionalAction, default=True,
                   help="ask for exactly the dataset's output length (ignore_eos, min_tokens) (default: on)")
    g.add_argument("--temperature", type=flagtypes.real(ge=0), help="sampling temperature to send (default: the server's)")
    g.add_argument("--extra-body", metavar="JSON", help="a JSON object merged into every request body")

    g = p.add_argument_group("results")
    g.add_argument("--goodput", nargs="+", metavar="KEY:MS",
                   help="SLO bounds for request goodput, e.g. ttft:1000 tpot:50 e2el:5000 (ms)")
    g.add_argument("--percentile-metrics", default="ttft,tpot,itl,e2el", metavar="LIST",
                   help="metrics with percentiles, of ttft, tpot, itl, e2el (default: %(default)s)")
    g.add_argument("--metric-percentiles", default="99", metavar="LIST",
                   help="percentiles to report, e.g. 50,90,99 (default: %(default)s)")
    g.add_argument("--save-result", action="store_true", help="write the result JSON to a file")
    g.add_argument("--result-dir", metavar="DIR", help="directory of the result file (default: .)")
    g.add_argument("--result-filename", metavar="FILE",
                   help="name of the result file (default: LABEL-RATEqps[-concurrencyN]-MODEL-DATE.json)")
    g.add_argument("--label", help="label of the result (default: openai or openai-chat)")
    g.add_argument("--disable-tqdm", action="store_true", help="no progress bar")
    g.add_argument("--json", action="store_true", help="print the result JSON instead of the table")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import asyncio
    import gc
    import json
    import sys
    from datetime import datetime
    from pathlib import Path

    from batchlab.bench.client import CHAT
    from batchlab.bench.dataset import load_requests
    from batchlab.bench.preflight import first_model
    from batchlab.bench.report import result_table
    from batchlab.bench.result import bench_result
    from batchlab.bench.runner import RunConfig, connections_to_open, encode_bodies, run_requests
    from batchlab.errors import InputError
    from batchlab.io_checks import write_atomic

    plan = _check(args)
    workload = load_requests(plan["spec"])
    check_drawn_memory(workload, plan["spec"])
    model = asyncio.run(first_model(plan["base_url"], args.model, args.connect_timeout))
    bodies = encode_bodies(workload, plan["kind"], model, args.prompt_format, args.seed, args.vocab_size,
                           args.ignore_eos, plan["extra"])
    warm = connections_to_open(workload.arrival, args.max_concurrency) if args.warm_connections else 0
    config = RunConfig(url=plan["base_url"] + args.endpoint, kind=plan["kind"],
                       max_concurrency=args.max_concurrency, request_timeout_s=args.request_timeout,
                       connect_timeout_s=args.connect_timeout, warm=warm)
    rate = plan["spec"].request_rate
    process = "Poisson process" if args.burstiness == 1.0 else "Gamma distribution"
    traffic = ("the trace's own timestamps" if rate is None and plan["spec"].is_trace
               else "inf" if rate is None or rate == math.inf else f"{rate:g}")
    print(f"Traffic request rate: {traffic}", file=sys.stderr)
    print(f"Burstiness factor: {args.burstiness} ({process})", file=sys.stderr)
    print(f"Maximum request concurrency: {args.max_concurrency}", file=sys.stderr)
    print(f"Connections opened before the clock starts: {warm}", file=sys.stderr)

    # As vLLM does: keep the garbage collector off the long-lived setup while timing.
    gc.collect()
    gc.freeze()
    try:
        outcome = _run_with_progress(
            lambda done: run_requests(config, workload.arrival, bodies, workload.output, done),
            len(bodies), args.disable_tqdm)
    finally:
        gc.unfreeze()

    backend = "openai-chat" if plan["kind"] == CHAT else "openai"
    date = datetime.now().strftime("%Y%m%d-%H%M%S")
    header = {
        "date": date, "endpoint_type": backend, "backend": backend, "label": args.label,
        "model_id": model, "tokenizer_id": None, "num_prompts": len(workload),
        "request_rate": _offered_rate(rate, workload),
        "burstiness": args.burstiness, "max_concurrency": args.max_concurrency,
        "base_url": plan["base_url"], "endpoint": args.endpoint, "dataset_name": args.dataset_name,
        "seed": args.seed, "prompt_format": plan["prompt_format"], "ignore_eos": args.ignore_eos,
        "goodput": plan["slo"].to_ms() if plan["slo"] else None,
        "percentile_metrics": list(plan["selected"]), "metric_percentiles": list(plan["percentiles"]),
        "notes": list(workload.notes),
    }
    result = bench_result(outcome, workload, header, plan["slo"], plan["percentiles"], plan["selected"])
    text = json.dumps(result, allow_nan=False)
    if args.save_result:
        label = args.label or backend
        concurrency = f"-concurrency{args.max_concurrency}" if args.max_concurrency else ""
        name = args.result_filename or f"{label}-{result['request_rate']}qps{concurrency}-{model.split('/')[-1]}-{date}.json"
        path = Path(args.result_dir or ".") / name
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"field '--result-dir': cannot create {str(path.parent)!r}: {exc.strerror or exc}") from None
        write_atomic(path, text, "--result-filename" if args.result_filename else "--result-dir")
        from batchlab.commands.written import say_wrote
        say_wrote([path])
    if args.json:
        print(text)
    else:
        print(result_table(result, plan["selected"], plan["percentiles"]))
    return 0


def _offered_rate(rate: float | None, workload) -> float | str:
    """vLLM's `request_rate` key: a number, or "inf" for all at once; a trace replayed at its own
    timestamps offers its measured mean rate."""
    if rate is None:
        return workload.rate if workload.rate is not None else "inf"
    return "inf" if rate == math.inf else float(rate)


def _run_with_progress(make, total: int, disabled: bool):
    from batchlab.runtime import event_loop

    if disabled:
        return event_loop.run(make(None))
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from batchlab.display import console

    with Progress(TextColumn("requests"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console(stderr=True), transient=True) as bar:
        task = bar.add_task("requests", total=total)
        return event_loop.run(make(lambda _result: bar.advance(task)))


def _check(args: argparse.Namespace) -> dict:
    """Every flag checked before anything is sent; InputError names the flag."""
    from batchlab.bench.client import CHAT, endpoint_kind
    from batchlab.bench.prompts import AUTO, PROMPT_FORMATS, TEXT, TOKENS
    from batchlab.errors import InputError
    from batchlab.io_checks import brief, load_json
    from batchlab.metrics import parse_goodput, parse_metric_percentiles, parse_percentile_metrics

    base_url = _base_url(args.base_url)
    for flag, value in (("--endpoint", args.endpoint), ("--model", args.model), ("--label", args.label)):
        if value is not None and (len(value) > MAX_TEXT or not value.strip() or not value.isprintable()):
            raise InputError(f"field '{flag}' must be printable text of 1 to {MAX_TEXT} characters, got {brief(value)}")
    key = os.environ.get("OPENAI_API_KEY", "")
    if not (key.isascii() and key.isprintable()):   # it goes into every request's headers
        raise InputError("field 'OPENAI_API_KEY' (environment) must be printable ASCII text")
    if not args.endpoint.startswith("/"):
        raise InputError(f"field '--endpoint' must be a path starting with '/', got {args.endpoint!r}")
    try:
        kind = endpoint_kind(args.endpoint)
    except ValueError:
        raise InputError(f"field '--endpoint' must be a completions or chat completions path "
                         f"(/v1/completions, /v1/chat/completions), got {args.endpoint!r}") from None
    if args.prompt_format not in PROMPT_FORMATS:
        raise InputError(f"field '--prompt-format' must be one of {', '.join(PROMPT_FORMATS)}, got {args.prompt_format!r}")
    if kind == CHAT and args.prompt_format == TOKENS:
        raise InputError("field '--prompt-format': a chat endpoint takes text messages, not token ids")
    prompt_format = args.prompt_format if args.prompt_format != AUTO else TEXT if kind == CHAT else TOKENS
    extra = None
    if args.extra_body is not None:
        extra = load_json(args.extra_body, "field '--extra-body'")
        if not isinstance(extra, dict):
            raise InputError("field '--extra-body' must be a JSON object")
        for key in ("model", "prompt", "messages", "stream", "stream_options"):
            if key in extra:
                raise InputError(f"field '--extra-body': key {key!r} is the benchmark's own; it cannot be replaced")
    if args.temperature is not None:
        extra = {"temperature": args.temperature, **(extra or {})}
    spec = dataset_spec(args, RANDOM_DEFAULTS, args.request_rate)
    check_prompt_memory(spec, len(args.extra_body or ""))
    if args.dataset_name != "random" and any(v != RANDOM_DEFAULTS[k] for _, k, v in random_given(args)):
        raise InputError(f"fields '--random-input-len', '--random-output-len' and '--random-range-ratio' "
                         f"apply to dataset 'random' only, not {args.dataset_name!r}")
    slo = parse_goodput(args.goodput) if args.goodput is not None else None
    return {"base_url": base_url, "kind": kind, "prompt_format": prompt_format, "extra": extra, "spec": spec,
            "slo": slo, "selected": parse_percentile_metrics(args.percentile_metrics),
            "percentiles": parse_metric_percentiles(args.metric_percentiles)}



def _base_url(text: str) -> str:
    """--base-url without its trailing slash: http(s), a host, a port in range, no query."""
    from urllib.parse import urlsplit

    from batchlab.errors import InputError
    from batchlab.io_checks import brief

    want = f"field '--base-url' must be an http:// or https:// URL of the server, got {brief(text)}"
    if len(text) > MAX_TEXT or not text.isprintable() or any(c.isspace() for c in text):
        raise InputError(want)
    try:
        url = urlsplit(text)
        port = url.port      # parsed on demand: a port past 65535 or not a number raises here
    except ValueError as exc:   # an unclosed IPv6 bracket, a bad port
        raise InputError(f"{want}: {exc}") from None
    if url.scheme not in ("http", "https") or not url.hostname or url.query or url.fragment:
        raise InputError(want)
    if port == 0:
        raise InputError(f"{want}: port 0 is not a server's port")
    return text.rstrip("/")


def check_prompt_memory(spec, extra_chars: int = 0) -> None:
    """Refuse a dataset whose prompts, encoded before the clock starts, would not fit in memory:
    estimated from the lengths asked for, before any is drawn (a trace's are checked as read)."""
    from batchlab import limits

    if spec.name == "random":
        longest = math.ceil(spec.random_input_len * (1 + spec.random_range_ratio))
        out = math.ceil(spec.random_output_len * (1 + spec.random_range_ratio))
        flags = ("--random-input-len", "--random-output-len")
    elif spec.name == "fixed":
        longest, out, flags = spec.input_len, spec.output_len, ("--input-len", "--output-len")
    else:
        longest, out, flags = 1, 1, ("--num-prompts", "--num-prompts")
    # A request of a million tokens is no real one: then the length is the mistake, else the count.
    flag = flags[0] if longest >= 10**6 else flags[1] if out >= 10**6 else "--num-prompts"
    limits.check_memory(spec.num_prompts * (longest * limits.BENCH_BYTES_PER_PROMPT_TOKEN + extra_chars
                                            + out * limits.BENCH_BYTES_PER_OUTPUT_TOKEN),
                        flag, f"{spec.num_prompts:,} requests of up to {longest:,} prompt and {out:,} output tokens")


def check_drawn_memory(workload, spec) -> None:
    """The requests as drawn (a workload's own lengths, a trace's) fit, encoded, in memory."""
    from batchlab import limits

    limits.check_memory(int(workload.prompt.sum()) * limits.BENCH_BYTES_PER_PROMPT_TOKEN
                        + int(workload.output.sum()) * limits.BENCH_BYTES_PER_OUTPUT_TOKEN,
                        "--dataset-path" if spec.name == "trace" else "--num-prompts",
                        f"{len(workload):,} requests of {int(workload.prompt.sum()):,} prompt tokens in all")
