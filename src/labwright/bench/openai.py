"""A streaming client for OpenAI-compatible servers (llama.cpp, vLLM, tabbyAPI, Ollama, ...), timing one request.

Standard library only (``http.client``): the clock starts when the request is sent on an already open connection and
the stream is read line by line as it arrives, so nothing buffers between the server's first token and our clock.
TLS is always verified: against the system's CA store, or the CA file given (``--ca``: the root of labwright's TLS
gateway, deploys/gateway.py).
"""

from __future__ import annotations

import http.client
import json
import ssl
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from labwright.bench.sse import BadAnswer, MalformedStream, iter_events
from labwright.errors import BadInput, OperationFailed
from labwright.textio import loads_json

if TYPE_CHECKING:
    from labwright.bench.answers import ModelEntry, Timings, Usage

ENDPOINTS = ("chat", "completions")


@dataclass(frozen=True)
class Endpoint:
    """The API base (``http://HOST:PORT/v1``) and how to authenticate to it."""

    scheme: str
    host: str
    port: int
    prefix: str
    api_key: str | None = field(default=None, repr=False)
    timeout: float = 600.0
    ca: str | None = None

    @classmethod
    def parse(cls, url: str, api_key: str | None = None, timeout: float = 600.0, ca: str | None = None) -> Endpoint:
        # The shared URL check (labwright.schema.checks.url): scheme, a real host, a port 1-65535 (":0" and
        # ":99999" refused, not taken as the scheme's default), no spaces or control characters.
        from labwright.schema.checks import url as checked_url

        try:
            parts = urllib.parse.urlsplit(checked_url(url))
        except ValueError as exc:
            raise BadInput(f"--url {exc}: pass the API base, e.g. http://127.0.0.1:8080/v1") from None
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return cls(parts.scheme.lower(), parts.hostname or "", port, parts.path.rstrip("/"), api_key, timeout, ca)

    @property
    def origin(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    @property
    def base(self) -> str:
        return f"{self.origin}{self.prefix}"

    @property
    def root_prefix(self) -> str:
        """The server root: llama.cpp and vLLM serve /tokenize beside /v1, not under it."""
        return self.prefix.removesuffix("/v1")

    def connect(self) -> http.client.HTTPConnection:
        if self.scheme == "https":
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                self.host, self.port, timeout=self.timeout, context=tls_context(self.ca))
        else:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            conn.connect()
        except ssl.SSLError as exc:
            raise OperationFailed(f"TLS to {self.base} failed: {exc.reason or exc}") from None
        except OSError as exc:
            reason = exc.strerror or str(exc) or type(exc).__name__
            raise OperationFailed(
                f"cannot reach {self.base}: {reason} (is the server running and --url right?)") from None
        return conn

    def headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream, application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers


def tls_context(ca: str | None) -> ssl.SSLContext:
    """A verifying TLS context: the system's CA store, or only ``ca`` (a PEM file) when given; a file that is no CA
    is one line."""
    if not ca:
        return ssl.create_default_context()
    from labwright.textio import read_text

    # Read as text first (a missing file, a directory, a pipe, a huge or binary file: one line, never a hang).
    try:
        text = read_text(ca, "a CA certificate (PEM)")
    except BadInput as exc:
        raise BadInput(f"--ca {exc}") from None
    try:
        if "-----BEGIN CERTIFICATE-----" not in text:  # an empty cadata would mean the system store, silently
            raise ValueError("no certificate in it")
        return ssl.create_default_context(cadata=text)
    except (ssl.SSLError, ValueError) as exc:
        why = getattr(exc, "reason", None) or exc
        raise BadInput(f"--ca {ca}: not a readable PEM certificate ({why}); pass the gateway's root, e.g. "
                       "~/.local/share/labwright/gateway/HOST/root.crt") from None


def _error_message(body: bytes) -> str:
    """The server's error message as one printable line (no newline or escape sequence of its own reaches ours)."""
    text = body.decode("utf-8", "replace").strip()
    try:
        doc = loads_json(text)
    except json.JSONDecodeError:
        return _one_line(text)
    error = doc.get("error", doc) if isinstance(doc, dict) else doc
    if isinstance(error, dict):
        return _one_line(str(error.get("message") or error.get("detail") or error))
    return _one_line(str(error))


def _one_line(text: str) -> str:
    return " ".join("".join(c if c.isprintable() else " " for c in text).split())[:200]


def check_status(endpoint: Endpoint, path: str, status: int, body: bytes, model: str | None = None) -> None:
    """One line per failure class: the key (401/403), the URL or the model (404), the server (anything else)."""
    if status < 400:
        return
    url = f"{endpoint.origin}{path}"
    message = _error_message(body)
    if status in (401, 403):
        if endpoint.api_key:
            raise BadInput(f"{url}: HTTP {status} ({message or 'unauthorized'}): the server refused the key from "
                           "--api-key-env: check the variable's value")
        raise BadInput(f"{url}: HTTP {status} ({message or 'unauthorized'}): export the server's API key in a "
                       "variable and pass --api-key-env VAR")
    if status == 404:
        if model and "model" in message.lower():
            raise BadInput(f"{url}: HTTP 404, model {model!r} unknown to the server ({message}): pass a --model "
                           "it serves (GET /v1/models)")
        raise BadInput(f"{url}: HTTP 404 ({message or 'not found'}): --url must be the API base, e.g. "
                       "http://HOST:PORT/v1")
    raise OperationFailed(f"{url}: HTTP {status}: {message or 'no error message'}")


