"""The node `labwright host upgrade` and `labwright gpu check` act on: this machine.

``Node`` is what those commands need of it: its files (``files``: this machine's ``LocalHost``), the names it answers
to, its own tools for the host steps (realhost.CommandHost), whether this run may act on it (root), the checks of the
code its boot unit runs as root (trust.py), how a resumed Proxmox upgrade reaches the API (pve.node_api_mode), and
its NVIDIA facts (GpuHost). ``this_node()`` is the one the CLI uses; tests put a double over a host tree in its place
with ``use`` (tests/support/host_cli.py, which labwright does not ship).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from labwright.errors import BadInput
from labwright.gpu.nvidia.host import VERSION_FILE, GpuHost
from labwright.hosts.local import LocalHost
from labwright.hostupgrade.realhost import CommandHost
from labwright.hostupgrade.run import NodeHost
from labwright.hostupgrade.trust import check_root_code


class Node:
    """This machine: its files, its own tools."""

    def __init__(self, files: LocalHost | None = None):
        self.files = files if files is not None else LocalHost(label="this host")

    def names(self) -> list[str]:
        """The names this host answers to: its host name (short and full), localhost."""
        names = [socket.gethostname(), socket.gethostname().split(".")[0], "localhost"]
        return list(dict.fromkeys(n for n in names if n))

    def require_root(self) -> None:
        """BadInput unless this run may install a driver and reboot the node."""
        if os.geteuid() != 0:
            raise BadInput("host upgrade on this host installs a driver and reboots: run it as root (sudo)")

    def require_driver(self) -> None:
        """BadInput when no NVIDIA driver is loaded: there is nothing to carry the guests from."""
        info = self.files.stat(VERSION_FILE)
        if info is None or not info.is_file:
            version = self.files.local_path(VERSION_FILE)
            raise BadInput(f"this host has no NVIDIA driver loaded (no {version}); host upgrade carries GPU guests "
                           "from a loaded driver to a new one: run it on the GPU node (install the driver first on "
                           "a new one)")

    def host(self, repository: Path) -> NodeHost:
        """The host side of a new upgrade: the node's own tools."""
        return CommandHost(self.files, repository)

    def resume_host(self, repository: Path) -> CommandHost:
        """The host side of a resumed upgrade (only a run on the node's own tools saves a state to resume)."""
        return CommandHost(self.files, repository)

    def check_root_code(self, inventory: Path | None, repository: Path) -> None:
        """What the boot unit runs as root is root's alone (trust.py)."""
        check_root_code(inventory, repository)

    def api_mode(self) -> str:
        """How a resumed Proxmox upgrade reaches the API: pvesh as root on the node, or HTTPS."""
        from labwright.hostupgrade.pve import node_api_mode

        return node_api_mode()

    def gpu_host(self) -> GpuHost:
        """The node's NVIDIA facts (driver, majors, device nodes)."""
        return GpuHost(self.files)


_current: Node = Node()


def this_node() -> Node:
    """The node the CLI acts on."""
    return _current


def use(node: Node) -> Node:
    """Put ``node`` in place of this one for the CLI; returns the one it replaced."""
    global _current
    previous, _current = _current, node
    return previous
