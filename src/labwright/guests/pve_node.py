"""What the Proxmox backend needs from the node itself, beyond the API: its NVIDIA device nodes and majors,
the ``/etc/pve`` config files (raw ``lxc.*`` lines are not in the API), and the uvm preflight command.

``LocalPveNode`` reads and writes below a root directory: ``/`` when labwright runs on the node,
a temp dir in tests (fake device nodes, and ``etc/pve`` pointing at the simulator's pmxcfs).
``SshPveNode`` does the same over SSH (the ``hosts`` seam: pyinfra's SSH connector, the ``ssh_*`` option set) as
root by default, with the host key checked against known_hosts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from pyinfra.api.exceptions import ConnectError

from labwright.errors import LabwrightError, OperationFailed
from labwright.gpu.nvidia.host import NODE_FACTS_SCRIPT, GpuHost, NodeGpu, Shell, parse_node_facts
from labwright.hosts import Result
from labwright.hosts.local import LocalHost
from labwright.hosts.options import endpoint
from labwright.hosts.ssh import SshHost
from labwright.shell import join, quote


class PveNode(Protocol):
    label: str

    def gpu(self) -> NodeGpu: ...

    def read_file(self, path: str) -> str: ...

    def write_file(self, path: str, text: str) -> None: ...

    def run(self, argv: Sequence[str]) -> Result: ...


class LocalPveNode(GpuHost):
    """The node's files below ``root`` on this machine: GpuHost's files and commands, with the node's label."""

    def __init__(self, root: str | Path = "/", label: str = "this machine", host: Shell | None = None):
        super().__init__(root, host if host is not None else LocalHost(label=label))
        self.label = label

    def gpu(self) -> NodeGpu:
        return NodeGpu(self.driver_version(), self.majors(), tuple(self.device_nodes()))


class SshPveNode:
    """The node over SSH through the ``hosts`` seam (pyinfra's SSH connector): ``data`` is the node's inventory
    host data, the ``ssh_*`` option set (``ssh_hostname``, ``ssh_port``, ``ssh_user`` (default root),
    ``ssh_key``, ``ssh_known_hosts_file``, ``ssh_config_file``...); ~/.ssh/config (ProxyJump too) and the agent
    apply, and host keys are checked (``ssh_strict_host_key_checking`` default yes)."""

    def __init__(self, node: str, data: Mapping[str, Any]):
        try:
            self._host = SshHost.open(node, data, label=f"node {node}")
        except LabwrightError as exc:
            raise OperationFailed(f"node {node}: {exc}") from exc
        target = endpoint(self._host.options)
        self.label = f"node {node} ({target.user}@{target.hostname})"
        self._host.label = self.label

    def _exec(self, command: str, stdin: str | None = None) -> tuple[int, str]:
        try:
            result = self._host.run(command, stdin=stdin, timeout=120)
        except ConnectError as exc:
            raise OperationFailed(f"cannot log in to {self.label} over SSH: {exc}; check ssh_hostname/ssh_user "
                                  "in the node's host data and that its host key is in known_hosts") from exc
        except TimeoutError as exc:
            raise OperationFailed(f"{self.label}: {exc}") from exc
        return result.rc, result.stdout + result.stderr

    def gpu(self) -> NodeGpu:
        code, output = self._exec(NODE_FACTS_SCRIPT)
        if code:
            raise OperationFailed(f"reading NVIDIA facts on {self.label} failed: {output.strip()[:200]}")
        return parse_node_facts(output)

    def read_file(self, path: str) -> str:
        code, output = self._exec(join(["cat", "--", path]))
        if code:
            raise OperationFailed(f"cannot read {path} on {self.label}: {output.strip()[:200]}")
        return output

    def write_file(self, path: str, text: str) -> None:
        tmp = f"{path}.tmp.labwright"
        code, output = self._exec(f"cat > {quote(tmp)} && mv -f -- {quote(tmp)} {quote(path)}",
                                  stdin=text)
        if code:
            raise OperationFailed(f"cannot write {path} on {self.label}: {output.strip()[:200]}")

    def run(self, argv: Sequence[str]) -> Result:
        code, output = self._exec(join(argv))
        return Result(code, output, "")

    def close(self) -> None:
        self._host.close()
