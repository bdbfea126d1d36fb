"""What a sweep puts where labwright expects one of its files: something that is no regular file."""

from __future__ import annotations

import os
from pathlib import Path

#: The kinds ``put`` makes: an empty and a full directory, a link to itself, a named pipe nobody writes to (a read
#: that waited on it would hang), a link to nothing.
KINDS = ("directory", "directory with a file", "symlink loop", "fifo", "dangling")


def put(path: Path, kind: str) -> None:
    """Make ``kind`` (one of KINDS) at ``path``, which must not exist."""
    if kind == "symlink loop":
        path.symlink_to(path.name)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "dangling":
        path.symlink_to(path.with_name(path.name + ".nowhere"))
    elif kind in ("directory", "directory with a file"):
        path.mkdir()
        if kind == "directory with a file":
            (path / "x").write_text("x")
    else:
        raise ValueError(f"no such kind: {kind!r} (one of {', '.join(KINDS)})")


def fail_fsync(monkeypatch, failure: BaseException) -> None:
    """Every ``os.fsync`` raises ``failure`` (a full disk, Ctrl-C mid-write)."""
    def fail(*_args: object) -> None:
        raise failure

    monkeypatch.setattr(os, "fsync", fail)


def refused_in_one_line(make, cache: Path) -> str:
    """``make(cache)`` with a regular file where its cache directory goes: one BadInput line naming it (returned)."""
    import pytest

    from labwright.errors import BadInput

    cache.write_text("not a directory")
    with pytest.raises(BadInput) as caught:
        make(cache)
    line = str(caught.value)
    assert "\n" not in line and str(cache) in line, line
    return line
