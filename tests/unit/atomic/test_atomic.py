"""labwright.atomic: old or new content, never a mix, even when the writer is SIGKILLed mid-write."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from labwright.atomic import previous_path, write_bytes_atomic, write_files_atomic, write_text_atomic


def test_writes_new_file_with_umask_mode(tmp_path: Path) -> None:
    target = tmp_path / "config.yml"
    write_text_atomic(target, "a: 1\n")
    assert target.read_text() == "a: 1\n"
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o644 & ~umask
    assert not previous_path(target).exists()


def test_keeps_mode_of_replaced_file_and_previous_content(tmp_path: Path) -> None:
    target = tmp_path / "secret.env"
    target.write_text("KEY=old\n")
    target.chmod(0o600)
    write_text_atomic(target, "KEY=new\n", keep_previous=True)
    assert target.read_text() == "KEY=new\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert previous_path(target).read_text() == "KEY=old\n"
    write_text_atomic(target, "KEY=newer\n", keep_previous=True)
    assert previous_path(target).read_text() == "KEY=new\n"


def test_no_previous_kept_unless_asked(tmp_path: Path) -> None:
    target = tmp_path / "f"
    target.write_text("1")
    write_text_atomic(target, "2")
    assert not previous_path(target).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


def test_failure_leaves_target_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "f"
    target.write_text("old")

    with pytest.raises(TypeError):
        write_bytes_atomic(target, "not bytes")  # type: ignore[arg-type]
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


def test_missing_directory_raises_and_writes_nothing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        write_text_atomic(tmp_path / "nope" / "f", "x")
    assert list(tmp_path.iterdir()) == []


def test_orphan_temporary_of_a_dead_writer_is_removed(tmp_path: Path) -> None:
    target = tmp_path / "matrix.toml"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    orphan = tmp_path / f".matrix.toml.labwright.{dead.stdout.strip()}.abcd1234"
    orphan.write_text("half")
    other = tmp_path / ".other.labwright.1.x"  # another target's temporary: not ours to remove
    other.write_text("x")
    write_text_atomic(target, "new")
    assert not orphan.exists()
    assert other.exists()


WRITER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from labwright.atomic import write_bytes_atomic
    target = Path(sys.argv[1])
    contents = [b"A" * (8 << 20), b"B" * (8 << 20)]
    i = 0
    while True:
        sys.stdout.write(f"start {i}\\n")
        sys.stdout.flush()
        write_bytes_atomic(target, contents[i % 2], keep_previous=True)
        i += 1
""")


@pytest.mark.parametrize("round_", range(12))
def test_sigkill_mid_write_leaves_old_or_new(tmp_path: Path, round_: int) -> None:
    """Kill the writer right after it announces write number k (it is then inside write_bytes_atomic, writing 8 MiB):
    the target is whole A or whole B, and the previous copy too."""
    target = tmp_path / "big.bin"
    target.write_bytes(b"B" * (8 << 20))
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(target)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    wanted = 1 + round_ % 4
    for line in proc.stdout:
        if line.strip() == f"start {wanted}":
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    for path in (target, previous_path(target)):
        if path.exists():
            data = path.read_bytes()
            assert len(data) == 8 << 20, f"{path.name} is {len(data)} bytes: a partial file"
            assert data in (b"A" * (8 << 20), b"B" * (8 << 20)), f"{path.name} mixes old and new content"
    write_bytes_atomic(target, b"after")  # the next write cleans what the killed one left
    leftovers = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("."))
    assert leftovers == [], leftovers


def test_several_files_are_all_or_none_on_a_write_error(tmp_path: Path) -> None:
    first, second = tmp_path / "kokoro_v1.py", tmp_path / "gone" / "tts_service.py"
    first.write_text("old")
    with pytest.raises(FileNotFoundError) as raised:
        write_files_atomic({first: b"new", second: b"new"}, keep_previous=True)
    assert raised.value.filename == str(second)          # the file named, not the temporary beside it
    assert first.read_text() == "old" and not previous_path(first).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kokoro_v1.py"]


MULTI_WRITER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from labwright.atomic import write_files_atomic
    targets = [Path(name) for name in sys.argv[1:]]
    i = 0
    while True:
        sys.stdout.write(f"start {i}\\n")
        sys.stdout.flush()
        write_files_atomic({t: (b"AB"[i % 2:i % 2 + 1]) * (4 << 20) for t in targets}, keep_previous=True)
        i += 1
""")


@pytest.mark.parametrize("round_", range(6))
def test_sigkill_while_writing_several_files_leaves_each_whole(tmp_path: Path, round_: int) -> None:
    """What `kokoro patch` writes (two files): killed at any moment, each file is whole, old or new."""
    targets = [tmp_path / "kokoro_v1.py", tmp_path / "tts_service.py"]
    for target in targets:
        target.write_bytes(b"B" * (4 << 20))
    proc = subprocess.Popen([sys.executable, "-c", MULTI_WRITER, *map(str, targets)], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.strip() == f"start {1 + round_ % 3}":
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    for path in [*targets, *map(previous_path, targets)]:
        if path.exists():
            data = path.read_bytes()
            assert data in (b"A" * (4 << 20), b"B" * (4 << 20)), f"{path.name}: {len(data)} bytes, partial or mixed"
    write_files_atomic({t: b"after" for t in targets})  # the next write cleans what the killed one left
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []
