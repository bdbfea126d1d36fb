"""A host over a directory tree: ``TreeHost(root)`` is a :class:`labwright.hosts.local.LocalHost` whose files are
those below ``root`` as if ``root`` were ``/`` (fake ``/proc`` files, ``mknod`` nodes from tests/support/fake_nvidia
and fake_dri, a DKMS tree...), and whose commands are recorded in ``ran``, none run, each answering exit 0: the
systemctl of a boot unit or the nvidia-modprobe before a GPU guest starts must not act on this machine.

``local_path`` maps a path below the tree, so what this machine reads there (the LXD daemon given a device node's
source) is the tree's node; ``realpath`` answers as the host would, below its own ``/``."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from labwright.hosts import Result
from labwright.hosts.local import LocalHost


class TreeHost(LocalHost):
    def __init__(self, root: str | Path, label: str | None = None):
        self.root = Path(root)
        super().__init__(label=label or f"the host tree {self.root}")
        self.ran: list[tuple[str, ...]] = []

    def local_path(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    def realpath(self, path: str) -> str:
        real = Path(os.path.realpath(self.local_path(path)))
        if not real.is_relative_to(self.root):
            return str(real)
        return "/" + "/".join(real.relative_to(self.root).parts)

    def run(self, command: str | Sequence[str], stdin: bytes | str | None = None,
            timeout: float | None = None) -> Result:
        self.ran.append((command,) if isinstance(command, str) else tuple(command))
        return Result(0, "", "")
