"""The seed's Kokoro streaming fix, measured with a real HTTP client against the Kokoro-FastAPI STAND-IN.

Kokoro's weights cannot be downloaded here: support.kokoro_standin writes a FastAPI app with Kokoro's
layout and generator/StreamingResponse shape whose "inference" blocks the event loop per call, like ONNX does.
Served by a real uvicorn on 127.0.0.1; `labwright kokoro patch` edits its source between the two measurements;
`labwright bench tts` (mounted through register() on a fresh typer app) does the timing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from labwright.bench.tts import bench_tts
from labwright.cli import bench_tts as bench_tts_cli
from labwright.cli import kokoro as kokoro_cli
from support.kokoro_standin import serve, write_standin_tree

# The seed's two-sentence test phrase: a short first sentence, a long second one.
PHRASE = "Hi Mediclinic.  Your EHR project sounds interesting and has the potential for a lot of impact."
runner = CliRunner()


def bench_app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def _bench() -> None:
        """bench (test stand-in for the lead's cli/bench.py group)."""

    bench_tts_cli.register(app)
    return app


def patch(root: Path) -> None:
    parent = typer.Typer()
    parent.add_typer(kokoro_cli.app, name="kokoro")
    result = runner.invoke(parent, ["kokoro", "patch", "--source", str(root)])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(("shape", "formats"), [("explicit", ["pcm", "wav"]), ("default", ["pcm"])])
def test_patch_cuts_time_to_first_audio_on_the_kokoro_standin(tmp_path, shape, formats):
    root = write_standin_tree(tmp_path / "kokoro", shape)
    with serve(root) as url:
        before = {(r.format, r.stream): r for r in bench_tts(url, PHRASE, formats, runs=2)}
    patch(root)
    with serve(root) as url:
        after = {(r.format, r.stream): r for r in bench_tts(url, PHRASE, formats, runs=2)}
    for fmt in formats:
        old, new = before[(fmt, True)], after[(fmt, True)]
        assert not old.error and not new.error, (old.error, new.error)
        print(f"\n{shape} {fmt} stream: first audio {old.first_ms} -> {new.first_ms} ms, "
              f"total {old.total_ms} -> {new.total_ms} ms")
        # Before: one inference call for both sentences, so the first bytes come with the last.
        assert old.first_ms is not None and old.total_ms is not None
        assert old.first_ms > 0.8 * old.total_ms
        # After: the first sentence is sent while the second is synthesized; total work is unchanged.
        assert new.first_ms is not None and new.total_ms is not None
        assert new.first_ms < 0.5 * old.first_ms
        assert new.first_ms < 0.5 * new.total_ms
        assert abs(new.total_ms - old.total_ms) < 0.5 * old.total_ms
        # Unstreamed requests wait for everything either way.
        whole = after[(fmt, False)]
        assert whole.first_ms is not None and whole.first_ms > 0.8 * (whole.total_ms or 0)
        # The same audio streamed or not; the split only drops the whitespace between sentences from synthesis.
        assert new.bytes == whole.bytes and abs(new.bytes - old.bytes) < 0.02 * old.bytes


def test_bench_tts_cli_json_and_table(tmp_path):
    root = write_standin_tree(tmp_path / "kokoro")
    text = tmp_path / "phrase.txt"
    text.write_text(PHRASE)
    app = bench_app()
    with serve(root) as url:
        result = runner.invoke(app, ["tts", "--url", url, "--text", str(text), "--format", "pcm,wav", "--runs", "1",
                                     "--json"])
        assert result.exit_code == 0, result.output
        data = json.loads(result.stdout.strip().splitlines()[-1])
        assert [(r["format"], r["stream"]) for r in data["results"]] == [
            ("pcm", True), ("pcm", False), ("wav", True), ("wav", False)]
        assert all(r["first_ms"] > 0 and r["total_ms"] >= r["first_ms"] and r["bytes"] > 0 for r in data["results"])
        # WAV carries a 44-byte header on top of the same samples.
        assert data["results"][2]["bytes"] == data["results"][0]["bytes"] + 44
        # The stand-in has no MP3 encoder: that format is reported as failed, the others still measured, exit 1.
        table = runner.invoke(app, ["tts", "--url", url, "--text", str(text), "--format", "mp3,pcm", "--runs", "1"])
        assert table.exit_code != 0
        assert "HTTP 400" in str(table.exception) and "mp3/stream" in str(table.exception)
        assert "first audio ms" in table.stdout and "pcm" in table.stdout


@pytest.mark.parametrize(("args", "words"), [
    (["--format", "ogg"], "--format 'ogg'"),
    (["--url", "ftp://x"], "--url 'ftp://x'"),
    (["--runs", "0"], "--runs 0"),
])
def test_bench_tts_bad_input(tmp_path, args, words):
    text = tmp_path / "phrase.txt"
    text.write_text(PHRASE)
    base = {"--url": "http://127.0.0.1:9", "--text": str(text)}
    for i in range(0, len(args), 2):
        base[args[i]] = args[i + 1]
    result = runner.invoke(bench_app(), ["tts", *[w for pair in base.items() for w in pair]])
    assert result.exit_code != 0 and words in str(result.exception), (result.output, result.exception)
    assert getattr(result.exception, "exit_code", None) == 2


def test_bench_tts_empty_text_file_is_bad_input(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n")
    result = runner.invoke(bench_app(), ["tts", "--url", "http://127.0.0.1:9", "--text", str(empty)])
    assert "the file is empty" in str(result.exception)
