"""Shared by the host-tool doubles in this directory: the host tree they act on, and refusing to act without one.

The doubles stand in for tools that change a real host (NVIDIA's installer, dkms, proxmox-boot-tool, systemctl);
each acts only below ``$LW_FAKE_ROOT`` (a host tree from tests/support/fake_nvidia) and exits 1 when it is unset,
so a double that leaks onto PATH outside a test changes nothing.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def fake_root(tool: str) -> Path:
    root = os.environ.get("LW_FAKE_ROOT", "")
    if not root or not Path(root).is_dir() or Path(root).resolve() == Path("/"):
        print(f"{tool} (labwright test double): LW_FAKE_ROOT is not a host tree; refusing to act on this machine",
              file=sys.stderr)
        sys.exit(1)
    return Path(root)


def under(root: Path, path: str) -> Path:
    return root / path.lstrip("/")


def sim(root: Path, name: str) -> Path:
    """A switch or record of the simulation (``labwright-sim/NAME``), never a file the real tool knows."""
    return root / "labwright-sim" / name


def read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
