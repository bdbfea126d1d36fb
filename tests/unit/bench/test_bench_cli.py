"""`labwright bench` as a user runs it against the stdlib stand-in server: output shapes and one-line errors."""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass

import pytest

from labwright.cli import main
from support.cli_child import run_cli


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def bench(capsys):
    """`labwright bench ARGS` through the CLI's entry point, in this process (one test below: a forked child)."""

    def run(*args):
        capsys.readouterr()
        code = main(["bench", *args])
        out, err = capsys.readouterr()
        return Result(code, out, err)

    return run


def error_line(proc, code):
    assert proc.returncode == code, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("labwright: error:")]
    assert len(errors) == 1 and proc.stderr.splitlines()[-1] == errors[0], proc.stderr
    return errors[0]


def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_plain_bench_runs_llm_and_prints_json(cli_env, standin):
    standin.script.prompt_tokens = 300
    args = ["--url", standin.url, "--contexts", "64,128", "--decode", "4", "--trials", "2", "--json"]
    proc = run_cli(["bench", *args], env=cli_env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["model"], doc["label"], doc["tokenizer"], doc["trials"]) == ("standin", "standin", "estimate", 2)
    assert [r["context"] for r in doc["results"]] == [64, 128]
    for result in doc["results"]:
        assert len(result["trials"]) == 2 and result["cold"]["trials"] == 1 and result["warm"]["trials"] == 1
        assert result["cold"]["ttft_s"] == result["trials"][0]["ttft_s"]
        assert result["warm"]["decode_tokens"] == 4
    # The stand-in is this test's own process: local, found by its port, sampled.
    assert doc["server_pid"] is not None and doc["results"][0]["peak_rss_bytes"] > 0
    requests = [r for path, _, r in standin.requests if path == "/v1/chat/completions"]
    assert all(r["model"] == "standin" for r in requests)


def test_csv_output(bench, standin):
    proc = bench("llm", "--url", standin.url, "--contexts", "64", "--decode", "4", "--trials", "1", "--csv",
                 "--label", "stack-a")
    assert proc.returncode == 0, proc.stderr
    header, row = proc.stdout.splitlines()
    assert header.startswith("label,context,prompt_tokens") and row.startswith("stack-a,64,")


def test_unreachable_url(bench):
    port = closed_port()
    line = error_line(bench("llm", "--url", f"http://127.0.0.1:{port}/v1", "--contexts", "64"), 1)
    assert line == (f"labwright: error: cannot reach http://127.0.0.1:{port}/v1: Connection refused "
                    "(is the server running and --url right?)")


def test_contexts_not_integers(bench, standin):
    line = error_line(bench("llm", "--url", standin.url, "--contexts", "512,lots"), 2)
    assert "--contexts '512,lots': 'lots' is not a whole number of tokens" in line
    assert standin.requests == []  # refused before any request


def test_unknown_model(bench, standin):
    line = error_line(bench("llm", "--url", standin.url, "--model", "gpt-9", "--contexts", "64"), 2)
    assert line == (f"labwright: error: model 'gpt-9' is not served at {standin.url} (it serves: standin): pass one "
                    "of those with --model")


def test_server_error_500(bench, standin):
    standin.script.status = 500
    standin.script.content_type = "application/json"
    standin.script.body = b'{"error": {"message": "CUDA error: out of memory"}}'
    line = error_line(bench("llm", "--url", standin.url, "--contexts", "64"), 1)
    assert line == f"labwright: error: {standin.url}/chat/completions: HTTP 500: CUDA error: out of memory"


def test_malformed_stream(bench, standin):
    standin.script.body = b"data: {\"choices\": [{\"delta\": {\"content\": \"a\"}}]}\n\nHTTP/1.1 200 OK garbage\n\n"
    line = error_line(bench("llm", "--url", standin.url, "--contexts", "64"), 1)
    assert line.startswith("labwright: error: malformed stream: not a server-sent-events line: 'HTTP/1.1 200 OK")


def test_option_errors(bench, standin):
    line = error_line(bench("llm", "--url", standin.url, "--json", "--csv"), 2)
    assert "--json and --csv both given" in line
    line = error_line(bench("llm", "--url", standin.url, "--api-key-env", "LW_BENCH_NO_SUCH_KEY"), 2)
    assert "--api-key-env LW_BENCH_NO_SUCH_KEY: the variable is not set" in line
    line = error_line(bench("llm", "--url", "ftp://127.0.0.1/v1"), 2)
    assert "--url 'ftp://127.0.0.1/v1'" in line and "http" in line and "URL" in line
    line = error_line(bench("llm", "--contexts", "64"), 2)
    assert "--url is required" in line
    line = error_line(bench("llm", "--url", standin.url, "--contexts", "64", "--endpoint", "embeddings"), 2)
    assert "--endpoint 'embeddings' is not one of chat, completions" in line
    assert standin.requests == []


def test_gpu_memory_column_with_a_standin_nvidia_smi(bench, standin, tmp_path, monkeypatch):
    """A stand-in for nvidia-smi on PATH (no GPU here): the local server's run reports the GPUs' peak memory."""
    (tmp_path / "nvidia-smi").write_text('#!/bin/sh\necho 1234\necho 766\n')
    (tmp_path / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    doc = json.loads(bench("llm", "--url", standin.url, "--contexts", "64", "--decode", "4", "--trials", "1",
                           "--json").stdout)
    assert doc["results"][0]["peak_gpu_bytes"] == 2000 * 2**20
    table = bench("llm", "--url", standin.url, "--contexts", "64", "--decode", "4", "--trials", "1").stdout
    assert "peak GPU MiB" in table and "2,000" in table


def test_prompts_are_sized_by_the_servers_tokenizer(bench, standin):
    """With a tokenizer endpoint (here tabbyAPI's /v1/token/encode; the stand-in's tokens are words) every prompt is
    the context minus what the chat template adds, by that tokenizer, and no two prompts start alike."""
    standin.script.tabby_tokenizer = True
    standin.script.prompt_tokens = 10  # what the server says "Hello." becomes with its template: 1 word + 9
    proc = bench("llm", "--url", standin.url, "--contexts", "200,1000", "--decode", "4", "--trials", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["tokenizer"], doc["template_tokens"]) == ("server", 9)
    prompts = [body["messages"][0]["content"] for path, _, body in standin.requests
               if path == "/v1/chat/completions" and body["max_tokens"] == 4]
    assert [len(p.split()) for p in prompts] == pytest.approx([191, 191, 991, 991], abs=4), prompts
    assert len({p.split()[0] for p in prompts}) == 4


def test_without_a_tokenizer_prompts_are_sized_by_the_calibrated_ratio(bench, standin):
    standin.script.prompt_tokens = None  # the stand-in counts a token per word, +9 for the template, as usage
    proc = bench("llm", "--url", standin.url, "--contexts", "500", "--decode", "4", "--trials", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["tokenizer"], doc["template_tokens"]) == ("estimate", 9)
    # Two calibration requests measured the ratio; the prompts land near 500 by the server's own count.
    for trial in doc["results"][0]["trials"]:
        assert trial["prompt_tokens_source"] == "usage" and abs(trial["prompt_tokens"] - 500) <= 25, trial
