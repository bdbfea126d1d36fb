"""`labwright bench` against the REAL llama.cpp llama-server on 127.0.0.1, serving a tiny GGUF generated here.

The binary is the pinned llama.cpp built once per machine (labwright.llamacpp.build, cached); the model is the
random-weight GGUF biased to printable ASCII (labwright.llamacpp.tiny_model), so a completion is exactly max_tokens
long. Every number asserted on is a measurement of that server, checked against the server's own ``timings``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from labwright.llamacpp.build import build_llama_server
from labwright.llamacpp.tiny_model import TinyModel, write_tiny_gguf
from support.local_server import free_port, wait_healthy

pytestmark = [pytest.mark.slow]

CONTEXTS = (128, 512, 1024)
DECODE = 32
TRIALS = 3
SERVER_CTX = 4096


@contextmanager
def llama_server(binary: Path, model: Path, log: Path, *extra: str) -> Iterator[tuple[str, subprocess.Popen]]:
    port = free_port()
    cmd = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port), "-c", str(SERVER_CTX),
           "-np", "1", "--alias", "tiny", *extra]
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    try:
        if not wait_healthy(port, proc, 60):
            raise AssertionError(f"llama-server did not become healthy:\n{log.read_text()[-2000:]}")
        yield f"http://127.0.0.1:{port}/v1", proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def binary() -> Path:
    return build_llama_server()


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("bench") / "tiny.gguf", TinyModel(context_length=8192))


@pytest.fixture(scope="module")
def server(binary, model, tmp_path_factory) -> Iterator[tuple[str, subprocess.Popen]]:
    with llama_server(binary, model, tmp_path_factory.mktemp("bench-log") / "server.log") as running:
        yield running


def bench(cli_env, *args, env=None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["labwright", "bench", *args], capture_output=True, text=True,
                          env={**cli_env, **(env or {})}, timeout=300)


@pytest.fixture(scope="module")
def measured(server, tmp_path_factory) -> tuple[dict, Path]:
    """One real benchmark run (JSON and plot), shared by the tests that check what it measured."""
    from labwright.testing.pyinfra_output import tool_env

    url, _ = server
    plot = tmp_path_factory.mktemp("bench-plot") / "bench.png"
    proc = bench(tool_env(), "llm", "--url", url, "--model", "tiny", "--contexts", ",".join(map(str, CONTEXTS)),
                 "--decode", str(DECODE), "--trials", str(TRIALS), "--json", "--plot", str(plot))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), plot


def test_numbers_are_real_measurements_consistent_with_the_servers_timings(server, measured):
    doc, _ = measured
    _, proc = server
    assert doc["server_pid"] == proc.pid  # found by its listening port through /proc
    assert doc["tokenizer"] == "server" and doc["template_tokens"] > 0  # /tokenize; ChatML wraps the message
    assert [r["context"] for r in doc["results"]] == list(CONTEXTS)
    for result in doc["results"]:
        context = result["context"]
        assert len(result["trials"]) == TRIALS
        for trial in result["trials"]:
            timings = trial["timings"]
            assert trial["ttft_s"] > 0 and trial["total_s"] > trial["ttft_s"]
            # The prompt is the requested context by the server's tokenizer (template included), and is new to the
            # server: what was timed is a real prefill, not its prompt cache.
            assert abs(trial["prompt_tokens"] - context) <= max(2, context // 200) + 1, trial
            assert timings["cache_n"] <= 16 and timings["prompt_n"] + timings["cache_n"] == trial["prompt_tokens"]
            # Decode tokens are exactly what was asked (the model never picks an end token).
            assert trial["decode_tokens"] == timings["predicted_n"] == trial["chunks"] == DECODE
            assert trial["finish_reason"] == "length"
            # The client sees the first token only after the server finished the prefill it reports.
            assert trial["ttft_s"] * 1000 >= timings["prompt_ms"], trial
            assert trial["prefill_tps"] == pytest.approx(trial["prompt_tokens"] / trial["ttft_s"])
            assert trial["decode_tps"] == pytest.approx(DECODE / (trial["total_s"] - trial["ttft_s"]))
        warm = result["warm"]
        assert warm["prefill_tps"] > 0 and warm["decode_tps"] > 0
        # Client-side decode rate against the server's own: same work, same clock domain, loose (a loaded 2-core CI)
        assert 0.5 <= warm["decode_tps"] / warm["server_decode_tps"] <= 2.0, warm
        assert 20 * 2**20 <= result["peak_rss_bytes"] <= 2 * 2**30
    largest = doc["results"][-1]["warm"]
    # At most the server's rate (TTFT contains its prefill; the usage count adds the few cached template tokens).
    assert 0.25 <= largest["prefill_tps"] / largest["server_prefill_tps"] <= 1.05, largest


def test_cold_trial_is_reported_apart_from_the_cached_median(measured):
    doc, _ = measured
    for result in doc["results"]:
        trials = result["trials"]
        assert result["cold"]["trials"] == 1 and result["warm"]["trials"] == TRIALS - 1
        assert result["cold"]["ttft_s"] == trials[0]["ttft_s"]
        assert result["cold"]["prefill_tps"] == trials[0]["prefill_tps"]
        assert result["warm"]["ttft_s"] == statistics.median(t["ttft_s"] for t in trials[1:])
        assert result["warm"]["decode_tps"] == statistics.median(t["decode_tps"] for t in trials[1:])


def test_plot_is_a_png_with_ink(measured):
    import matplotlib.image

    _, plot = measured
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = matplotlib.image.imread(plot)
    assert pixels.ndim == 3 and pixels.shape[0] > 300 and pixels.shape[1] > 800
    assert (pixels[..., :3] < 0.5).any(axis=-1).mean() > 0.01  # axes, labels and lines, not a blank canvas
    assert (abs(pixels[..., 0] - pixels[..., 2]) > 0.2).sum() > 200  # the coloured measurement line


def test_csv_and_the_completions_endpoint(cli_env, server):
    url, _ = server
    proc = bench(cli_env, "llm", "--url", url, "--endpoint", "completions", "--contexts", "256", "--decode", "8",
                 "--trials", "2", "--csv", "--label", "raw")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 2 and lines[0].split(",")[:5] == ["label", "context", "prompt_tokens", "decode_tokens",
                                                           "trials"]
    row = dict(zip(lines[0].split(","), lines[1].split(","), strict=True))
    assert (row["label"], row["context"], row["decode_tokens"], row["trials"]) == ("raw", "256", "8", "2")
    assert abs(float(row["prompt_tokens"]) - 256) <= 3 and float(row["prefill_tps"]) > 0
    assert float(row["server_prefill_tps"]) > 0 and float(row["peak_rss_mib"]) > 0


def error_of(proc: subprocess.CompletedProcess[str], code: int) -> str:
    assert proc.returncode == code, proc.stdout + proc.stderr
    last = proc.stderr.splitlines()[-1]
    assert last.startswith("labwright: error: ") and proc.stderr.count("labwright: error") == 1
    return last


def test_bad_input_against_the_real_server(cli_env, server):
    url, _ = server
    assert "model 'llama-70b' is not served at" in error_of(
        bench(cli_env, "llm", "--url", url, "--model", "llama-70b", "--contexts", "64"), 2)
    line = error_of(bench(cli_env, "llm", "--url", url.replace("/v1", "/v2"), "--model", "tiny", "--contexts", "64"),
                    2)
    assert "HTTP 404" in line and "--url must be the API base" in line
    line = error_of(bench(cli_env, "llm", "--url", url, "--contexts", "8192", "--decode", "16"), 2)
    assert f"exceeds the server's context of {SERVER_CTX} tokens" in line


def test_api_key_protected_server(cli_env, binary, model, tmp_path):
    key = os.urandom(16).hex()
    with llama_server(binary, model, tmp_path / "server.log", "--api-key", key) as (url, _):
        line = error_of(bench(cli_env, "llm", "--url", url, "--contexts", "64", "--decode", "4"), 2)
        assert "HTTP 401" in line and "--api-key-env VAR" in line
        line = error_of(bench(cli_env, "llm", "--url", url, "--contexts", "64", "--api-key-env", "LW_BENCH_KEY",
                              env={"LW_BENCH_KEY": key[::-1]}), 2)
        assert "HTTP 401" in line and "the server refused the key from --api-key-env" in line
        proc = bench(cli_env, "llm", "--url", url, "--contexts", "64", "--decode", "4", "--trials", "1", "--json",
                     "--api-key-env", "LW_BENCH_KEY", env={"LW_BENCH_KEY": key})
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["results"][0]["cold"]["decode_tokens"] == 4
        assert key not in proc.stdout + proc.stderr
