"""Time to first audio and total time of an OpenAI-compatible /v1/audio/speech endpoint, as field note 002 measured.

For each format, the same text is requested with ``stream: true`` and ``stream: false``; a run records when the
first body bytes arrive (read with ``read1``, so whatever the server has flushed counts at once) and when the body
ends. Medians over ``runs`` requests per (format, mode); a format the server refuses is reported, not fatal.
"""

from __future__ import annotations

import http.client
import json
import ssl
import statistics
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from labwright import textio
from labwright.errors import BadInput, OperationFailed

FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")
MAX_TEXT_BYTES = 1024 * 1024  # a book chapter; more is not one speech request
DEFAULT_FORMATS = ("mp3", "pcm", "wav")


@dataclass(frozen=True)
class Sample:
    first_s: float
    total_s: float
    size: int
    reads: int


@dataclass
class Result:
    format: str
    stream: bool
    runs: int
    first_ms: float | None = None
    total_ms: float | None = None
    bytes: int = 0
    error: str = ""
    samples: list[Sample] = field(default_factory=list)

    def as_json(self) -> dict[str, object]:
        data = asdict(self)
        data["samples"] = [asdict(s) for s in self.samples]
        return data


MAX_RUNS = 1000
MAX_TIMEOUT_S = 86400.0


def check_numbers(runs: int, timeout: float) -> None:
    if not 1 <= runs <= MAX_RUNS:
        raise BadInput(f"--runs {runs}: give 1 to {MAX_RUNS} timed requests per format and mode (e.g. 3)")
    if not 0 < timeout <= MAX_TIMEOUT_S:  # also NaN
        raise BadInput(f"--timeout {timeout:g}: give the seconds to wait per request, more than 0 and at most "
                       f"{MAX_TIMEOUT_S:,.0f} (e.g. 300)")


def parse_formats(text: str) -> list[str]:
    formats = [f.strip().lower() for f in text.split(",") if f.strip()]
    unknown = [f for f in formats if f not in FORMATS]
    if not formats or unknown:
        raise BadInput(f"--format {text!r}: use a comma-separated list of {', '.join(FORMATS)} (e.g. mp3,pcm,wav)")
    return list(dict.fromkeys(formats))


def speech_url(url: str) -> urllib.parse.SplitResult:
    """The endpoint: a base URL (http://host:8880) gets /v1/audio/speech appended."""
    # The shared URL check (labwright.schema.checks.url): scheme, a real host, a port 1-65535, no control characters.
    from labwright.schema.checks import url as checked_url

    try:
        parts = urllib.parse.urlsplit(checked_url(url))
    except ValueError as exc:
        raise BadInput(f"--url {exc}; give the server's URL, e.g. http://127.0.0.1:8880") from None
    path = parts.path.rstrip("/")
    if not path.endswith("/audio/speech"):
        path = f"{path}/v1/audio/speech" if not path.endswith("/v1") else f"{path}/audio/speech"
    return parts._replace(path=path)


def read_text(path: Path) -> str:
    # Missing, a directory, binary, not UTF-8, too large: one line naming the file (labwright.textio).
    text = textio.read_text(path, "the UTF-8 text to speak (--text)", max_bytes=MAX_TEXT_BYTES).strip()
    if not text:
        raise BadInput(f"--text {path}: the file is empty; give the text to speak")
    return text


class SpeechError(Exception):
    pass


class NotAudio(SpeechError):
    """A 200 answer that is a web page or JSON, not audio: --url points somewhere else."""


def not_audio_type(content_type: str) -> bool:
    """text/html, application/json, anything textual: never a speech body (Kokoro-FastAPI: audio/mpeg, audio/wav,
    audio/pcm ...; some servers send application/octet-stream or nothing, which is left to the bytes)."""
    return (content_type.startswith("text/") or content_type.endswith(("json", "xml", "html"))
            or content_type in ("application/javascript", "application/xhtml+xml"))


def looks_like_text(head: bytes) -> bool:
    """The first bytes of a body that is a document (HTML, XML, JSON), whatever its Content-Type said."""
    start = head.lstrip()[:16].lower()
    return start.startswith((b"<!doctype", b"<html", b"<?xml", b"<head", b"<body", b"{\"", b"[{"))


