"""`batchlab bench` against the stub OpenAI server: counts, lengths, metrics, failures, JSON, flags."""

import json
import math

import numpy as np
import pytest

from batchlab.bench.stub import StubConfig, StubServer
from batchlab.cli import main
from batchlab.serve.launch import free_port

VLLM_KEYS = ["date", "backend", "model_id", "num_prompts", "request_rate", "burstiness", "max_concurrency",
             "duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
             "request_throughput", "request_goodput", "output_throughput", "total_token_throughput",
             "input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "generated_texts",
             "errors", "max_output_tokens_per_s", "max_concurrent_requests"]


def bench(capsys, stub, *flags):
    """Run `batchlab bench --json` in this process; (exit code, result dict or stderr)."""
    code = main(["bench", "--base-url", stub.base_url, "--disable-tqdm", "--json", *flags])
    out = capsys.readouterr()
    return code, (json.loads(out.out) if code == 0 else out.err)


def test_every_request_served_with_exact_lengths_and_vllm_keys(capsys):
    with StubServer() as stub:
        code, r = bench(capsys, stub, "--num-prompts", "40", "--random-input-len", "50", "--random-output-len", "12",
                        "--random-range-ratio", "0.5", "--seed", "3")
    assert code == 0
    assert stub.stats.requests == 40 and (r["completed"], r["failed"]) == (40, 0)
    assert r["output_lens"] == r["requested_output_lens"] and r["total_output_tokens"] == sum(r["output_lens"])
    assert sorted(stub.stats.prompt_lens) == sorted(r["input_lens"]) and r["total_input_tokens"] == sum(r["input_lens"])
    assert min(r["input_lens"]) >= 25 and max(r["input_lens"]) <= 75 and len(set(r["input_lens"])) > 5
    for key in VLLM_KEYS + ["mean_ttft_ms", "median_tpot_ms", "std_itl_ms", "p99_e2el_ms"]:
        assert key in r, key
    assert r["request_goodput"] is None and r["errors"] == [""] * 40 and r["http_statuses"] == [200] * 40
    assert r["generated_texts"][0] and len(r["generated_texts"][0]) == r["output_lens"][0]
    # Each request's itls are its token gaps: one fewer than its tokens, summing to E2E − TTFT.
    for ttft, itls, e2e, out in zip(r["ttfts"], r["itls"], r["latencies"], r["output_lens"]):
        assert len(itls) == out - 1 and ttft + sum(itls) == pytest.approx(e2e)


def test_metrics_reflect_the_servers_delays(capsys):
    # TTFT ≥ 40 ms and 8 ms between tokens, measured from the client: loose sanity bounds only.
    with StubServer(StubConfig(ttft_ms=40, itl_ms=8)) as stub:
        code, r = bench(capsys, stub, "--num-prompts", "6", "--random-input-len", "8", "--random-output-len", "6",
                        "--request-rate", "100", "--metric-percentiles", "50,90")
    assert code == 0 and r["completed"] == 6
    assert 40 <= r["mean_ttft_ms"] < 2000 and 8 <= r["median_tpot_ms"] < 1000 and 8 <= r["median_itl_ms"] < 1000
    assert r["mean_e2el_ms"] >= 40 + 5 * 8
    assert "p90_ttft_ms" in r and "p99_ttft_ms" not in r
    assert r["duration"] >= max(r["start_times"][i] + r["latencies"][i] for i in range(6))


def test_failures_are_counted_with_their_errors_never_dropped(capsys):
    with StubServer(StubConfig(max_prompt=60, error_every=5)) as stub:
        code, r = bench(capsys, stub, "--num-prompts", "30", "--random-input-len", "60", "--random-output-len", "4",
                        "--random-range-ratio", "0.3", "--max-concurrency", "1")
    assert code == 0 and len(r["errors"]) == 30 and r["completed"] + r["failed"] == 30
    too_long = [i for i, n in enumerate(r["input_lens"]) if n > 60]
    assert too_long and all(r["http_statuses"][i] == 400 and "more than the 60 allowed" in r["errors"][i]
                            for i in too_long)
    # One at a time, in order, so the stub's 5th, 10th, ... request fails with 500 unless too long.
    expected = [400 if i in too_long else 500 if (i + 1) % 5 == 0 else 200 for i in range(30)]
    assert r["http_statuses"] == expected and r["failed"] == expected.count(400) + expected.count(500)
    assert all(r["output_lens"][i] == 0 and r["ttfts"][i] is None for i in too_long)
    assert sum(e["count"] for e in r["error_summary"]) == r["failed"]


