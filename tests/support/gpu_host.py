"""GPU host doubles: ``GpuHost`` and ``LocalPveNode`` over a fake host tree (tests/support/fake_nvidia) read its files
below the root, but their commands (the boot unit's systemctl, nvidia-modprobe before a GPU guest starts) would act
on this machine, not on the tree. ``RecordingShell`` is the ``labwright.hosts.Host`` they run them through instead:
each command is recorded in ``ran``, none runs, each answers exit 0."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from labwright.gpu.nvidia.host import GpuHost
from labwright.guests.pve_node import LocalPveNode
from labwright.hosts import Result


class RecordingShell:
    def __init__(self, label: str = "the host tree"):
        self.label = label
        self.ran: list[tuple[str, ...]] = []

    def run(self, command: str | Sequence[str], stdin: bytes | str | None = None,
            timeout: float | None = None) -> Result:
        self.ran.append((command,) if isinstance(command, str) else tuple(command))
        return Result(0, "", "")


class TreeGpuHost(GpuHost):
    """``GpuHost`` over the tree below ``root``, its commands recorded (``ran``), none run."""

    def __init__(self, root: str | Path):
        self.shell = RecordingShell(f"the host tree {root}")
        super().__init__(root, self.shell)

    @property
    def ran(self) -> list[tuple[str, ...]]:
        return self.shell.ran


class TreePveNode(LocalPveNode):
    """``LocalPveNode`` over the node tree below ``root`` (its ``etc/pve`` the simulator's), commands recorded."""

    def __init__(self, root: str | Path, label: str = "node pve1"):
        self.shell = RecordingShell(label)
        super().__init__(root, label, self.shell)

    @property
    def ran(self) -> list[tuple[str, ...]]:
        return self.shell.ran
