"""A Proxmox VE container reached through its node: a node :class:`~labwright.hosts.Host` plus ``pct exec``.

Every command runs on the node as ``pct exec VMID -- env PATH=<Debian root PATH> sh -c '<command>'``
(labwright.connectors.pct_commands), so the container needs neither sshd nor a network address and a command
sees the PATH it would over SSH. The node is any Host: :class:`labwright.hosts.ssh.SshHost` for a real node (the
``@pct`` connector's own), :class:`labwright.hosts.local.LocalHost` when labwright runs on the node itself.

Files go through the container's shell: ``put`` is ``put_with_cat`` (stdin, written beside, then renamed), which
needs only that the node Host passes stdin; ``get`` reads ``base64`` of the file, since a node Host's output is text
(any byte comes back as it was). The ``@pct`` connector moves files with ``pct push``/``pct pull`` instead,
verified by size and sha256, for deploys' large files.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence

from labwright.connectors.pct_commands import pct_exec_command
from labwright.hosts import CommandFiles, Host, Result, Source, put_with_cat, shell_line
from labwright.shell import quote


class PctHost(CommandFiles):
    """CT ``vmid`` on ``node``. ``close`` leaves the node open: whoever made the node Host closes it."""

    def __init__(self, node: Host, vmid: int, label: str | None = None):
        self.node = node
        self.vmid = vmid
        self.label = label or f"CT {vmid} on {node.label}"

    def node_command(self, command: str | Sequence[str]) -> str:
        """The node's command line that runs ``command`` (a shell line or an argv) in the container."""
        return pct_exec_command(self.vmid, shell_line(command))

    def run(self, command: str | Sequence[str], stdin: bytes | str | None = None,
            timeout: float | None = None) -> Result:
        return self.node.run(self.node_command(command), stdin=stdin, timeout=timeout)

    def put(self, source: Source, remote: str, mode: int | None = None) -> None:
        put_with_cat(self, source, remote, mode)

    def get(self, remote: str) -> bytes:
        result = self.run(f"base64 < {quote(remote)}")
        if not result.ok:
            raise OSError(f"cannot read {remote} on {self.label}: {result.last_line()}")
        return base64.b64decode(result.stdout)

    def close(self) -> None:
        pass


__all__ = ["PctHost"]