def test_table_lists_failures_in_vllm_layout(capsys):
    with StubServer(StubConfig(error_every=2)) as stub:
        code = main(["bench", "--base-url", stub.base_url, "--disable-tqdm", "--num-prompts", "4",
                     "--random-input-len", "4", "--random-output-len", "3", "--goodput", "ttft:1000", "tpot:100"])
    out = capsys.readouterr().out
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "{:=^50}".format(" Serving Benchmark Result ")
    assert lines[1] == f"{'Successful requests:':<40} {2:<10}" and lines[2] == f"{'Failed requests:':<40} {2:<10}"
    assert any(line.startswith("Request goodput (req/s):") for line in lines)
    assert "{:-^50}".format("Time to First Token") in lines and "=" * 50 in lines
    assert "2 x HTTP 500: stub failure on purpose" in out


def test_max_concurrency_bounds_the_streams_in_flight(capsys):
    # Streams of about 90 ms: long enough that the first three are open together even on a busy machine.
    with StubServer(StubConfig(itl_ms=10)) as stub:
        code, r = bench(capsys, stub, "--num-prompts", "12", "--random-input-len", "4", "--random-output-len", "10",
                        "--max-concurrency", "3")
    assert code == 0 and r["completed"] == 12 and r["max_concurrency"] == 3
    assert stub.stats.max_open_streams == 3 and r["max_concurrent_requests"] <= 3
    assert max(r["queue_times"]) > 0  # later requests waited for a slot


def test_ignore_eos_fixes_output_lengths(capsys):
    with StubServer(StubConfig(eos_after=3)) as stub:
        _, fixed = bench(capsys, stub, "--num-prompts", "5", "--random-input-len", "4", "--random-output-len", "9")
        _, free = bench(capsys, stub, "--num-prompts", "5", "--random-input-len", "4", "--random-output-len", "9",
                        "--no-ignore-eos")
    assert fixed["output_lens"] == [9] * 5 and free["output_lens"] == [3] * 5
    assert stub.stats.bodies[0]["ignore_eos"] is True and "ignore_eos" not in stub.stats.bodies[-1]


def test_multi_token_chunks_counted_from_usage(capsys):
    with StubServer(StubConfig(tokens_per_chunk=4, itl_ms=1)) as stub:
        code, r = bench(capsys, stub, "--num-prompts", "3", "--random-input-len", "4", "--random-output-len", "10")
    assert code == 0 and r["output_lens"] == [10, 10, 10]
    assert [len(i) for i in r["itls"]] == [2, 2, 2]  # chunks of 4, 4, 2: two gaps, as vLLM counts ITL


def test_chat_endpoint_text_prompts_and_role_chunk(capsys):
    with StubServer() as stub:
        code, r = bench(capsys, stub, "--endpoint", "/v1/chat/completions", "--dataset-name", "fixed",
                        "--input-len", "30", "--output-len", "7", "--num-prompts", "4")
    assert code == 0 and r["backend"] == "openai-chat" and r["prompt_format"] == "text"
    assert r["output_lens"] == [7] * 4 and stub.stats.prompt_lens == [30] * 4
    assert isinstance(stub.stats.bodies[0]["messages"][0]["content"], str)


