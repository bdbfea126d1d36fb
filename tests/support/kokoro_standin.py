"""A STAND-IN for Kokoro-FastAPI: the same file layout and generator/StreamingResponse shape, no model.

Kokoro's weights cannot be downloaded here, so this writes a small FastAPI app laid out like Kokoro-FastAPI's
``api/src`` (inference/kokoro_v1.py, services/tts_service.py, main.py) with the two spots the seed fixed in the
shape they have upstream:

- ``KokoroV1.generate`` runs ``for result in pipeline(text, ..., split_pattern=r'\\n+')`` synchronously inside an
  async generator and ``yield AudioChunk(...)`` per result (shape "explicit", the seed's); shape "default" passes no
  split_pattern, as later upstream code does, and the stand-in pipeline defaults to ``r'\\n+'`` like KPipeline;
- ``TTSService._process_chunk`` re-yields each chunk from ``async for chunk_data in self.model_manager.generate(``,
  after ``smart_split`` batched short sentences into one chunk (under 250 "tokens", as upstream);
- ``POST /v1/audio/speech`` returns a ``StreamingResponse`` for ``stream: true`` and a whole body otherwise.

The stand-in "inference" blocks the event loop (``time.sleep``) for a fixed cost per call plus a cost per
character, as ONNX inference holds the loop in the real server, and returns 16-bit PCM at 24 kHz. Formats: pcm,
and wav (a streaming header with unknown size before the first samples). It has no MP3 encoder and answers 400 for
mp3. Costs come from LABWRIGHT_STANDIN_CALL_MS / LABWRIGHT_STANDIN_CHAR_MS (defaults below).

    python -m support.kokoro_standin DIR [--shape explicit|default]   # write the tree
    cd DIR && python -m uvicorn api.src.main:app --port 8880
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

CALL_MS = 20
CHAR_MS = 5

KOKORO_V1 = '''"""STAND-IN for Kokoro-FastAPI's KokoroV1 backend (support.kokoro_standin)."""

from typing import AsyncGenerator

from .base import AudioChunk
from .standin_pipeline import StandInPipeline


class KokoroV1:
    def __init__(self):
        self._pipelines = {}

    def _get_pipeline(self, lang_code: str) -> StandInPipeline:
        if lang_code not in self._pipelines:
            self._pipelines[lang_code] = StandInPipeline(lang_code)
        return self._pipelines[lang_code]

    async def generate(self, text: str, voice: str, speed: float = 1.0) -> AsyncGenerator[AudioChunk, None]:
        pipeline = self._get_pipeline(voice[:1])
        for result in pipeline(
            text, voice=voice, speed=speed@SPLIT@
        ):
            if result.audio is not None:
                yield AudioChunk(result.audio)
'''

PIPELINE = '''"""STAND-IN for kokoro.KPipeline: splits like it, "synthesizes" by blocking the event loop, no model."""

import math
import os
import re
import time
from dataclasses import dataclass

RATE = 24000
CALL_S = float(os.environ.get("LABWRIGHT_STANDIN_CALL_MS", "@CALL_MS@")) / 1000
CHAR_S = float(os.environ.get("LABWRIGHT_STANDIN_CHAR_MS", "@CHAR_MS@")) / 1000
# One period of a 200 Hz tone (120 samples at 24 kHz), 16-bit little-endian.
PERIOD = b"".join(int(8000 * math.sin(2 * math.pi * n / 120)).to_bytes(2, "little", signed=True) for n in range(120))


@dataclass
class Result:
    graphemes: str
    audio: bytes | None