def request_once(url: urllib.parse.SplitResult, payload: Mapping[str, object], api_key: str | None,
                 timeout: float) -> Sample:
    """One POST; times measured from just before the request is sent."""
    port = url.port or (443 if url.scheme == "https" else 80)
    host = url.hostname or ""
    conn: http.client.HTTPConnection
    if url.scheme == "https":
        conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=ssl.create_default_context())
    else:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
    headers = {"Content-Type": "application/json", "Accept": "*/*"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    body = json.dumps(payload).encode()
    try:
        conn.connect()
    except OSError as exc:
        conn.close()
        reason = getattr(exc, "strerror", None) or str(exc) or exc.__class__.__name__
        raise OperationFailed(f"{url.scheme}://{url.netloc}{url.path} unreachable ({reason}); is the TTS server "
                              "running there? check --url") from None
    try:
        start = time.perf_counter()
        conn.request("POST", url.path + (f"?{url.query}" if url.query else ""), body=body, headers=headers)
        response = conn.getresponse()
        if response.status != 200:
            detail = response.read(300).decode(errors="replace").strip().replace("\n", " ")
            raise SpeechError(f"HTTP {response.status}: {detail}")
        from labwright.bench.answers import BadAnswer, SpeechHeaders, parse

        try:
            answer = parse(SpeechHeaders, {"content_type": response.getheader("Content-Type"),
                                            "content_length": response.getheader("Content-Length")},
                           "the answer's headers")
        except BadAnswer as exc:
            raise SpeechError(str(exc)) from None
        content_type = answer.media_type
        if not_audio_type(content_type):
            raise NotAudio(f"the server answered {content_type}, not audio")
        first: float | None = None
        size = reads = 0
        while True:
            chunk = response.read1(65536)
            if not chunk:
                break
            if first is None:
                first = time.perf_counter() - start
                if looks_like_text(chunk):
                    raise NotAudio(f"the server answered a document starting {chunk[:24]!r}, not audio")
            size += len(chunk)
            reads += 1
        total = time.perf_counter() - start
    except (OSError, http.client.HTTPException) as exc:  # a reset, a timeout, a chunked body cut short
        raise SpeechError(f"the body broke off after {size:,} bytes: {exc.__class__.__name__}: {exc}") from None
    finally:
        conn.close()
    if first is None:
        raise SpeechError("empty body")
    if answer.content_length is not None and size != answer.content_length:
        # http.client ends a Content-Length body quietly when the connection closes early: count what came.
        raise SpeechError(f"the body has {size:,} of {answer.content_length:,} announced bytes (Content-Length): "
                          "cut short, not a measurement")
    return Sample(first, total, size, reads)


def bench_tts(url: str, text: str, formats: list[str], runs: int = 3, voice: str = "af_heart",
              model: str = "kokoro", api_key: str | None = None, timeout: float = 300,
              progress: object = None) -> list[Result]:
    """Streamed and unstreamed, per format: median first-byte and total time over ``runs`` requests."""
    check_numbers(runs, timeout)
    endpoint = speech_url(url)
    results: list[Result] = []
    for fmt in formats:
        for stream in (True, False):
            result = Result(fmt, stream, runs)
            payload = {"model": model, "input": text, "voice": voice, "response_format": fmt, "stream": stream}
            try:
                # One unrecorded warm-up request: the first request of a server loads voices and pipelines.
                request_once(endpoint, payload, api_key, timeout)
                for _ in range(runs):
                    result.samples.append(request_once(endpoint, payload, api_key, timeout))
                    if callable(progress):
                        progress()
            except NotAudio as exc:
                if not results and not result.samples:  # the very first answer: the URL is not a TTS server
                    raise BadInput(f"--url {url}: {exc} ({fmt}); point --url at the TTS server (e.g. "
                                   "http://127.0.0.1:8880 or its /v1/audio/speech URL)") from None
                result.error = str(exc)
            except SpeechError as exc:
                result.error = " ".join(str(exc).split())
            if result.error:  # an error row, never a measurement: no medians of the runs before the failure
                result.samples.clear()
            if result.samples:
                result.first_ms = round(statistics.median(s.first_s for s in result.samples) * 1000, 1)
                result.total_ms = round(statistics.median(s.total_s for s in result.samples) * 1000, 1)
                result.bytes = result.samples[-1].size
            results.append(result)
    return results
