"""labwright.kokoro.streaming and `labwright kokoro patch` on the Kokoro-FastAPI stand-in's source (both shapes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from labwright.cli import kokoro as kokoro_cli
from labwright.errors import BadInput
from labwright.kokoro.streaming import KOKORO_V1, TTS_SERVICE, plan_streaming, read_tree
from support.kokoro_standin import write_standin_tree

runner = CliRunner()
# The group as labwright mounts it (a lone command of a bare typer app would be collapsed into the app).
parent = typer.Typer()
parent.add_typer(kokoro_cli.app, name=kokoro_cli.NAME)


def cli(*args: str):
    return runner.invoke(parent, ["kokoro", "patch", *args])


@pytest.fixture(params=["explicit", "default"])
def tree(request, tmp_path: Path) -> Path:
    return write_standin_tree(tmp_path / "kokoro", request.param)


def snapshot(root: Path) -> dict[str, str]:
    return {p: (root / p).read_text() for p in (KOKORO_V1, TTS_SERVICE)}


def test_patch_sets_the_sentence_split_and_yield_points(tree):
    change = plan_streaming(read_tree(tree))
    assert change.mode == "patch", change.message
    v1 = next(f.after for f in change.files if f.label == KOKORO_V1)
    assert 'split_pattern=r"(?<=[.!?])\\s+"' in v1 and r"'\n+'" not in v1
    assert v1.count("await asyncio.sleep(0)") == 1 and "\nimport asyncio\n" in v1
    # The yield point directly follows the yield, at its indentation.
    assert "                yield AudioChunk(result.audio)\n                await asyncio.sleep(0)" in v1
    service = next(f.after for f in change.files if f.label == TTS_SERVICE)
    assert service.count("yield chunk_data\n                await asyncio.sleep(0)") == 2
    for file in change.files:
        compile(file.after, file.path, "exec")


def test_era_names_the_shape(tmp_path):
    explicit = plan_streaming(read_tree(write_standin_tree(tmp_path / "a", "explicit")))
    default = plan_streaming(read_tree(write_standin_tree(tmp_path / "b", "default")))
    assert "explicit" in explicit.era and "default" in default.era


def test_cli_applies_once_then_reports_already(tree):
    first = cli("--source", str(tree))
    assert first.exit_code == 0, first.output
    assert "+                await asyncio.sleep(0)" in first.output
    after = snapshot(tree)
    again = cli("--source", str(tree), "--json")
    assert again.exit_code == 0, again.output
    assert json.loads(again.output.splitlines()[-1])["mode"] == "already"
    assert snapshot(tree) == after


def test_dry_run_writes_nothing(tree):
    before = snapshot(tree)
    result = cli("--source", str(tree), "--dry", "--json")
    assert result.exit_code == 0
    data = json.loads(result.output.splitlines()[-1])
    assert data["mode"] == "patch" and len(data["files"]) == 2
    assert "+                await asyncio.sleep(0)" in data["diff"]
    assert snapshot(tree) == before


def test_crlf_files_stay_crlf(tree):
    for rel in (KOKORO_V1, TTS_SERVICE):
        path = tree / rel
        path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
    assert cli("--source", str(tree)).exit_code == 0
    for rel in (KOKORO_V1, TTS_SERVICE):
        data = (tree / rel).read_bytes()
        assert b"sleep(0)" in data and data.count(b"\n") == data.count(b"\r\n")


@pytest.mark.parametrize(("rel", "old", "new", "words"), [
    (KOKORO_V1, "speed=speed", "speed=speed, split_pattern=r'[;]'", "split_pattern=r'[;]', neither the upstream"),
    (KOKORO_V1, "yield AudioChunk(result.audio)", "yield result.audio", "0 `yield AudioChunk(` statements"),
    (KOKORO_V1, "for result in pipeline(", "for result in self._run(", "0 `pipeline(text, ...)` calls"),
    (TTS_SERVICE, "async for chunk_data in self.model_manager.generate(", "async for chunk_data in self.gen(",
     "0 such loops; expected `async for chunk_data in self.model_manager.generate(`"),
])
def test_unrecognised_shape_fails_loudly_and_writes_nothing(tree, rel, old, new, words):
    path = tree / rel
    text = path.read_text()
    if old not in text:  # the default shape has no split_pattern to replace
        old, new = "speed=speed\n", "speed=speed, split_pattern=r'[;]'\n"
    path.write_text(text.replace(old, new))
    before = snapshot(tree)
    result = cli("--source", str(tree))
    assert result.exit_code == 1
    change = plan_streaming(read_tree(tree))
    assert change.mode == "unrecognised" and words in change.message and str(path) in change.message, change.message
    assert "nothing changed" in change.message
    assert snapshot(tree) == before  # neither file, even the one that had a known shape


def test_not_a_checkout_is_bad_input(tmp_path):
    result = cli("--source", str(tmp_path))
    assert isinstance(result.exception, BadInput) and result.exception.exit_code == 2
    with pytest.raises(BadInput, match=r"not a Kokoro-FastAPI checkout \(no api/ directory in it\)"):
        read_tree(tmp_path)


def test_a_checkout_without_the_files_is_unrecognised(tmp_path):
    (tmp_path / "api").mkdir()
    result = cli("--source", str(tmp_path))
    assert result.exit_code == 1
    change = plan_streaming(read_tree(tmp_path))
    assert "api/src/inference/kokoro_v1.py: not found" in change.message


def test_missing_directory_is_bad_input(tmp_path):
    with pytest.raises(BadInput, match="not a directory"):
        read_tree(tmp_path / "absent")
    result = cli("--source", str(tmp_path / "absent"))
    assert result.exit_code != 0 and isinstance(result.exception, BadInput)
