"""Server answers are checked where they enter (issue 33 class 7): a stream cut short, a negative or non-integer usage
count, a NaN speed, a TTS body shorter than its Content-Length are error rows naming what the server sent, never
measurements. Real HTTP servers on 127.0.0.1: the OpenAI-compatible stand-in (conftest.py) and a speech server below.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labwright.bench.openai import Client, Endpoint
from labwright.bench.sse import BadAnswer
from labwright.bench.tts import bench_tts
from support.cli_result import Result, runner


@pytest.fixture
def labwright(capsys):
    return runner(capsys)


def last_error(result: Result, code: int) -> str:
    assert result.returncode == code, (result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    errors = [line for line in lines if line.startswith("labwright: error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0] and "Traceback" not in result.stderr, result.stderr
    return errors[0]


def client(standin: Any) -> Client:
    return Client(Endpoint.parse(standin.url, timeout=10), "standin")


# --- the OpenAI-compatible stream -----------------------------------------------------------------------------------

def test_a_stream_cut_after_one_of_four_chunks_is_not_a_trial(standin):
    standin.script.cut_after = 1
    with pytest.raises(BadAnswer, match=r"stopped after 2 chunk\(s\) \(1 with text\) without \[DONE\] or a "
                                        r"finish_reason: cut short, not a measurement"):
        client(standin).stream("hello", 4)


def test_a_connection_closed_mid_stream_is_not_a_trial(standin):
    standin.script.drop_after = 1
    with pytest.raises(BadAnswer, match="the stream broke off"):
        client(standin).stream("hello", 4)


@pytest.mark.parametrize(("usage", "words"), [
    ({"prompt_tokens": 42, "completion_tokens": -4}, "usage.completion_tokens = -4 (must be 0 or more)"),
    ({"prompt_tokens": 4.5, "completion_tokens": 4}, "usage.prompt_tokens = 4.5"),
    ({"prompt_tokens": "42", "completion_tokens": 4}, "usage.prompt_tokens = '42'"),
    ({"prompt_tokens": True, "completion_tokens": 4}, "usage.prompt_tokens = True"),
    ({"prompt_tokens": 42, "completion_tokens": 1e400}, "usage.completion_tokens = inf"),
])
def test_usage_counts_that_cannot_be_are_named(standin, usage, words):
    standin.script.usage_doc = usage
    with pytest.raises(BadAnswer) as caught:
        client(standin).stream("hello", 4)
    assert words in str(caught.value) and "stream chunk" in str(caught.value)


@pytest.mark.parametrize("speed", [math.nan, math.inf, -1.0])
def test_llama_cpp_speeds_that_cannot_be_are_named(standin, speed):
    standin.script.timings_doc = {"prompt_n": 42, "predicted_n": 4, "prompt_per_second": 900.0,
                                  "predicted_per_second": speed}
    with pytest.raises(BadAnswer, match=r"timings\.predicted_per_second = "):
        client(standin).stream("hello", 4)


def test_a_complete_stream_with_a_finish_reason_but_no_done_is_a_trial(standin):
    # Some servers end with finish_reason and close without [DONE]: the answer is whole.
    body = b"".join(b"data: " + json.dumps(doc).encode() + b"\n\n" for doc in (
        {"choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": None}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
         "usage": {"prompt_tokens": 7, "completion_tokens": 1}}))
    standin.script.body = body
    trial = client(standin).stream("hello", 1)
    assert (trial.finish_reason, trial.decode_tokens, trial.prompt_tokens) == ("length", 1, 7)


def test_a_cut_stream_is_an_error_row_and_exit_1(labwright, standin):
    standin.script.cut_after = 1
    standin.script.fault_min_tokens = 2  # the 1-token calibration requests are whole; the timed trials are cut
    result = labwright("bench", "llm", "--url", standin.url, "--contexts", "64,128", "--decode", "4",
                       "--trials", "2", "--json")
    line = last_error(result, 1)
    assert "2 of 2 context(s) not measured, first: context 64:" in line and "cut short" in line, line
    doc = json.loads(result.stdout)
    for row in doc["results"]:
        assert "without [DONE]" in row["error"]
        assert row["cold"] is None and row["warm"] is None and row["trials"] == []


def test_an_error_row_is_shown_as_such_in_the_table_and_csv(labwright, standin):
    standin.script.usage_doc = {"prompt_tokens": 42, "completion_tokens": -4}
    standin.script.fault_min_tokens = 2
    table = labwright("bench", "llm", "--url", standin.url, "--contexts", "64", "--decode", "4", "--trials", "1")
    assert "usage.completion_tokens = -4" in last_error(table, 1)
    assert "decode tok -4" not in table.stdout and "error" in table.stdout and "-4" in table.stdout
    csv_out = labwright("bench", "llm", "--url", standin.url, "--contexts", "64", "--decode", "4", "--trials", "1",
                        "--csv")
    last_error(csv_out, 1)
    header, row = csv_out.stdout.splitlines()
    assert header.endswith(",error") and "must be 0 or more" in row and ",,,," in row  # no numbers in the row


def test_a_saved_run_with_an_error_row_compares(labwright, standin, tmp_path):
    standin.script.cut_after = 1
    standin.script.fault_min_tokens = 2
    result = labwright("bench", "llm", "--url", standin.url, "--contexts", "64", "--decode", "4", "--trials", "1",
                       "--json")
    last_error(result, 1)
    broken = tmp_path / "broken.json"
    broken.write_text(result.stdout)
    standin.script = type(standin.script)()
    good = labwright("bench", "llm", "--url", standin.url, "--contexts", "64", "--decode", "4", "--trials", "1",
                     "--json")
    assert good.returncode == 0, good.stderr
    whole = tmp_path / "good.json"
    whole.write_text(good.stdout)
    compared = labwright("bench", "compare", str(whole), str(broken), "--csv")
    assert compared.returncode == 0, compared.stderr
    assert "cut short" in compared.stdout


chunk_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8)
choice = st.fixed_dictionaries({}, optional={
    "index": chunk_values, "finish_reason": chunk_values | st.sampled_from(["stop", "length"]), "text": chunk_values,
    "delta": chunk_values | st.fixed_dictionaries({}, optional={"content": chunk_values | st.text(min_size=1),
                                                                 "reasoning_content": chunk_values})})
counts = st.fixed_dictionaries({}, optional={key: chunk_values for key in (
    "prompt_tokens", "completion_tokens", "total_tokens", "prompt_n", "cache_n", "predicted_n",
    "prompt_per_second", "predicted_per_second")})
chunk = st.fixed_dictionaries({}, optional={
    "choices": chunk_values | st.lists(choice, max_size=2), "usage": chunk_values | counts,
    "timings": chunk_values | counts})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chunks=st.lists(chunk, max_size=5), done=st.booleans())
def test_malformed_chunks_are_a_trial_with_sane_numbers_or_one_bad_answer(standin, chunks, done):
    events = [b"data: " + json.dumps(doc).encode() + b"\n\n" for doc in chunks]
    standin.script.body = b"".join(events) + (b"data: [DONE]\n\n" if done else b"")
    try:
        trial = client(standin).stream("hello", 4)
    except BadAnswer as exc:
        message = str(exc)
        assert "\n" not in message and message.startswith(f"{standin.url}"), message
        return
    for value in (trial.ttft_s, trial.total_s, trial.prefill_tps, trial.decode_tps, trial.server_prefill_tps,
                  trial.server_decode_tps):
        assert value is None or (math.isfinite(value) and value >= 0), trial
    assert trial.prompt_tokens >= 0 and trial.decode_tokens >= 0 and isinstance(trial.decode_tokens, int)
    assert done or trial.finish_reason


# --- /v1/audio/speech ---------------------------------------------------------------------------------------------

@dataclass
class Speech:
    announced: str | None = "10000"  # the Content-Length header sent (None: chunked)
    body: bytes = b"ID3\x04" + bytes(96)
    chunked_cut: bool = False  # chunked, and the connection closes mid-chunk


class _SpeechServer(ThreadingHTTPServer):
    daemon_threads = True
    speech: Speech


class _SpeechHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _SpeechServer

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        speech = self.server.speech
        self.send_response(200)
        self.send_header("Content-Type", "audio/mpeg")
        if speech.announced is not None:
            self.send_header("Content-Length", speech.announced)
        else:
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if speech.announced is None:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(speech.body), speech.body))
            if speech.chunked_cut:
                self.wfile.write(b"400\r\nabc")
            else:
                self.wfile.write(b"0\r\n\r\n")
        else:
            self.wfile.write(speech.body)
        self.wfile.flush()
        self.close_connection = True  # the body ends here, whatever Content-Length announced


@pytest.fixture
def speech() -> Iterator[_SpeechServer]:
    server = _SpeechServer(("127.0.0.1", 0), _SpeechHandler)
    server.speech = Speech()
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def speech_at(server: _SpeechServer) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


def test_a_tts_body_shorter_than_its_content_length_is_an_error_row(speech):
    results = bench_tts(speech_at(speech), "Hello there.", ["mp3"], runs=1, timeout=10)
    for result in results:
        assert result.error == ("the body has 100 of 10,000 announced bytes (Content-Length): cut short, not a "
                                "measurement")
        assert result.first_ms is None and result.total_ms is None and result.samples == []


@pytest.mark.parametrize(("speech_answer", "words"), [
    (Speech(announced="abc"), "content_length = 'abc'"),
    (Speech(announced="-5"), "content_length = '-5'"),
    (Speech(announced=None, chunked_cut=True), "the body broke off after 103 bytes: IncompleteRead"),
])
def test_a_tts_body_that_cannot_be_measured_is_named(speech, speech_answer, words):
    speech.speech = speech_answer
    results = bench_tts(speech_at(speech), "Hello there.", ["mp3"], runs=1, timeout=10)
    assert all(words in r.error and r.first_ms is None for r in results), [r.error for r in results]


def test_a_whole_tts_body_is_measured(speech):
    speech.speech = Speech(announced="100")
    results = bench_tts(speech_at(speech), "Hello there.", ["mp3"], runs=2, timeout=10)
    assert [(r.error, r.bytes, len(r.samples)) for r in results] == [("", 100, 2), ("", 100, 2)]


def test_bench_tts_cli_shows_the_cut_body_and_exits_1(labwright, speech, tmp_path: Path):
    text = tmp_path / "speech.txt"
    text.write_text("Hello there.")
    result = labwright("bench", "tts", "--url", speech_at(speech), "--text", str(text), "--runs", "1",
                       "--format", "mp3", "--json")
    line = last_error(result, 1)
    assert "mp3/stream: the body has 100 of 10,000 announced bytes" in line
    rows = json.loads(result.stdout)["results"]
    cut = ("the body has 100 of 10,000 a", None, 0)
    assert [(r["error"][:28], r["first_ms"], r["bytes"]) for r in rows] == [cut, cut]

