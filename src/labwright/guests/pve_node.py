"""What the Proxmox backend needs from the node itself, beyond the API: its NVIDIA device nodes and majors,
the ``/etc/pve`` config files (raw ``lxc.*`` lines are not in the API), and the uvm preflight command.

``LocalPveNode`` reads and writes below a root directory: ``/`` when labwright runs on the node,
a temp dir in tests (fake device nodes, and ``etc/pve`` pointing at the simulator's pmxcfs).
``SshPveNode`` does the same over SSH (the ``hosts`` seam: pyinfra's SSH connector, the ``ssh_*`` option set) as
root by default, with the host key checked against known_hosts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pyinfra.api.exceptions import ConnectError

from labwright.errors import LabwrightError, OperationFailed
from labwright.guests.gpu import DeviceNode, GpuHost, parse_driver_version, parse_proc_devices
from labwright.hosts.options import endpoint
from labwright.hosts.ssh import SshHost
from labwright.shell import join, quote

#: One shell command that prints everything the GPU wiring needs, so facts cost one SSH round trip.
_FACTS_SCRIPT = (
    "cat /proc/driver/nvidia/version 2>/dev/null; echo '@@devices'; cat /proc/devices; echo '@@nodes'; "
    "for f in /dev/nvidia* /dev/nvidia-caps/*; do [ -c \"$f\" ] && stat -c '%t %T %n' \"$f\"; done; true"
)


@dataclass(frozen=True)
class NodeGpu:
    """A node's NVIDIA facts: driver version (None: no driver), nvidia* majors, character nodes."""

    driver: str | None
    majors: dict[str, int] = field(default_factory=dict)
    nodes: tuple[DeviceNode, ...] = ()

    @property
    def uvm_missing(self) -> bool:
        return self.driver is not None and not any(n.path == "/dev/nvidia-uvm" for n in self.nodes)


def parse_facts(output: str) -> NodeGpu:
    """``NodeGpu`` from ``_FACTS_SCRIPT`` output (``stat -c '%t %T %n'`` prints majors/minors in hex)."""
    version_text, _, rest = output.partition("@@devices\n")
    devices_text, _, nodes_text = rest.partition("@@nodes\n")
    majors = {k: v for k, v in parse_proc_devices(devices_text).items() if k.startswith("nvidia")}
    nodes = []
    for line in nodes_text.splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3:
            nodes.append(DeviceNode(parts[2], parts[2], int(parts[0], 16), int(parts[1], 16)))
    return NodeGpu(parse_driver_version(version_text), majors, tuple(nodes))


class PveNode(Protocol):
    label: str

    def gpu(self) -> NodeGpu: ...

    def read_file(self, path: str) -> str: ...

    def write_file(self, path: str, text: str) -> None: ...

    def run(self, argv: Sequence[str]) -> tuple[int, str]: ...


class LocalPveNode(GpuHost):
    """The node's files below ``root`` on this machine: GpuHost's files and commands, with the node's label."""

    def __init__(self, root: str | Path = "/", label: str = "this machine"):
        super().__init__(root)
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
        code, output = self._exec(_FACTS_SCRIPT)
        if code:
            raise OperationFailed(f"reading NVIDIA facts on {self.label} failed: {output.strip()[:200]}")
        return parse_facts(output)

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

    def run(self, argv: Sequence[str]) -> tuple[int, str]:
        return self._exec(join(argv))

    def close(self) -> None:
        self._host.close()
