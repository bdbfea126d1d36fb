"""labwright's CLI on a host tree instead of this machine: ``TreeNode`` is the node double (labwright.hostupgrade.node)
that `labwright host upgrade` and `labwright gpu check` act on, its files below a fake NVIDIA host tree
(tests/support/fake_nvidia), the host steps simulated on the tree (support.sim_host.SimulatedHost); a resumed
upgrade runs the node's tools (realhost.CommandHost: the doubles of tests/support/host_tools, when the caller put
them first on PATH). labwright ships none of this; where the CLI is started:

- in this process: ``with on_tree(root): main([...])`` (or the fixtures that do it);
- as a process, as the resume unit's ExecStart does (``resume_command``)::

      PYTHONPATH=tests python -m support.host_cli ROOT host upgrade lwnode1 --resume
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

from labwright.gpu.nvidia.host import GpuHost
from labwright.hostupgrade import node as node_seam
from labwright.hostupgrade.realhost import CommandHost
from labwright.hostupgrade.run import NodeHost
from labwright.hostupgrade.state import HTTPS
from support.gpu_host import TreeGpuHost
from support.host_tree import TreeHost
from support.sim_host import SimulatedHost

TESTS = Path(__file__).resolve().parent.parent


class TreeNode(node_seam.Node):
    """The node below ``root``: it answers to the tree's etc/hostname too, may be acted on by this user, runs nothing
    as root at boot (no root-code check, no pvesh)."""

    def __init__(self, root: str | Path):
        self.root = Path(root).resolve()
        super().__init__(TreeHost(self.root, label="this host"))

    def names(self) -> list[str]:
        names = super().names()
        with contextlib.suppress(OSError):
            names.insert(0, (self.root / "etc/hostname").read_text().strip())
        return list(dict.fromkeys(n for n in names if n))

    def require_root(self) -> None:
        """The tree is this user's."""

    def host(self, repository: Path) -> NodeHost:
        return SimulatedHost(self.root)

    def resume_host(self, repository: Path) -> CommandHost:
        return CommandHost(self.files, repository)

    def check_root_code(self, inventory: Path | None, repository: Path) -> None:
        """Nothing runs as root at boot on a tree."""

    def api_mode(self) -> str:
        return HTTPS

    def gpu_host(self) -> GpuHost:
        return TreeGpuHost(self.root)


@contextlib.contextmanager
def on_tree(root: str | Path) -> Iterator[TreeNode]:
    """The CLI acts on the tree below ``root`` until the block ends."""
    tree = TreeNode(root)
    previous = node_seam.use(tree)
    try:
        yield tree
    finally:
        node_seam.use(previous)


def resume_command(root: str | Path, node: str) -> list[str]:
    """The resume unit's ExecStart on the tree: ``host upgrade NODE --resume`` through this module."""
    return ["/usr/bin/env", f"PYTHONPATH={TESTS}", sys.executable, "-m", "support.host_cli", str(Path(root).resolve()),
            "host", "upgrade", node, "--resume"]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print("usage: python -m support.host_cli ROOT LABWRIGHT-ARGS...", file=sys.stderr)
        return 2
    from labwright.cli import main as cli_main

    with on_tree(args[0]):
        return cli_main(args[1:])


if __name__ == "__main__":
    sys.exit(main())
