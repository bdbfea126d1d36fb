"""Writes that never leave a partial file: write beside the target, then rename(2) over it (atomic on one filesystem).

The way PVE writes pmxcfs files (PVE::Tools::file_set_contents) and the way labwright writes every file it owns.
"""

from __future__ import annotations

import os
from pathlib import Path


def write_text_atomic(target: Path, text: str) -> None:
    """Replace ``target`` with ``text``: a reader sees the old content or the new, never a mix; on failure the
    temporary file is removed and the OSError goes up."""
    tmp = target.with_name(f".{target.name}.labwright.{os.getpid()}")
    try:
        with tmp.open("w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
