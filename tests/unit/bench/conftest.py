"""A stand-in OpenAI-compatible streaming server (stdlib http.server on 127.0.0.1), for the wire-level bench tests.

It stands in for a real server's *bytes on the wire*: proper ``chat.completion.chunk`` events sent with chunked
transfer encoding, the role chunk first, optional keep-alive comments, delays before the first token and between
tokens, the bytes cut into arbitrary TCP writes, and the faults a real server can produce (an HTTP error with an
OpenAI error body, a non-streamed JSON answer, broken event data). The llama-server integration tests measure the real
engine; this server makes the parser and timing paths fail when they mis-handle bytes.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


@dataclass
class Script:
    tokens: list[str] = field(default_factory=lambda: ["Hel", "lo", " wor", "ld"])
    status: int = 200
    content_type: str = "text/event-stream"
    first_delay: float = 0.0  # after the role chunk, before the first token: the "prefill"
    token_delay: float = 0.0
    usage: bool = True
    timings: bool = False
    comments: bool = False
    piece: int | None = None  # cut the whole stream into writes of this many bytes
    crlf: bool = False
    body: bytes | None = None  # sent instead of the event stream (error bodies, malformed streams)
    prompt_tokens: int | None = 42  # None: counted from the prompt
    models: list[str] = field(default_factory=lambda: ["standin"])
    # Nonsense a broken server sends (issue 33 class 7), to requests asking for at least ``fault_min_tokens`` tokens
    # (2: the timed trials, not the 1-token calibration requests):
    cut_after: int | None = None  # the stream ends cleanly after this many token chunks: no finish_reason, no [DONE]
    drop_after: int | None = None  # the connection closes after this many token chunks, mid chunked transfer
    usage_doc: dict[str, Any] | None = None  # sent as ``usage`` instead of the true counts
    timings_doc: dict[str, Any] | None = None  # sent as llama.cpp's ``timings``
    fault_min_tokens: int = 0
    listing: Any = None  # the whole GET /v1/models answer, instead of one entry per name in ``models``
    tabby_tokenizer: bool = False


def events(script: Script, kind: str, prompt_tokens: int) -> Iterator[tuple[bytes, float]]:
    """(bytes, delay before them): one OpenAI-style stream for ``script``."""
    end = b"\r\n" if script.crlf else b"\n"

    def event(doc: dict[str, Any] | str) -> bytes:
        data = doc if isinstance(doc, str) else json.dumps(doc)
        return b"data: " + data.encode() + end + end

    base = {"id": "cmpl-standin", "model": "standin", "object": "chat.completion.chunk"}
    if kind == "chat":
        yield event({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": None}}]}), 0.0
    for i, token in enumerate(script.tokens):
        if script.comments:
            yield b": keep-alive" + end + end, 0.0
        choice = {"index": 0, "delta": {"content": token}} if kind == "chat" else {"index": 0, "text": token}
        yield event({**base, "choices": [{**choice, "finish_reason": None}]}), (
            script.first_delay if i == 0 else script.token_delay)
        if script.cut_after is not None and i + 1 >= script.cut_after:
            return
    last: dict[str, Any] = {**base, "choices": []}
    if script.usage:
        last["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": len(script.tokens)}
    if script.usage_doc is not None:
        last["usage"] = script.usage_doc
    if script.timings:
        last["timings"] = {"prompt_n": prompt_tokens, "cache_n": 0, "predicted_n": len(script.tokens),
                           "prompt_per_second": 1000.0, "predicted_per_second": 50.0}
    if script.timings_doc is not None:
        last["timings"] = script.timings_doc
    yield event(last), 0.0
    yield event("[DONE]"), 0.0


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: StandinServer

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, status: int, content_type: str, pieces: Iterator[tuple[bytes, float]],
              drop_after: int | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for index, (data, delay) in enumerate(pieces):
            if drop_after is not None and index > drop_after:  # the role chunk, then drop_after token chunks
                self.wfile.write(b"40\r\ndata: {\"choi")  # half of a transfer chunk, then the connection closes
                self.wfile.flush()
                self.close_connection = True
                return
            if delay:
                time.sleep(delay)
            if data:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def do_GET(self) -> None:
        script = self.server.script
        if self.path.endswith("/models"):
            listing = script.listing if script.listing is not None else {
                "object": "list", "data": [{"id": m} for m in script.models]}
            body = json.dumps(listing).encode()
            self._send(200, "application/json", iter([(body, 0.0)]))
        else:
            self._send(404, "application/json", iter([(b'{"error": {"message": "not found"}}', 0.0)]))

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        request = json.loads(self.rfile.read(length) or b"{}")
        self.server.requests.append((self.path, dict(self.headers), request))
        script = self.server.script
        if self.path == "/v1/token/encode" and script.tabby_tokenizer:
            # tabbyAPI's tokenizer endpoint; this stand-in's tokens are whitespace-separated words.
            words = request["text"].split()
            self._send(200, "application/json", iter([(json.dumps({"tokens": [0] * len(words),
                                                                    "length": len(words)}).encode(), 0.0)]))
            return
        if self.path.endswith(("/tokenize", "/token/encode")):
            self._send(404, "application/json", iter([(b'{"error": {"message": "no tokenizer"}}', 0.0)]))
            return
        if script.body is not None:
            self._send(script.status, script.content_type, iter([(script.body, 0.0)]))
            return
        kind = "chat" if self.path.endswith("/chat/completions") else "completions"
        if int(request.get("max_tokens") or 0) < script.fault_min_tokens:
            script = Script(tokens=script.tokens, prompt_tokens=script.prompt_tokens)
        prompt = request["messages"][0]["content"] if kind == "chat" else request["prompt"]
        # A fixed count, or one like a server's: a token per word, plus 9 for the chat template.
        tokens = script.prompt_tokens if script.prompt_tokens is not None else (
            len(prompt.split()) + (9 if kind == "chat" else 0))
        stream = list(events(script, kind, tokens))
        if script.drop_after is not None:
            self._send(script.status, script.content_type, iter(stream), drop_after=script.drop_after)
            return
        if script.piece:
            # The same bytes cut at arbitrary points: lines and even UTF-8 never arrive whole.
            blob = b"".join(data for data, _ in stream)
            delays = []
            offset = 0
            for data, delay in stream:
                delays.append((offset, delay))
                offset += len(data)
            pieces = []
            for start in range(0, len(blob), script.piece):
                delay = sum(d for o, d in delays if start <= o < start + script.piece)
                pieces.append((blob[start:start + script.piece], delay))
            self._send(script.status, script.content_type, iter(pieces))
        else:
            self._send(script.status, script.content_type, iter(stream))


class StandinServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.script = Script()
        self.requests: list[tuple[str, dict[str, str], dict[str, Any]]] = []

    def handle_error(self, request: Any, client_address: Any) -> None:
        # The client hangs up on purpose after a bad answer (an HTTP error, a broken stream): not the stand-in's fault.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


@pytest.fixture
def standin() -> Iterator[StandinServer]:
    server = StandinServer()
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
