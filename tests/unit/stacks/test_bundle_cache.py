"""The cached stack bundle is used only when its bytes are the ones built (its ``.sha256`` record): junk there is
built again, something that is no file there is one BadInput line, and no temporary file stays.

Most tests build a bundle of a few small modules (``inputs`` patched): the real one takes ~3 s to compile; one test
rebuilds the real bundle from a truncated copy and runs it."""

from __future__ import annotations

import errno
import hashlib
import io
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import labwright
from labwright.errors import BadInput
from labwright.stacks import bundle
from support import non_files

PACKAGE = Path(labwright.__file__).parent
SMALL = [("labwright/__init__.py", PACKAGE / "__init__.py"), ("labwright/errors.py", PACKAGE / "errors.py")]


@pytest.fixture
def small(monkeypatch):
    """build_bundle over two small modules: milliseconds, not seconds."""
    monkeypatch.setattr(bundle, "inputs", lambda: list(SMALL))


def built_bytes() -> bytes:
    """What build_bundle builds for the current inputs, built independently of any cache."""
    contents = [(name, path.read_bytes()) for name, path in bundle.inputs()]
    contents = sorted(contents + [(name + "c", bundle.bytecode(name, data)) for name, data in contents
                                  if name.endswith(".py")])
    return bundle.archive(contents)


def assert_no_temporary(cache: Path) -> None:
    if cache.is_dir():
        assert not [p.name for p in cache.iterdir() if p.name.startswith(".") or p.name.endswith(".tmp")]


def assert_small_bundle(path: Path) -> None:
    data = path.read_bytes()
    assert data == built_bytes()
    assert bundle.record_path(path).read_text() == hashlib.sha256(data).hexdigest() + "\n"
    names = zipfile.ZipFile(io.BytesIO(data)).namelist()
    assert names[0] == "__main__.py" and {"labwright/errors.py", "labwright/errors.pyc"} <= set(names)
    code = f"import sys; sys.path.insert(0, {str(path)!r}); import labwright.errors as e; print(e.__file__)"
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith(str(path)), proc.stderr


def assert_one_line(exc: BadInput, path: Path) -> None:
    message = str(exc)
    assert "\n" not in message and str(path) in message and "remove it" in message, message


def place(cache: Path) -> Path:
    """Where build_bundle puts the bundle in ``cache`` (built once to learn the name, then removed)."""
    target = bundle.build_bundle(cache)
    target.unlink()
    bundle.record_path(target).unlink()
    return target


def test_built_once_then_kept(tmp_path, small):
    target = bundle.build_bundle(tmp_path)
    assert_small_bundle(target)
    before = target.stat()
    assert bundle.build_bundle(tmp_path) == target
    after = target.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert_no_temporary(tmp_path)


@pytest.mark.parametrize("junk", ["empty", "truncated", "one byte more", "another zip", "no record",
                                  "junk record", "empty record", "dangling link"])
def test_a_junk_bundle_or_record_is_built_again(tmp_path, small, junk):
    target = place(tmp_path)
    record = bundle.record_path(target)
    good = built_bytes()
    data = {"empty": b"", "truncated": good[: len(good) // 2], "one byte more": good + b"\0",
            "another zip": bundle.archive([("labwright/x.py", b"")])}.get(junk, good)
    if junk == "dangling link":
        target.symlink_to(tmp_path / "nowhere")
    else:
        target.write_bytes(data)
    if junk != "no record":  # else the right record: the bytes are not what it says
        record.write_bytes({"junk record": b"\xff\xfe[1,2]", "empty record": b""}.get(
            junk, hashlib.sha256(good).hexdigest().encode()))
    assert bundle.build_bundle(tmp_path) == target
    assert not target.is_symlink()
    assert_small_bundle(target)
    assert_no_temporary(tmp_path)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(junk=st.binary(max_size=4096), record=st.none() | st.binary(max_size=100))
def test_any_bytes_there_are_replaced_by_the_bundle(small, junk, record):
    with tempfile.TemporaryDirectory() as directory:
        cache = Path(directory)
        target = place(cache)
        target.write_bytes(junk)
        if record is not None:
            bundle.record_path(target).write_bytes(record)
        assert bundle.build_bundle(cache) == target
        assert_small_bundle(target)
        assert_no_temporary(cache)


@pytest.mark.parametrize("where", ["bundle", "record"])
@pytest.mark.parametrize("kind", ["directory", "symlink loop", "fifo"])
def test_no_file_in_its_place_is_one_line(tmp_path, small, where, kind):
    target = place(tmp_path)
    if where == "record":
        target.write_bytes(built_bytes())
    path = target if where == "bundle" else bundle.record_path(target)
    non_files.put(path, "directory with a file" if kind == "directory" else kind)
    with pytest.raises(BadInput) as caught:
        bundle.build_bundle(tmp_path)
    assert_one_line(caught.value, path)
    assert_no_temporary(tmp_path)


def test_a_cache_directory_that_is_a_file_is_one_line(tmp_path, small):
    non_files.refused_in_one_line(bundle.build_bundle, tmp_path / "bundles")


@pytest.mark.parametrize("failure", [OSError(errno.ENOSPC, "No space left on device"), KeyboardInterrupt()])
def test_a_failed_write_leaves_the_old_file_and_no_temporary_one(tmp_path, small, monkeypatch, failure):
    target = place(tmp_path)
    target.write_bytes(b"junk")

    non_files.fail_fsync(monkeypatch, failure)
    with pytest.raises(BadInput if isinstance(failure, OSError) else KeyboardInterrupt) as caught:
        bundle.build_bundle(tmp_path)
    if isinstance(failure, OSError):
        assert "\n" not in str(caught.value) and str(target) in str(caught.value)
    assert target.read_bytes() == b"junk" and not bundle.record_path(target).exists()
    assert_no_temporary(tmp_path)


def test_old_bundles_and_dead_builds_temporaries_go(tmp_path, small):
    old = tmp_path / "labwright-stack-0123456789abcdef.pyz"
    old.write_bytes(b"old")
    bundle.record_path(old).write_text("x\n")
    (tmp_path / "labwright-stack-fedcba9876543210.pyz").mkdir()  # cannot be removed by unlink: stays, no error
    child = subprocess.Popen(["true"])  # a pid that has exited: its build was killed
    child.wait()
    (tmp_path / f".labwright-stack-0123456789abcdef.pyz.{child.pid}.tmp").write_bytes(b"partial")
    live = tmp_path / f".labwright-stack-0123456789abcdef.pyz.{os.getppid()}.tmp"  # its writer still runs
    live.write_bytes(b"partial")
    target = bundle.build_bundle(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [target.name, bundle.record_path(target).name, "labwright-stack-fedcba9876543210.pyz", live.name])


def test_the_real_bundle_rebuilt_from_a_truncated_copy_runs(tmp_path):
    target = bundle.build_bundle(tmp_path)
    good = target.read_bytes()
    target.write_bytes(good[:1000])
    assert bundle.build_bundle(tmp_path) == target
    assert target.read_bytes() == good
    assert zipfile.ZipFile(target).testzip() is None
    proc = subprocess.run([sys.executable, "-I", "-S", str(target), "show", "--venv", str(tmp_path / "nothing"),
                           "--root", str(tmp_path / "root")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "(absent)" in proc.stdout, proc.stderr
    assert_no_temporary(tmp_path)
