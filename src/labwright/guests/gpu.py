"""Host NVIDIA facts both backends need, and the driver-match rule.

Why read the host and not hard-code: ``/dev/nvidia0`` and ``nvidiactl`` have the fixed major 195,
but ``nvidia-uvm`` and ``nvidia-caps`` get dynamic majors (234-240 and 508-511 have been seen) that
can change with every kernel or driver update, so passthrough lines are computed at apply time.

Everything reads below an injectable ``root`` so tests use a temp dir with fake ``/proc`` files and
``mknod`` nodes. Parsers are pure functions; ``labwright.facts.nvidia`` runs the same parsing
through pyinfra on remote hosts and inside containers.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

#: Fixed by NVIDIA for the GPU nodes and nvidiactl (/proc/devices calls it "nvidia-frontend" or "nvidia").
NVIDIA_MAJOR = 195
#: Userspace libraries whose file name carries the exact driver version (libcuda.so.550.54.14).
VERSIONED_LIBRARIES = ("libcuda.so", "libnvidia-ml.so")
#: Where distributions and the .run installer put them.
LIBRARY_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib", "/usr/lib/aarch64-linux-gnu")
#: Creates /dev/nvidia-uvm (and nvidia0) without a CUDA program having run; the node appears only
#: when the module is used, and a container whose passthrough names a missing node won't start.
UVM_PREFLIGHT = ("nvidia-modprobe", "-u", "-c", "0")
CONTAINER_TOOLS = ("usr/bin/nvidia-container-cli", "usr/local/bin/nvidia-container-cli")

_VERSION = r"(\d+\.\d+(?:\.\d+)?)"
_DRIVER_LINE = re.compile(r"Kernel Module(?:\s+for\s+\S+)?\s+" + _VERSION)
_LIBRARY = re.compile(r"^(lib(?:cuda|nvidia-ml)\.so)\." + _VERSION + r"$")
_SMI_VERSION = re.compile(r"Driver Version:\s*" + _VERSION)
_NODE_ORDER = re.compile(r"^nvidia(\d+)$")


# --- pure parsers ----------------------------------------------------------------------------
def parse_driver_version(text: str) -> str | None:
    """The kernel module version from ``/proc/driver/nvidia/version``, e.g.
    ``NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 ...`` -> ``550.54.14``
    (also the open module's ``... Open Kernel Module for x86_64  570.133.07  Release Build ...``)."""
    for line in text.splitlines():
        if line.startswith("NVRM version:"):
            match = _DRIVER_LINE.search(line)
            if match:
                return match.group(1)
    return None


def parse_proc_devices(text: str) -> dict[str, int]:
    """Character-device majors by name from ``/proc/devices`` (the block section is skipped)."""
    majors: dict[str, int] = {}
    section = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.endswith("devices:"):
            section = stripped.split()[0].lower()
            continue
        parts = stripped.split(None, 1)
        if section == "character" and len(parts) == 2 and parts[0].isdigit():
            majors.setdefault(parts[1], int(parts[0]))
    return majors


def userspace_versions(file_names: Iterable[str]) -> dict[str, str]:
    """{library: version} from library file names (``libcuda.so.550.54.14``); unversioned links ignored."""
    found: dict[str, str] = {}
    for name in file_names:
        match = _LIBRARY.match(os.path.basename(name.strip()))
        if match:
            found.setdefault(match.group(1), match.group(2))
    return found


def parse_nvidia_smi(text: str) -> tuple[str | None, bool]:
    """(driver version, API mismatch reported) from ``nvidia-smi`` output."""
    match = _SMI_VERSION.search(text)
    return (match.group(1) if match else None), "version mismatch" in text.lower()


@dataclass(frozen=True)
class DriverMatch:
    """Host kernel module vs container userspace. ``ok`` only on an exact version match."""

    status: str  # match | mismatch | missing-userspace | no-host-driver
    host_version: str | None
    userspace: dict[str, str] = field(default_factory=dict)
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "match"


def check_driver_match(host_version: str | None, userspace: dict[str, str], smi_output: str = "") -> DriverMatch:
    """The rule: every versioned userspace library equals the host module version EXACTLY. A same-major
    match is not enough (570.148.06 vs .08 gives NVRM "API mismatch"), and nvidia-smi saying
    "version mismatch" is a mismatch whatever the files say."""
    fix = f"install NVIDIA-Linux-x86_64-{host_version}.run --no-kernel-module (or packages pinned to {host_version})"
    if host_version is None:
        return DriverMatch("no-host-driver", None, dict(userspace),
                           "no NVIDIA kernel module (/proc/driver/nvidia/version missing); install the host driver")
    if not userspace:
        return DriverMatch("missing-userspace", host_version, {},
                           f"no NVIDIA userspace libraries (libcuda/libnvidia-ml) found; {fix}")
    wrong = {lib: ver for lib, ver in userspace.items() if ver != host_version}
    _, smi_mismatch = parse_nvidia_smi(smi_output)
    if wrong or smi_mismatch:
        found = ", ".join(f"{lib} {ver}" for lib, ver in sorted((wrong or userspace).items()))
        return DriverMatch("mismatch", host_version, dict(userspace),
                           f"driver mismatch: host module {host_version}, container has {found}; {fix}")
    return DriverMatch("match", host_version, dict(userspace), f"userspace matches host driver {host_version}")


# --- the host --------------------------------------------------------------------------------
@dataclass(frozen=True)
class DeviceNode:
    """A character device node: ``path`` as the guest sees it, ``source`` on the host."""

    path: str
    source: str
    major: int
    minor: int
    mode: int = 0o666  # the host node's permission bits (nvidia-caps nodes are 0400/0444, not 0666)

    @property
    def name(self) -> str:
        return os.path.basename(self.path)


def _node_sort_key(name: str) -> tuple[int, int, str]:
    match = _NODE_ORDER.match(name)
    if match:
        return (0, int(match.group(1)), name)
    return (1, 0, name)


class GpuHost:
    """NVIDIA facts of the machine below ``root`` ("/" in production, a temp dir in tests)."""

    def __init__(self, root: str | Path = "/"):
        self.root = Path(root)

    def _read(self, relative: str) -> str | None:
        try:
            return (self.root / relative).read_text()
        except OSError:
            return None

    def host_path(self, guest_path: str) -> str:
        """Where the guest path ``/dev/X`` lives on this host (differs from it only under a test root)."""
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
