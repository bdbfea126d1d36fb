"""A host's NVIDIA facts, both guest backends need them: the driver version, the nvidia* majors and the character
nodes.

Why read the host and not hard-code: ``/dev/nvidia0`` and ``nvidiactl`` have the fixed major 195,
but ``nvidia-uvm`` and ``nvidia-caps`` get dynamic majors (234-240 and 508-511 have been seen) that
can change with every kernel or driver update, so passthrough lines are computed at apply time.

``GpuHost`` reads a host's files and runs its commands through a ``labwright.hosts.Host`` (this machine's
``LocalHost``; tests give a double over a tree with fake ``/proc`` files and ``mknod`` nodes, tests/support/host_tree).
``NODE_FACTS_SCRIPT`` is the same reading as one shell command, for a node reached over SSH (one round trip), read
back by ``parse_node_facts``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from labwright.errors import OperationFailed
from labwright.gpu.devices import DeviceNode, parse_proc_devices, stat_numbers
from labwright.gpu.nvidia.driver import parse_driver_version
from labwright.hosts import Host, Result
from labwright.hosts.local import LocalHost, local_path

#: Creates /dev/nvidia-uvm (and nvidia0) without a CUDA program having run; the node appears only
#: when the module is used, and a container whose passthrough names a missing node won't start.
UVM_PREFLIGHT = ("nvidia-modprobe", "-u", "-c", "0")
CONTAINER_TOOLS = ("/usr/bin/nvidia-container-cli", "/usr/local/bin/nvidia-container-cli")
VERSION_FILE = "/proc/driver/nvidia/version"
_NODE_ORDER = re.compile(r"(?a)^nvidia(\d+)$")


class Shell(Protocol):
    """Where a ``GpuHost``'s commands run when not through its Host (the host upgrade's node tools, which a test
    simulates on its tree): ``label`` and ``run`` of a ``labwright.hosts.Host``."""

    label: str

    def run(self, command: str | Sequence[str], stdin: bytes | str | None = None,
            timeout: float | None = None) -> Result: ...


def _node_sort_key(name: str) -> tuple[int, int, str]:
    match = _NODE_ORDER.match(name)
    if match:
        return (0, int(match.group(1)), name)
    return (1, 0, name)


class GpuHost:
    """NVIDIA facts of ``host`` (this machine when none is given): its files read through it, its commands run
    through it too, or through ``shell`` when one is given."""

    def __init__(self, host: Host | None = None, shell: Shell | None = None):
        self.host: Host = host if host is not None else LocalHost(label="this host")
        self.shell: Shell = shell if shell is not None else self.host
        self.label = self.host.label

    # HostFiles, for the boot unit: files through ``host``, commands through ``shell``.
    def read_file(self, path: str) -> str:
        try:
            return self.host.read_text(path)
        except OSError as exc:
            raise OperationFailed(f"cannot read {path} on {self.label}: {exc.strerror or exc}") from exc

    def write_file(self, path: str, text: str) -> None:
        try:
            self.host.put(text.encode(), path)
        except OSError as exc:
            raise OperationFailed(f"cannot write {path} on {self.label}: {exc.strerror or exc}") from exc

    def run(self, argv: Sequence[str]) -> Result:
        return self.shell.run(argv, timeout=120)

    def _read(self, path: str) -> str | None:
        try:
            return self.host.read_text(path)
        except OSError:
            return None

    def host_path(self, guest_path: str) -> str:
        """Where the guest path ``/dev/X`` is for the LXD daemon on this machine (labwright.hosts.local.local_path)."""
        return local_path(self.host, guest_path)

    def driver_version(self) -> str | None:
        text = self._read(VERSION_FILE)
        return parse_driver_version(text) if text else None

    def majors(self) -> dict[str, int]:
        """nvidia* character majors from /proc/devices (nvidia-uvm, nvidia-caps, nvidia-frontend...)."""
        text = self._read("/proc/devices") or ""
        return {name: major for name, major in parse_proc_devices(text).items() if name.startswith("nvidia")}

    def has_container_tools(self) -> bool:
        """libnvidia-container's CLI, which LXD's ``nvidia.runtime`` needs on the host."""
        return any(self.host.exists(tool) for tool in CONTAINER_TOOLS)

    def _names(self, directory: str) -> list[str]:
        try:
            return self.host.listdir(directory)
        except OSError:
            return []

    def device_nodes(self) -> list[DeviceNode]:
        """Every NVIDIA character node: /dev/nvidia[0-9]*, nvidiactl, nvidia-modeset, nvidia-uvm(-tools),
        /dev/nvidia-caps/*, GPUs first in numeric order. Non-device files are skipped."""
        candidates = [f"/dev/{n}" for n in sorted((n for n in self._names("/dev") if n.startswith("nvidia")),
                                                   key=_node_sort_key)]
        candidates += [f"/dev/nvidia-caps/{n}" for n in self._names("/dev/nvidia-caps")]
        nodes = []
        for path in candidates:
            info = self.host.stat(path, follow_symlinks=False)
            if info is not None and info.is_char:
                nodes.append(DeviceNode(path, self.host_path(path), info.major, info.minor, info.permissions))
        return nodes

    def has_driver(self) -> bool:
        return self.driver_version() is not None

    def preflight_commands(self) -> list[tuple[str, ...]]:
        """Commands to run on the host before a GPU guest starts: create /dev/nvidia-uvm when missing."""
        if self.has_driver() and not self.host.exists("/dev/nvidia-uvm"):
            return [UVM_PREFLIGHT]
        return []

    def missing_driver_message(self, where: str) -> str:
        return (f"{where}: gpu: nvidia, but this host has no NVIDIA driver "
                f"({self.host_path(VERSION_FILE)} is missing); install the host driver or set gpu: none")


# --- the same facts of a node reached over a Host (one round trip) --------------------------------------------
#: One shell command that prints everything the GPU wiring needs, so facts cost one SSH round trip.
NODE_FACTS_SCRIPT = (
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


def parse_node_facts(output: str) -> NodeGpu:
    """``NodeGpu`` from ``NODE_FACTS_SCRIPT`` output (``stat -c '%t %T %n'`` prints majors/minors in hex)."""
    version_text, _, rest = output.partition("@@devices\n")
    devices_text, _, nodes_text = rest.partition("@@nodes\n")
    majors = {k: v for k, v in parse_proc_devices(devices_text).items() if k.startswith("nvidia")}
    nodes = []
    for line in nodes_text.splitlines():
        parts = line.split(" ", 2)
        numbers = stat_numbers(parts, "xx") if len(parts) == 3 and parts[2].startswith("/dev/") else None
        if numbers is not None:
            nodes.append(DeviceNode(parts[2], parts[2], numbers[0], numbers[1]))
    return NodeGpu(parse_driver_version(version_text), majors, tuple(nodes))
