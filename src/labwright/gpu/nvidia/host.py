"""A host's NVIDIA facts, both guest backends need them: the driver version, the nvidia* majors and the character
nodes.

Why read the host and not hard-code: ``/dev/nvidia0`` and ``nvidiactl`` have the fixed major 195,
but ``nvidia-uvm`` and ``nvidia-caps`` get dynamic majors (234-240 and 508-511 have been seen) that
can change with every kernel or driver update, so passthrough lines are computed at apply time.

``GpuHost`` reads this machine's files below a ``root`` ("/"; tests use a temp dir with fake ``/proc`` files and
``mknod`` nodes) and runs its commands through a ``labwright.hosts.Host`` (this machine; tests give a double).
``NODE_FACTS_SCRIPT`` is the same reading as one shell command, for a node reached over SSH (one round trip), read
back by ``parse_node_facts``.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from labwright.atomic import write_text_atomic
from labwright.errors import OperationFailed
from labwright.gpu.devices import DeviceNode, parse_proc_devices
from labwright.gpu.nvidia.driver import parse_driver_version
from labwright.hosts import Result
from labwright.hosts.local import LocalHost

#: Creates /dev/nvidia-uvm (and nvidia0) without a CUDA program having run; the node appears only
#: when the module is used, and a container whose passthrough names a missing node won't start.
UVM_PREFLIGHT = ("nvidia-modprobe", "-u", "-c", "0")
CONTAINER_TOOLS = ("usr/bin/nvidia-container-cli", "usr/local/bin/nvidia-container-cli")
_NODE_ORDER = re.compile(r"^nvidia(\d+)$")


class Shell(Protocol):
    """Where a ``GpuHost``'s commands run: any ``labwright.hosts.Host`` (only ``label`` and ``run`` are used)."""

    label: str

    def run(self, command: str | Sequence[str], stdin: bytes | str | None = None,
            timeout: float | None = None) -> Result: ...


def _node_sort_key(name: str) -> tuple[int, int, str]:
    match = _NODE_ORDER.match(name)
    if match:
        return (0, int(match.group(1)), name)
    return (1, 0, name)


class GpuHost:
    """NVIDIA facts of the machine below ``root`` ("/" in production, a temp dir in tests)."""

    def __init__(self, root: str | Path = "/", host: Shell | None = None):
        self.root = Path(root)
        self.label = "this host" if self.root == Path("/") else f"the host tree {self.root}"
        #: Where its commands (the boot unit's systemctl) run: this machine. A test with a fake ``root`` gives a
        #: Host double (tests/support/gpu_host.py), so no command reaches the real host.
        self.host: Shell = host if host is not None else LocalHost(label=self.label)

    # HostFiles, for the boot unit: files below ``root``; commands through ``host``.
    def read_file(self, path: str) -> str:
        try:
            return (self.root / path.lstrip("/")).read_text()
        except OSError as exc:
            raise OperationFailed(f"cannot read {path} on {self.label}: {exc.strerror or exc}") from exc

    def write_file(self, path: str, text: str) -> None:
        target = self.root / path.lstrip("/")
        try:
            write_text_atomic(target, text)
        except OSError as exc:
            raise OperationFailed(f"cannot write {path} on {self.label}: {exc.strerror or exc}") from exc

    def run(self, argv: Sequence[str]) -> Result:
        return self.host.run(argv, timeout=120)

    def _read(self, relative: str) -> str | None:
        try:
            return (self.root / relative).read_text()
        except OSError:
            return None

    def host_path(self, guest_path: str) -> str:
        """Where the guest path ``/dev/X`` lives below ``root`` (the path itself on this machine)."""
        return str(self.root / guest_path.lstrip("/"))

    def driver_version(self) -> str | None:
        text = self._read("proc/driver/nvidia/version")
        return parse_driver_version(text) if text else None

    def majors(self) -> dict[str, int]:
        """nvidia* character majors from /proc/devices (nvidia-uvm, nvidia-caps, nvidia-frontend...)."""
        text = self._read("proc/devices") or ""
        return {name: major for name, major in parse_proc_devices(text).items() if name.startswith("nvidia")}

    def has_container_tools(self) -> bool:
        """libnvidia-container's CLI, which LXD's ``nvidia.runtime`` needs on the host."""
        return any((self.root / tool).exists() for tool in CONTAINER_TOOLS)

    def device_nodes(self) -> list[DeviceNode]:
        """Every NVIDIA character node: /dev/nvidia[0-9]*, nvidiactl, nvidia-modeset, nvidia-uvm(-tools),
        /dev/nvidia-caps/*, GPUs first in numeric order. Non-device files are skipped."""
        dev = self.root / "dev"
        candidates = sorted(dev.glob("nvidia*"), key=lambda p: _node_sort_key(p.name))
        candidates += sorted((dev / "nvidia-caps").glob("*"), key=lambda p: p.name)
        nodes = []
        for path in candidates:
            try:
                info = path.lstat()
            except OSError:
                continue
            if stat.S_ISCHR(info.st_mode):
                guest = "/" + str(path.relative_to(self.root)).lstrip("/")
                nodes.append(DeviceNode(guest, str(path), os.major(info.st_rdev), os.minor(info.st_rdev),
                                        stat.S_IMODE(info.st_mode)))
        return nodes

    def has_driver(self) -> bool:
        return self.driver_version() is not None

    def preflight_commands(self) -> list[tuple[str, ...]]:
        """Commands to run on the host before a GPU guest starts: create /dev/nvidia-uvm when missing."""
        if self.has_driver() and not (self.root / "dev" / "nvidia-uvm").exists():
            return [UVM_PREFLIGHT]
        return []

    def missing_driver_message(self, where: str) -> str:
        return (f"{where}: gpu: nvidia, but this host has no NVIDIA driver "
                f"({self.root / 'proc/driver/nvidia/version'} is missing); install the host driver "
                "or set gpu: none")


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
        if len(parts) == 3:
            nodes.append(DeviceNode(parts[2], parts[2], int(parts[0], 16), int(parts[1], 16)))
    return NodeGpu(parse_driver_version(version_text), majors, tuple(nodes))
