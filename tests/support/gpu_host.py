"""GPU host doubles over a fake host tree (tests/support/fake_nvidia, fake_dri): ``GpuHost`` and ``LocalPveNode``
through a :class:`support.host_tree.TreeHost`, which reads the tree's files as the host's and records their commands
(the boot unit's systemctl, nvidia-modprobe before a GPU guest starts) in ``ran``, none run, each answering exit 0."""

from __future__ import annotations

from pathlib import Path

from labwright.gpu.nvidia.host import GpuHost
from labwright.guests.pve_node import LocalPveNode
from support.host_tree import TreeHost


class TreeGpuHost(GpuHost):
    """``GpuHost`` over the tree below ``root``, its commands recorded (``ran``), none run."""

    def __init__(self, root: str | Path):
        self.tree = TreeHost(root)
        super().__init__(self.tree)

    @property
    def root(self) -> Path:
        return self.tree.root

    @property
    def ran(self) -> list[tuple[str, ...]]:
        return self.tree.ran


class TreePveNode(LocalPveNode):
    """``LocalPveNode`` over the node tree below ``root`` (its ``etc/pve`` the simulator's), commands recorded."""

    def __init__(self, root: str | Path, label: str = "node pve1"):
        self.tree = TreeHost(root, label)
        super().__init__(self.tree, label)

    @property
    def root(self) -> Path:
        return self.tree.root

    @property
    def ran(self) -> list[tuple[str, ...]]:
        return self.tree.ran