class StandInPipeline:
    def __init__(self, lang_code: str):
        self.lang_code = lang_code

    def __call__(self, text, voice=None, speed=1.0, split_pattern=r"\\n+", model=None):
        pieces = [p for p in re.split(split_pattern, text)] if split_pattern else [text]
        for piece in pieces:
            piece = piece.strip()
            if not piece:
                continue
            time.sleep(CALL_S + CHAR_S * len(piece))  # synchronous, like ONNX inference
            samples = int(RATE * 0.06 * len(piece) / max(speed, 0.1))
            yield Result(piece, (PERIOD * (samples // 120 + 1))[:2 * samples])
'''

BASE = '''"""STAND-IN for Kokoro-FastAPI's inference/base.py."""


class AudioChunk:
    def __init__(self, audio: bytes, output: bytes = b""):
        self.audio = audio
        self.output = output
'''

TTS_SERVICE = '''"""STAND-IN for Kokoro-FastAPI's TTSService: smart_split batching, per-chunk re-yield."""

import re
import struct
from typing import AsyncGenerator

from ..inference.base import AudioChunk
from ..inference.kokoro_v1 import KokoroV1

MAX_TOKENS = 250


def smart_split(text: str):
    """Sentences, batched while under MAX_TOKENS (a character counts as a token here), as upstream batches them."""
    batch = ""
    for sentence in re.split(r"(?<=[.!?])\\s+", text.strip()):
        if batch and len(batch) + len(sentence) + 1 > MAX_TOKENS:
            yield batch
            batch = sentence
        else:
            batch = f"{batch} {sentence}" if batch else sentence
    if batch:
        yield batch


def wav_header(rate: int = 24000) -> bytes:
    size = 0xFFFFFFFF  # streaming: unknown length
    return (b"RIFF" + struct.pack("<I", size) + b"WAVEfmt " + struct.pack("<IHHIIHH", 16, 1, 1, rate, rate * 2, 2, 16)
            + b"data" + struct.pack("<I", size))


class ModelManager:
    def __init__(self):
        self.backend = KokoroV1()

    async def generate(self, text: str, voice: str, speed: float = 1.0) -> AsyncGenerator[AudioChunk, None]:
        async for chunk in self.backend.generate(text, voice, speed):
            yield chunk


class TTSService:
    def __init__(self):
        self.model_manager = ModelManager()

    async def _process_chunk(self, chunk_text: str, voice: str, speed: float, output_format: str,
                             state: dict) -> AsyncGenerator[AudioChunk, None]:
        async for chunk_data in self.model_manager.generate(
            chunk_text,
            voice,
            speed=speed,
        ):
            if output_format == "wav" and not state.get("header"):
                state["header"] = True
                chunk_data.output = wav_header() + chunk_data.audio
                yield chunk_data
            else:
                chunk_data.output = chunk_data.audio
                yield chunk_data

    async def generate_audio_stream(self, text: str, voice: str, output_format: str = "wav",
                                    speed: float = 1.0) -> AsyncGenerator[AudioChunk, None]:
        state: dict = {}
        for chunk_text in smart_split(text):
            async for chunk in self._process_chunk(chunk_text, voice, speed, output_format, state):
                yield chunk
'''

MAIN = '''"""STAND-IN for Kokoro-FastAPI's app (support.kokoro_standin): /v1/audio/speech, /health."""

from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel

from .services.tts_service import TTSService

MEDIA = {"pcm": "audio/pcm", "wav": "audio/wav"}
app = FastAPI(title="Kokoro-FastAPI STAND-IN")
service = TTSService()


class SpeechRequest(BaseModel):
    model: str = "kokoro"
    input: str
    voice: str = "af_heart"
    response_format: str = "mp3"
    speed: float = 1.0
    stream: bool = True


@app.get("/health")
async def health():
    return {"status": "healthy", "standin": True}


@app.post("/v1/audio/speech")
async def create_speech(request: SpeechRequest):
    if request.response_format not in MEDIA:
        return JSONResponse({"error": f"the stand-in has no {request.response_format} encoder (pcm, wav only)"},
                            status_code=400)
    chunks = service.generate_audio_stream(request.input, request.voice, request.response_format, request.speed)
    if request.stream:
        async def body():
            async for chunk in chunks:
                if chunk.output:
                    yield chunk.output

        return StreamingResponse(body(), media_type=MEDIA[request.response_format],
                                 headers={"X-Accel-Buffering": "no", "Cache-Control": "no-cache"})
    data = b"".join([chunk.output async for chunk in chunks])
    return Response(data, media_type=MEDIA[request.response_format])
'''

PYPROJECT = """[project]
name = "kokoro-fastapi-standin"
version = "0.0.0"
description = "STAND-IN for Kokoro-FastAPI (support.kokoro_standin): its layout, no model"
dependencies = ["fastapi", "uvicorn"]

[project.optional-dependencies]
cpu = []
gpu = []
"""
REQUIREMENTS = ["fastapi", "uvicorn"]

SPLITS = {"explicit": ", split_pattern=r'\\n+'", "default": ""}


def write_standin_tree(root: Path, shape: str = "explicit") -> Path:
    """Write the stand-in's source tree under ``root`` (the directory holding api/) and return ``root``."""
    if shape not in SPLITS:
        raise ValueError(f"shape {shape!r} is not one of {', '.join(SPLITS)}")
    files = {
        "api/__init__.py": "",
        "api/src/__init__.py": "",
        "api/src/inference/__init__.py": "",
        "api/src/services/__init__.py": "",
        "api/src/inference/base.py": BASE,
        "api/src/inference/standin_pipeline.py": PIPELINE.replace("@CALL_MS@", str(CALL_MS)).replace(
            "@CHAR_MS@", str(CHAR_MS)),
        "api/src/inference/kokoro_v1.py": KOKORO_V1.replace("@SPLIT@", SPLITS[shape]),
        "api/src/services/tts_service.py": TTS_SERVICE,
        "api/src/main.py": MAIN,
        "pyproject.toml": PYPROJECT,
    }
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def serve(root: Path, port: int | None = None, env: dict[str, str] | None = None,
          timeout: float = 20) -> Iterator[str]:
    """Run the tree under uvicorn on 127.0.0.1; yields the base URL; stops the server afterwards."""
    port = port or free_port()
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "api.src.main:app", "--host", "127.0.0.1", "--port",
                             str(port), "--log-level", "warning"], cwd=root, env={**os.environ, **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                output = proc.communicate()[0]
                raise RuntimeError(f"kokoro stand-in did not come up on {url}:\n{output[-2000:]}")
            time.sleep(0.1)
        yield url
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stdout:
            proc.stdout.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write the Kokoro-FastAPI stand-in source tree.")
    parser.add_argument("root", type=Path)
    parser.add_argument("--shape", choices=sorted(SPLITS), default="explicit")
    args = parser.parse_args(argv)
    write_standin_tree(args.root, args.shape)
    print(args.root)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