@dataclass
class Trial:
    """One streamed request, timed on the client, with what the server itself reported (usage, llama.cpp timings)."""

    ttft_s: float
    total_s: float
    prompt_tokens: int
    prompt_tokens_source: str  # "usage", "timings" or "estimate"
    decode_tokens: int
    decode_tokens_source: str  # "usage", "timings" or "chunks"
    chunks: int
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    timings: dict[str, Any] | None = None

    @property
    def prefill_tps(self) -> float:
        return self.prompt_tokens / self.ttft_s if self.ttft_s > 0 else 0.0

    @property
    def decode_tps(self) -> float | None:
        elapsed = self.total_s - self.ttft_s
        return self.decode_tokens / elapsed if self.decode_tokens > 0 and elapsed > 0 else None

    @property
    def server_prefill_tps(self) -> float | None:
        return _number(self.timings, "prompt_per_second")

    @property
    def server_decode_tps(self) -> float | None:
        return _number(self.timings, "predicted_per_second")

    def to_json(self) -> dict[str, Any]:
        return {
            "ttft_s": self.ttft_s, "total_s": self.total_s, "prompt_tokens": self.prompt_tokens,
            "prompt_tokens_source": self.prompt_tokens_source, "decode_tokens": self.decode_tokens,
            "decode_tokens_source": self.decode_tokens_source, "chunks": self.chunks,
            "finish_reason": self.finish_reason, "prefill_tps": self.prefill_tps, "decode_tps": self.decode_tps,
            "server_prefill_tps": self.server_prefill_tps, "server_decode_tps": self.server_decode_tps,
            "usage": self.usage, "timings": self.timings,
        }


def _number(doc: dict[str, Any] | None, key: str) -> float | None:
    value = (doc or {}).get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


