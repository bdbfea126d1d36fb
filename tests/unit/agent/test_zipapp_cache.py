"""The controller's cached agent (``agent-<sha12>.pyz`` under the cache): used only when its bytes are the agent's;
junk there is written again, something that is no file there is one BadInput line, and no temporary file stays."""

from __future__ import annotations

import errno
import io
import tempfile
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labwright.agent import zipapp
from labwright.errors import BadInput
from support import non_files


def target_in(cache: Path) -> Path:
    return cache / f"agent-{zipapp.sha256()[:12]}.pyz"


def assert_no_temporary(cache: Path) -> None:
    if cache.is_dir():
        assert not [p.name for p in cache.iterdir() if p.name.startswith(".") or p.name.endswith(".tmp")]


def assert_the_agent(path: Path) -> None:
    data = path.read_bytes()
    assert data == zipapp.agent()[0]
    names = zipfile.ZipFile(io.BytesIO(data)).namelist()
    assert names[0] == "__main__.py" and "labwright/agent/__main__.py" in names


def assert_one_line(exc: BadInput, path: Path) -> None:
    message = str(exc)
    assert "\n" not in message and str(path) in message and "remove it" in message, message


@pytest.mark.parametrize("junk", ["empty", "truncated", "one byte more", "another zip", "dangling link"])
def test_a_junk_file_is_written_again(tmp_path, junk):
    target = target_in(tmp_path)
    agent = zipapp.agent()[0]
    if junk == "dangling link":
        target.symlink_to(tmp_path / "nowhere")
    else:
        target.write_bytes({"empty": b"", "truncated": agent[: len(agent) // 2], "one byte more": agent + b"\0",
                            "another zip": zipapp.build([("labwright/x.py", b"")])}[junk])
    assert zipapp.local_file(tmp_path) == target
    assert not target.is_symlink()
    assert_the_agent(target)
    assert_no_temporary(tmp_path)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(junk=st.binary(max_size=4096))
def test_any_bytes_there_are_replaced_by_the_agent(junk):
    with tempfile.TemporaryDirectory() as directory:
        cache = Path(directory) / "agent"
        cache.mkdir()
        target_in(cache).write_bytes(junk)
        assert_the_agent(zipapp.local_file(cache))
        assert_no_temporary(cache)


def test_the_right_file_is_kept_as_it_is(tmp_path):
    target = zipapp.local_file(tmp_path)
    before = target.stat()
    assert zipapp.local_file(tmp_path) == target
    after = target.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


@pytest.mark.parametrize("kind", ["directory", "symlink loop", "fifo", "directory with a file"])
def test_no_file_in_its_place_is_one_line(tmp_path, kind):
    target = target_in(tmp_path)
    non_files.put(target, kind)
    with pytest.raises(BadInput) as caught:
        zipapp.local_file(tmp_path)
    assert_one_line(caught.value, target)
    assert_no_temporary(tmp_path)


def test_a_cache_directory_that_is_a_file_is_one_line(tmp_path):
    non_files.refused_in_one_line(zipapp.local_file, tmp_path / "agent")


@pytest.mark.parametrize("failure", [OSError(errno.ENOSPC, "No space left on device"), KeyboardInterrupt()])
def test_a_failed_write_leaves_no_temporary_file(tmp_path, monkeypatch, failure):
    target = target_in(tmp_path)
    target.write_bytes(b"junk")

    non_files.fail_fsync(monkeypatch, failure)
    with pytest.raises(BadInput if isinstance(failure, OSError) else KeyboardInterrupt) as caught:
        zipapp.local_file(tmp_path)
    if isinstance(failure, OSError):
        assert "\n" not in str(caught.value) and str(target) in str(caught.value)
        assert "free space" in str(caught.value)
    assert target.read_bytes() == b"junk"  # untouched: the old content or the new, never a part
    assert_no_temporary(tmp_path)
