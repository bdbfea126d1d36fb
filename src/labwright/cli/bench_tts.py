"""`labwright bench tts`: time to first audio and total time of a /v1/audio/speech endpoint (Kokoro-FastAPI, ...).

cli/bench.py owns the `bench` group; it calls ``register(app)`` to add this command.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from labwright.bench.tts import DEFAULT_FORMATS, bench_tts, check_numbers, parse_formats, read_text, speech_url
from labwright.cli import vocab
from labwright.errors import OperationFailed
from labwright.schema import env
from labwright.ui import Reporter, stdout, table


def tts(
    url: str = typer.Option(..., "--url", callback=vocab.url_option("--url"),
                            help="Server base URL (http://host:8880) or its /v1/audio/speech URL."),
    text: Path = typer.Option(..., "--text", help="UTF-8 file with the text to speak."),
    formats: str = typer.Option(",".join(DEFAULT_FORMATS), "--format", help="Comma-separated response formats."),
    runs: int = typer.Option(3, "--runs", help="Timed requests per format and mode (after one warm-up)."),
    voice: str = typer.Option("af_heart", "--voice", callback=vocab.line_option("--voice"), help="Voice name."),
    model: str = typer.Option("kokoro", "--model", callback=vocab.line_option("--model"),
                              help="Model name sent in the request."),
    timeout: float = typer.Option(300, "--timeout", help="Seconds per request."),
    as_json: bool = typer.Option(False, "--json", help="Print the results as JSON."),
) -> None:
    """Time to first audio chunk and total time, streamed and unstreamed, per format (field note 002's measurement).

    An API key, if the server needs one, is read from $LABWRIGHT_TTS_API_KEY (never from the command line).
    Exit 0: every format measured; 1: a format failed (the others are still shown); 2: bad input.

    Example: labwright bench tts --url http://127.0.0.1:8880 --text hello.txt --format mp3,pcm,wav
    """
    wanted = parse_formats(formats)
    check_numbers(runs, timeout)
    speech_url(url)
    api_key = env.read("LABWRIGHT_TTS_API_KEY")  # checked before the server is contacted
    words = read_text(text)
    report = Reporter(quiet=as_json)
    with report.step(f"{len(wanted)} formats x streamed/unstreamed x {runs} runs against {url}"):
        results = bench_tts(url, words, wanted, runs=runs, voice=voice, model=model,
                            api_key=api_key, timeout=timeout)
    if as_json:
        typer.echo(json.dumps({"url": url, "chars": len(words), "runs": runs,
                               "results": [r.as_json() for r in results]}))
    else:
        rows = [[r.format, "stream" if r.stream else "whole",
                 "-" if r.first_ms is None else f"{r.first_ms:.0f}", "-" if r.total_ms is None else f"{r.total_ms:.0f}",
                 str(r.bytes), r.error or "ok"] for r in results]
        stdout.print(table(f"TTS timings, {len(words)} chars, median of {runs}",
                           ["format", "mode", "first audio ms", "total ms", "bytes", "status"], rows))
    failed = [f"{r.format}/{'stream' if r.stream else 'whole'}: {r.error}" for r in results if r.error]
    if failed:
        raise OperationFailed(f"{len(failed)} measurement(s) failed, first: {failed[0]}")


def register(app: typer.Typer) -> None:
    """Add ``tts`` to the ``bench`` group."""
    app.command("tts")(tts)