class Client:
    def __init__(self, endpoint: Endpoint, model: str, kind: str = "chat"):
        if kind not in ENDPOINTS:
            raise BadInput(f"--endpoint {kind!r} is not one of {', '.join(ENDPOINTS)}")
        self.endpoint = endpoint
        self.model = model
        self.kind = kind
        self._tokenizer: str | None = ""  # "" not tried yet, None none found, else the path that works

    # --- plain JSON requests -------------------------------------------------------------------------------------

    def _json(self, method: str, path: str, payload: dict[str, Any] | None = None) -> tuple[int, bytes]:
        conn = self.endpoint.connect()
        try:
            body = json.dumps(payload).encode() if payload is not None else None
            conn.request(method, path, body=body, headers=self.endpoint.headers())
            response = conn.getresponse()
            return response.status, response.read()
        except (OSError, http.client.HTTPException) as exc:
            raise OperationFailed(f"{self.endpoint.base}: request {path} failed: {exc}") from None
        finally:
            conn.close()

    def models(self) -> list[ModelEntry] | None:
        """The served models (``GET /v1/models``), or None when the server has no such listing (404, not JSON, no
        ``data``); a listing whose entries are nonsense (an id that is not a string, a negative context) is
        BadAnswer naming the field."""
        from labwright.bench.answers import Models, parse

        path = f"{self.endpoint.prefix}/models"
        status, body = self._json("GET", path)
        if status == 404:
            return None
        check_status(self.endpoint, path, status, body)
        try:
            doc = loads_json(body)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None
        if not isinstance(doc, dict) or "data" not in doc:
            return None
        return list(parse(Models, doc, f"{self.endpoint.origin}{path} answered").data)

    def count_tokens(self, text: str) -> int | None:
        """Tokens in ``text`` by the server's own tokenizer, or None when it has none we know.

        ``/tokenize`` beside ``/v1`` (llama.cpp: ``content``; vLLM: ``prompt``, answers ``count``) or tabbyAPI's
        ``/v1/token/encode`` (``text``, answers ``length``); the first that answers is used from then on.
        """
        from labwright.bench.answers import TokenCount, parse

        if self._tokenizer is None:
            return None
        candidates = [self._tokenizer] if self._tokenizer else [
            f"{self.endpoint.root_prefix}/tokenize", f"{self.endpoint.prefix}/token/encode"]
        for path in candidates:
            status, body = self._json("POST", path, {"content": text, "prompt": text, "text": text,
                                                     "model": self.model, "add_special": False})
            if status in (401, 403):
                check_status(self.endpoint, path, status, body)
            if status != 200:
                continue
            try:
                doc = loads_json(body)
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue
            count = parse(TokenCount, doc, f"{self.endpoint.origin}{path} answered").value \
                if isinstance(doc, dict) else None
            if count is None:
                continue
            self._tokenizer = path
            return count
        self._tokenizer = None
        return None

    # --- the timed streaming request -----------------------------------------------------------------------------

    def request_body(self, prompt: str, max_tokens: int) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "max_tokens": max_tokens, "stream": True,
                                "stream_options": {"include_usage": True}}
        if self.kind == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        return body

    def stream(self, prompt: str, max_tokens: int) -> Trial:
        """Send one streamed request and time it: TTFT at the first chunk carrying text, total at the stream's end."""
        path = f"{self.endpoint.prefix}/{'chat/completions' if self.kind == 'chat' else 'completions'}"
        payload = json.dumps(self.request_body(prompt, max_tokens)).encode()
        conn = self.endpoint.connect()
        try:
            started = time.perf_counter()
            try:
                conn.request("POST", path, body=payload, headers=self.endpoint.headers())
                response = conn.getresponse()
            except (OSError, http.client.HTTPException) as exc:
                raise OperationFailed(f"{self.endpoint.base}: the request failed: {exc}") from None
            if response.status >= 400:
                check_status(self.endpoint, path, response.status, response.read(), self.model)
            content_type = response.getheader("Content-Type", "")
            if "event-stream" not in content_type:
                raise MalformedStream(f"{self.endpoint.origin}{path} did not stream: "
                                      f"Content-Type {content_type!r}, expected text/event-stream")
            return self._read(response, started, prompt)
        finally:
            conn.close()

    def _read(self, response: http.client.HTTPResponse, started: float, prompt: str) -> Trial:
        """The stream, each chunk checked as it arrives (labwright.bench.answers.StreamChunk). Not a measurement
        (BadAnswer, naming what the server sent): a chunk with a negative or non-integer count or a NaN speed, an
        error event, a stream that stops before ``[DONE]`` and without any finish_reason (cut short), one that breaks
        off mid-transfer, one without any generated text."""
        from labwright.bench.answers import StreamChunk, parse

        first: float | None = None
        chunks = events = 0
        done = False
        finish: str | None = None
        usage: dict[str, Any] | None = None
        timings: dict[str, Any] | None = None
        checked_usage: Usage | None = None
        checked_timings: Timings | None = None
        where = f"{self.endpoint.base}: stream chunk"
        for event in iter_events(_lines(response, self.endpoint)):
            if event.done:
                done = True
                break
            events += 1
            raw = event.json()
            if "error" in raw:
                raise BadAnswer(f"{self.endpoint.base}: the server failed mid-stream: "
                                f"{_error_message(json.dumps(raw).encode())}")
            chunk = parse(StreamChunk, raw, f"{where} {events}")
            if chunk.text(self.kind):
                chunks += 1
                if first is None:
                    first = time.perf_counter()
            if chunk.finish_reason:
                finish = chunk.finish_reason
            if chunk.usage is not None:
                usage, checked_usage = raw["usage"], chunk.usage
            if chunk.timings is not None:
                timings, checked_timings = raw["timings"], chunk.timings
        total = time.perf_counter() - started
        if not done and finish is None:
            raise BadAnswer(f"{self.endpoint.base}: the stream stopped after {events} chunk(s) ({chunks} with text) "
                            "without [DONE] or a finish_reason: cut short, not a measurement")
        if first is None:
            raise BadAnswer(f"{self.endpoint.base}: the stream ended without any generated text "
                            f"(finish_reason {finish!r})")
        prompt_tokens, prompt_source = _prompt_tokens(checked_usage, checked_timings, prompt)
        decode_tokens, decode_source = _decode_tokens(checked_usage, checked_timings, chunks)
        return Trial(ttft_s=first - started, total_s=total, prompt_tokens=prompt_tokens,
                     prompt_tokens_source=prompt_source, decode_tokens=decode_tokens,
                     decode_tokens_source=decode_source, chunks=chunks, finish_reason=finish, usage=usage,
                     timings=timings)


def _lines(response: http.client.HTTPResponse, endpoint: Endpoint) -> Iterator[bytes]:
    while True:
        try:
            line = response.readline()
        except (OSError, http.client.HTTPException) as exc:
            raise BadAnswer(f"{endpoint.base}: the stream broke off: {exc or type(exc).__name__}") from None
        if not line:
            return
        yield line


def _prompt_tokens(usage: Usage | None, timings: Timings | None, prompt: str) -> tuple[int, str]:
    if usage is not None and usage.prompt_tokens:
        return usage.prompt_tokens, "usage"
    if timings is not None and timings.prompt_n is not None:
        return timings.prompt_n + (timings.cache_n or 0), "timings"
    return max(1, round(len(prompt) / 4)), "estimate"


def _decode_tokens(usage: Usage | None, timings: Timings | None, chunks: int) -> tuple[int, str]:
    if usage is not None and usage.completion_tokens is not None:
        return usage.completion_tokens, "usage"
    if timings is not None and timings.predicted_n is not None:
        return timings.predicted_n, "timings"
    return chunks, "chunks"

