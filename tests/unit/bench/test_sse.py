"""SSE parsing and the timed streaming client, on real bytes from a local stdlib server (see conftest.py)."""

from __future__ import annotations

import json

import pytest

from labwright.bench.openai import Client, Endpoint
from labwright.bench.sse import Event, MalformedStream, iter_events
from labwright.errors import BadInput, OperationFailed


def test_events_join_data_lines_skip_comments_and_keep_the_event_name():
    lines = [b": keep-alive\n", b"event: delta\n", b"data: {\"a\":\n", b"data: 1}\n", b"\n", b"data:[DONE]\r\n"]
    events = list(iter_events(lines))
    assert events == [Event('{"a":\n1}', "delta"), Event("[DONE]")]
    assert events[0].json() == {"a": 1} and events[1].done


def test_events_reject_a_line_that_is_no_sse_field():
    with pytest.raises(MalformedStream, match="not a server-sent-events line: '<html>'"):
        list(iter_events([b"<html>\n", b"\n"]))


def test_event_data_must_be_a_json_object():
    with pytest.raises(MalformedStream, match="not JSON"):
        Event("{broken").json()
    with pytest.raises(MalformedStream, match="not a JSON object"):
        Event("[1, 2]").json()


def client(server, kind="chat"):
    return Client(Endpoint.parse(server.url), "standin", kind)


def test_ttft_is_the_first_token_not_the_role_chunk(standin):
    standin.script.first_delay = 0.25
    standin.script.token_delay = 0.05
    trial = client(standin).stream("hi", 4)
    # The role chunk arrives at once; the first token 0.25 s later: that is the TTFT. No other bound in seconds: on
    # saturated cores a late first chunk shortens the measured gap to the last one (seen: 0.1497 s for 3 x 0.05 s),
    # and the server thread can be late by any amount; the order of events is what is asserted.
    assert trial.ttft_s >= 0.25
    assert trial.total_s > trial.ttft_s
    assert (trial.prompt_tokens, trial.prompt_tokens_source) == (42, "usage")
    assert (trial.decode_tokens, trial.decode_tokens_source, trial.chunks) == (4, "usage", 4)
    assert trial.prefill_tps == pytest.approx(42 / trial.ttft_s)
    assert trial.decode_tps == pytest.approx(4 / (trial.total_s - trial.ttft_s))
    path, headers, body = standin.requests[-1]
    assert path == "/v1/chat/completions" and body["stream"] is True and body["max_tokens"] == 4
    assert body["messages"] == [{"role": "user", "content": "hi"}] and "Authorization" not in headers


@pytest.mark.parametrize("piece", [1, 7, 64])
def test_bytes_cut_anywhere_parse_the_same(standin, piece):
    standin.script.tokens = ["é", "漢字", " ok", "!"]  # multi-byte UTF-8 split across writes too
    standin.script.piece = piece
    standin.script.crlf = True
    standin.script.comments = True
    trial = client(standin).stream("hi", 4)
    assert (trial.chunks, trial.decode_tokens, trial.finish_reason) == (4, 4, None)


def test_completions_endpoint_and_server_timings(standin):
    standin.script.timings = True
    standin.script.usage = False
    trial = client(standin, "completions").stream("once upon", 4)
    assert standin.requests[-1][0] == "/v1/completions" and standin.requests[-1][2]["prompt"] == "once upon"
    assert (trial.prompt_tokens_source, trial.decode_tokens_source) == ("timings", "timings")
    assert (trial.server_prefill_tps, trial.server_decode_tps) == (1000.0, 50.0)


def test_without_usage_or_timings_tokens_are_counted_and_estimated(standin):
    standin.script.usage = False
    trial = client(standin).stream("x" * 400, 4)
    assert (trial.decode_tokens, trial.decode_tokens_source) == (4, "chunks")
    assert (trial.prompt_tokens, trial.prompt_tokens_source) == (100, "estimate")


def test_malformed_event_data_is_one_clear_error(standin):
    standin.script.body = b'data: {"choices": [{"delta": {"content": "a"}}]}\n\ndata: {"choices": [\n\n'
    with pytest.raises(MalformedStream, match=r"^malformed stream: event data is not JSON"):
        client(standin).stream("hi", 4)


def test_a_json_answer_instead_of_a_stream_is_named(standin):
    standin.script.body = json.dumps({"choices": [{"message": {"content": "hi"}}]}).encode()
    standin.script.content_type = "application/json"
    with pytest.raises(MalformedStream, match="did not stream: Content-Type 'application/json'"):
        client(standin).stream("hi", 4)


def test_an_error_event_mid_stream_fails(standin):
    standin.script.body = b'data: {"error": {"message": "slot crashed", "code": 500}}\n\n'
    with pytest.raises(OperationFailed, match="failed mid-stream: slot crashed"):
        client(standin).stream("hi", 4)


@pytest.mark.parametrize(("status", "error", "pattern"), [
    (500, OperationFailed, r"HTTP 500: out of memory$"),
    (401, BadInput, r"HTTP 401 \(out of memory\): .*--api-key-env VAR"),
    (404, BadInput, r"HTTP 404 .*--url must be the API base"),
])
def test_http_errors_are_one_line_with_the_servers_message(standin, status, error, pattern):
    standin.script.status = status
    standin.script.content_type = "application/json"
    standin.script.body = b'{"error": {"message": "out of memory", "type": "server_error"}}'
    with pytest.raises(error, match=pattern) as caught:
        client(standin).stream("hi", 4)
    assert "\n" not in str(caught.value)


def test_api_key_goes_as_bearer(standin):
    Client(Endpoint.parse(standin.url, api_key="s3cret"), "standin").stream("hi", 4)
    assert standin.requests[-1][1]["Authorization"] == "Bearer s3cret"


def test_a_refused_key_is_named_as_such(standin):
    standin.script.status = 401
    standin.script.content_type = "application/json"
    standin.script.body = b'{"error": {"message": "Invalid API Key"}}'
    with pytest.raises(BadInput, match=r"HTTP 401 \(Invalid API Key\): the server refused the key") as caught:
        Client(Endpoint.parse(standin.url, api_key="wrong"), "standin").stream("hi", 4)
    assert "wrong" not in str(caught.value)


def test_tokenize_missing_is_remembered(standin):
    c = client(standin)
    assert c.count_tokens("hello") is None and c.count_tokens("again") is None
    assert [path for path, _, _ in standin.requests] == ["/tokenize", "/v1/token/encode"]


def test_tabbyapi_token_encode_is_used_when_there_is_no_tokenize(standin):
    standin.script.tabby_tokenizer = True
    c = client(standin)
    assert c.count_tokens("three little words") == 3 and c.count_tokens("and two") == 2
    assert [path for path, _, _ in standin.requests] == ["/tokenize", "/v1/token/encode", "/v1/token/encode"]
