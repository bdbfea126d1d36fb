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

from labwright.atomic import previous_path, write_bytes_atomic, write_text_atomic


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
