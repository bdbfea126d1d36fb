"""Time to first audio and total time of an OpenAI-compatible /v1/audio/speech endpoint, as the seed measured.

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

from labwright.errors import BadInput, OperationFailed

FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")
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


def parse_formats(text: str) -> list[str]:
    formats = [f.strip().lower() for f in text.split(",") if f.strip()]
    unknown = [f for f in formats if f not in FORMATS]
    if not formats or unknown:
        raise BadInput(f"--format {text!r}: use a comma-separated list of {', '.join(FORMATS)} (e.g. mp3,pcm,wav)")
    return list(dict.fromkeys(formats))


def speech_url(url: str) -> urllib.parse.SplitResult:
    """The endpoint: a base URL (http://host:8880) gets /v1/audio/speech appended."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadInput(f"--url {url!r}: give the server's URL, e.g. http://127.0.0.1:8880")
    path = parts.path.rstrip("/")
    if not path.endswith("/audio/speech"):
        path = f"{path}/v1/audio/speech" if not path.endswith("/v1") else f"{path}/audio/speech"
    return parts._replace(path=path)


def read_text(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"--text {path}: cannot be read as UTF-8 text ({exc.__class__.__name__})") from exc
    if not text:
        raise BadInput(f"--text {path}: the file is empty; give the text to speak")
    return text


class SpeechError(Exception):
    pass


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
        first: float | None = None
        size = reads = 0
        while True:
            chunk = response.read1(65536)
            if not chunk:
                break
            if first is None:
                first = time.perf_counter() - start
            size += len(chunk)
            reads += 1
        total = time.perf_counter() - start
    except OSError as exc:
        raise SpeechError(f"{exc.__class__.__name__}: {exc}") from exc
    finally:
        conn.close()
    if first is None:
        raise SpeechError("empty body")
    return Sample(first, total, size, reads)


def bench_tts(url: str, text: str, formats: list[str], runs: int = 3, voice: str = "af_heart",
              model: str = "kokoro", api_key: str | None = None, timeout: float = 300,
              progress: object = None) -> list[Result]:
    """Streamed and unstreamed, per format: median first-byte and total time over ``runs`` requests."""
    if runs < 1:
        raise BadInput(f"--runs {runs}: must be at least 1")
    endpoint = speech_url(url)
    results = []
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
            except SpeechError as exc:
                result.error = str(exc)
            if result.samples:
                result.first_ms = round(statistics.median(s.first_s for s in result.samples) * 1000, 1)
                result.total_ms = round(statistics.median(s.total_s for s in result.samples) * 1000, 1)
                result.bytes = result.samples[-1].size
            results.append(result)
    return results
