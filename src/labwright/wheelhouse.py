"""Wheelhouses for guests, built with this machine's pip for the guest's Python and cached.

Guests that cannot reach PyPI (or should not, on every deploy) install with ``pip install --no-index --find-links
DIR``. pip does not evaluate ``python_full_version`` markers for a target Python, so callers add requirements that
only apply below a patch release themselves (see labwright.litellm.wheelhouse).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from labwright import paths
from labwright.errors import BadInput, OperationFailed

PLATFORMS = ["manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64"]


def cache_root() -> Path:
    return paths.cache_root()


def download_wheelhouse(requirements: list[str], python: str, target: Path) -> Path:
    """Wheels for ``requirements`` on CPython ``python`` (e.g. 3.11.2, x86_64) in ``target``; reused while its
    ``.complete`` marker names the same requirements."""
    if not re.fullmatch(r"\d+\.\d+(\.\d+)?", python):
        raise BadInput(f"--python {python!r}: give the guest's Python version, e.g. 3.11.2 (python3 --version)")
    marker = target / ".complete"
    stamp = f"{' '.join(requirements)} for CPython {python}\n"
    if marker.is_file() and marker.read_text() == stamp:
        return target
    target.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--only-binary=:all:",
               "--python-version", python, "--implementation", "cp", "-d", str(target)]
    for platform in PLATFORMS:
        command += ["--platform", platform]
    # No machine pip.conf (extra indexes, constraints): the wheelhouse holds what PyPI serves.
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull}
    proc = subprocess.run([*command, *requirements], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise OperationFailed(f"pip download {' '.join(requirements)} failed: {tail[0]}")
    marker.write_text(stamp)
    return target