def test_trace_replay_at_its_own_timestamps_and_rescaled(capsys, tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("ts,p,o\n100.0,5,3\n100.2,6,2\n100.5,7,4\n")
    cols = ["--dataset-name", "trace", "--dataset-path", str(trace), "--trace-columns", "timestamp=ts,prompt=p,output=o"]
    with StubServer() as stub:
        code, own = bench(capsys, stub, *cols)
        _, fast = bench(capsys, stub, *cols, "--request-rate", "8")
    assert code == 0 and own["output_lens"] == [3, 2, 4] and own["input_lens"] == [5, 6, 7]
    assert own["scheduled_times"] == pytest.approx([0, 0.2, 0.5]) and own["request_rate"] == pytest.approx(4)
    assert fast["scheduled_times"] == pytest.approx([0, 0.1, 0.25]) and fast["request_rate"] == 8
    for r in (own, fast):
        lag = np.array(r["start_times"]) - np.array(r["scheduled_times"])
        assert (lag >= 0).all() and (lag < 0.5).all()  # sent on schedule (loosely: a busy machine), never early


def test_save_result_file_name_and_content(capsys, tmp_path):
    with StubServer() as stub:
        code = main(["bench", "--base-url", stub.base_url + "/", "--disable-tqdm", "--num-prompts", "3",
                     "--random-input-len", "4", "--random-output-len", "2", "--save-result",
                     "--result-dir", str(tmp_path / "out"), "--max-concurrency", "2"])
        capsys.readouterr()
        main(["bench", "--base-url", stub.base_url, "--disable-tqdm", "--num-prompts", "2", "--random-input-len", "4",
              "--random-output-len", "2", "--save-result", "--result-dir", str(tmp_path), "--result-filename", "x.json"])
    files = list((tmp_path / "out").iterdir())
    assert code == 0 and len(files) == 1
    assert files[0].name.startswith("openai-infqps-concurrency2-stub-") and files[0].suffix == ".json"
    saved = json.loads(files[0].read_text())
    assert saved["completed"] == 3 and saved["max_concurrency"] == 2
    assert json.loads((tmp_path / "x.json").read_text())["num_prompts"] == 2


def test_same_seed_same_requests(capsys):
    with StubServer() as stub:
        flags = ["--num-prompts", "8", "--random-input-len", "16", "--random-output-len", "3",
                 "--random-range-ratio", "0.5", "--request-rate", "200"]
        _, a = bench(capsys, stub, *flags)
        _, b = bench(capsys, stub, *flags)
        _, c = bench(capsys, stub, *flags, "--seed", "1")
    assert a["scheduled_times"] == b["scheduled_times"] and a["input_lens"] == b["input_lens"]
    # Compared as sets: two requests sent a few ms apart may reach the server in either order.
    runs = [sorted(json.dumps(b, sort_keys=True) for b in stub.stats.bodies[k:k + 8]) for k in (0, 8, 16)]
    assert runs[0] == runs[1] and runs[2] != runs[0]
    assert a["scheduled_times"] != c["scheduled_times"]


def test_unknown_model_fails_every_request_with_the_servers_message(capsys):
    with StubServer() as stub:
        code, r = bench(capsys, stub, "--model", "llama", "--num-prompts", "3", "--random-input-len", "4",
                        "--random-output-len", "2")
    assert code == 0 and r["failed"] == 3 and r["completed"] == 0
    assert r["errors"] == ["HTTP 404: The model `llama` does not exist."] * 3
    assert r["mean_ttft_ms"] is None and r["request_throughput"] == 0.0


def test_a_request_past_its_timeout_fails_with_a_timeout_error(capsys):
    with StubServer(StubConfig(itl_ms=100)) as stub:
        code, r = bench(capsys, stub, "--num-prompts", "2", "--random-input-len", "4", "--random-output-len", "50",
                        "--request-timeout", "0.3")
    assert code == 0 and r["failed"] == 2 and all(e.startswith("timeout") for e in r["errors"])


def test_unreachable_server_fails_fast_naming_base_url(capsys):
    code = main(["bench", "--base-url", f"http://127.0.0.1:{free_port()}", "--disable-tqdm", "--num-prompts", "5"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "'--base-url'" in err and "cannot reach" in err


@pytest.mark.parametrize("flags, field", [
    (["--base-url", "ftp://127.0.0.1:1"], "--base-url"),
    (["--base-url", "localhost:8000"], "--base-url"),
    (["--request-rate", "-2"], "--request-rate"),
    (["--request-rate", "nan"], "--request-rate"),
    (["--goodput", "ttft"], "--goodput"),
    (["--goodput", "latency:5"], "--goodput"),
    (["--dataset-name", "sharegpt"], "--dataset-name"),
    (["--max-concurrency", "0"], "--max-concurrency"),
    (["--random-range-ratio", "1.5"], "--random-range-ratio"),
    (["--endpoint", "/v1/embeddings"], "--endpoint"),
    (["--endpoint", "/v1/chat/completions", "--prompt-format", "tokens"], "--prompt-format"),
    (["--prompt-format", "ids"], "--prompt-format"),
    (["--extra-body", "[1]"], "--extra-body"),
    (["--extra-body", "{nope"], "--extra-body"),
    (["--percentile-metrics", "ttft,foo"], "--percentile-metrics"),
    (["--metric-percentiles", "101"], "--metric-percentiles"),
    (["--request-timeout", "0"], "--request-timeout"),
    (["--dataset-name", "chat", "--random-input-len", "5"], "--random-input-len"),
    (["--dataset-name", "trace", "--dataset-path", "/nonexistent.csv"], "/nonexistent.csv"),
    (["--trace-columns", "when=ts"], "--trace-columns"),
    (["--save-result", "--result-dir", __file__ + "/results"], "--result-dir"),  # under a file
])
def test_bad_flags_exit_2_naming_the_flag_before_sending(capsys, flags, field):
    # Port 9 (discard) is never contacted: every check runs before the first connection.
    base = [] if flags[0] == "--base-url" else ["--base-url", "http://127.0.0.1:9"]
    code = main(["bench", *base, "--disable-tqdm", *flags])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and field in err, err
    assert "cannot reach" not in err


def test_as_a_user_runs_it_with_the_progress_bar(cli):
    with StubServer(StubConfig(itl_ms=1)) as stub:
        out = cli("bench", "--base-url", stub.base_url, "--num-prompts", "10", "--random-input-len", "8",
                  "--random-output-len", "5", "--request-rate", "100", "--burstiness", "0.5")
    assert out.returncode == 0, out.stderr
    assert "Successful requests:                     10" in out.stdout
    assert "Traffic request rate: 100" in out.stderr and "Gamma distribution" in out.stderr
    assert stub.stats.requests == 10
