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
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from labwright.atomic import write_text_atomic
from labwright.errors import OperationFailed
from labwright.shell import quote

#: Fixed by NVIDIA for the GPU nodes and nvidiactl (/proc/devices calls it "nvidia-frontend" or "nvidia").
NVIDIA_MAJOR = 195
#: The group the NVIDIA nodes get inside a guest: ``video``, gid 44 on Debian and Ubuntu (base-passwd's fixed
#: entry; community-scripts and PVE's own examples pass GPU nodes with gid=44 too). The engine deploys put their
#: service user in it, so the nodes can be 0660 (``guest_mode``) instead of the driver's default 0666 (any user,
#: any process of the guest, could open the GPU, read its memory through UVM and load it).
GPU_GROUP = "video"
GPU_GID = 44
#: The most a node gets inside a guest: owner and group only, never others.
GUEST_MODE_MASK = 0o660
#: Userspace libraries whose file name carries the exact driver version (libcuda.so.550.54.14).
VERSIONED_LIBRARIES = ("libcuda.so", "libnvidia-ml.so")
#: Where distributions and the .run installer put them, and where container runtimes mount the host's (NVIDIA's CUDA
#: images and Kubernetes' device plugin: /usr/local/nvidia/lib64, named in ld.so.conf). Seen on the lent H200
#: (2026-11-27): libcuda.so.580.159.04 in /usr/local/nvidia/lib64 and in no distribution directory, so a check that
#: read only those called a working GPU machine "no userspace".
LIBRARY_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib", "/usr/lib/aarch64-linux-gnu",
                "/usr/local/nvidia/lib64", "/usr/local/nvidia/lib")
#: The directories the dynamic loader's cache has libcuda/libnvidia-ml in (``ldconfig -p``: "libcuda.so.1 (libc6,
#: x86-64) => /opt/nvidia/lib/libcuda.so.1"): what a CUDA program really loads, wherever an installer put it.
_LOADER_DIRS = ("ldconfig -p 2>/dev/null | sed -nE 's#^.* => (/.*)/lib(cuda|nvidia-ml)[.]so.*#\\1#p' | sort -u")

#: Creates /dev/nvidia-uvm (and nvidia0) without a CUDA program having run; the node appears only
#: when the module is used, and a container whose passthrough names a missing node won't start.
UVM_PREFLIGHT = ("nvidia-modprobe", "-u", "-c", "0")
CONTAINER_TOOLS = ("usr/bin/nvidia-container-cli", "usr/local/bin/nvidia-container-cli")
#: The systemd unit labwright installs on a GPU host so that the nodes its GPU guests pass exist after every
#: boot, before Proxmox's pve-guests (onboot containers), pve-ha-lrm or the LXC/LXD/Incus autostart run.
BOOT_UNIT = "labwright-nvidia-uvm.service"
BOOT_UNIT_PATH = f"/etc/systemd/system/{BOOT_UNIT}"
NVIDIA_MODPROBE = "/usr/bin/nvidia-modprobe"
#: Nodes the driver creates only when something first uses it (nvidia-modprobe -u -c 0 makes both).
LAZY_NODES = ("/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
#: ``nvidia-modprobe -f PROC`` makes /dev/nvidia-caps/nvidia-cap<DeviceFileMinor of PROC>; the MIG
#: config and monitor capabilities have minors 1 and 2 (NVIDIA's MIG user guide, "Device nodes").
CAP_PROC_FILES = {"/dev/nvidia-caps/nvidia-cap1": "/proc/driver/nvidia/capabilities/mig/config",
                  "/dev/nvidia-caps/nvidia-cap2": "/proc/driver/nvidia/capabilities/mig/monitor"}
#: Started by these at boot: PVE's onboot guests and HA, LXC's autostart, LXD (deb or snap) and Incus.
_BOOT_BEFORE = ("pve-guests.service", "pve-ha-lrm.service", "lxc.service", "lxd.service", "snap.lxd.daemon.service",
                "incus.service", "incus-startup.service")

_VERSION = r"(\d+\.\d+(?:\.\d+)?)"
_DRIVER_LINE = re.compile(r"Kernel Module(?:\s+for\s+\S+)?\s+" + _VERSION)
_LIBRARY = re.compile(r"^(lib(?:cuda|nvidia-ml)\.so)\." + _VERSION + r"$")
_SMI_VERSION = re.compile(r"Driver Version:\s*" + _VERSION)
_NODE_ORDER = re.compile(r"^nvidia(\d+)$")


def userspace_listing(root: str = "/") -> str:
    """A shell command listing the file names in every directory the NVIDIA userspace may be in (LIBRARY_DIRS, and
    on a real system the loader's own directories for it); ``userspace_versions`` reads the versions from them. Below
    a fake ``root`` (tests) only LIBRARY_DIRS are read."""
    base = root.rstrip("/")
    dirs = " ".join(quote(base + d) for d in LIBRARY_DIRS)
    listing = f"for d in {dirs}; do ls -1 \"$d\" 2>/dev/null; done"
    if base:
        return f"{{ {listing}; }}"
    return f"{{ {listing}; {_LOADER_DIRS} | while IFS= read -r d; do ls -1 \"$d\" 2>/dev/null; done; }}"


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

    @property
    def guest_mode(self) -> int:
        """The mode the node gets inside a guest (``guest_mode``)."""
        return guest_mode(self.mode)


def guest_mode(host_mode: int) -> int:
    """A node's mode inside a guest: the host's bits without others' (0666 -> 0660, a capability node's 0444 ->
    0440, 0400 stays 0400): only root and the ``GPU_GROUP`` members (the engines' service users) open it."""
    return host_mode & GUEST_MODE_MASK


def _node_sort_key(name: str) -> tuple[int, int, str]:
    match = _NODE_ORDER.match(name)
    if match:
        return (0, int(match.group(1)), name)
    return (1, 0, name)


class GpuHost:
    """NVIDIA facts of the machine below ``root`` ("/" in production, a temp dir in tests)."""

    def __init__(self, root: str | Path = "/"):
        self.root = Path(root)
        self.label = "this host" if self.root == Path("/") else f"the host tree {self.root}"
        self.ran: list[tuple[str, ...]] = []

    # HostFiles, for the boot unit: files below ``root``; commands run only when ``root`` is "/".
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

    def run(self, argv: Sequence[str]) -> tuple[int, str]:
        self.ran.append(tuple(argv))
        if self.root != Path("/"):
            return 0, ""  # under a test root the command would act on the real host, not the fake tree
        try:
            proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=120, check=False)
        except OSError as exc:
            return 127, str(exc)
        return proc.returncode, (proc.stdout + proc.stderr).strip()

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


# --- the boot unit: the nodes exist after every reboot -----------------------------------------------
class HostFiles(Protocol):
    """What installing the boot unit needs from a host: ``PveNode`` on Proxmox, ``GpuHost`` for local LXD."""

    label: str

    def read_file(self, path: str) -> str: ...

    def write_file(self, path: str, text: str) -> None: ...

    def run(self, argv: Sequence[str]) -> tuple[int, str]: ...


@dataclass(frozen=True)
class BootUnit:
    """The unit for a set of node paths: ``commands`` are its ExecStart lines; ``uncovered`` are paths
    nvidia-modprobe has no option for (they are left to whatever made them)."""

    text: str
    commands: tuple[tuple[str, ...], ...]
    uncovered: tuple[str, ...] = ()

    def summary(self) -> str:
        return "; ".join(" ".join(c).removeprefix("/usr/bin/") for c in self.commands)


def boot_commands(paths: Iterable[str]) -> tuple[list[tuple[str, ...]], list[str]]:
    """The nvidia-modprobe calls that create ``paths``, and the paths none covers. From nvidia-modprobe.c
    (main): ``-c N`` loads nvidia and makes /dev/nvidiaN (N=255: /dev/nvidiactl); ``-m`` loads nvidia-modeset
    and makes /dev/nvidia-modeset; ``-u -c 0`` loads nvidia-uvm and makes /dev/nvidia-uvm (minor 0) and
    /dev/nvidia-uvm-tools (minor 1) with nvidia-uvm's major from /proc/devices; ``-f PROC`` makes a capability
    node. ``-u`` and plain ``-c`` are different branches of one if/else, hence separate calls."""
    wanted = set(paths)
    minors = sorted(int(m.group(1)) for p in wanted if (m := re.fullmatch(r"/dev/nvidia(\d+)", p)))
    commands: list[tuple[str, ...]] = []
    covered: set[str] = set()
    gpus = [arg for minor in [*minors, *([255] if "/dev/nvidiactl" in wanted else [])] for arg in ("-c", str(minor))]
    if gpus:
        commands.append((NVIDIA_MODPROBE, *gpus))
        covered |= {f"/dev/nvidia{m}" for m in minors} | {"/dev/nvidiactl"}
    if "/dev/nvidia-modeset" in wanted:
        commands.append((NVIDIA_MODPROBE, "-m"))
        covered.add("/dev/nvidia-modeset")
    if wanted & set(LAZY_NODES):
        commands.append((NVIDIA_MODPROBE, "-u", "-c", "0"))
        covered |= set(LAZY_NODES)
    caps = [arg for path, proc in CAP_PROC_FILES.items() if path in wanted for arg in ("-f", proc)]
    if caps:
        commands.append((NVIDIA_MODPROBE, *caps))
        covered |= set(CAP_PROC_FILES)
    return commands, sorted(wanted - covered)


def boot_unit(paths: Iterable[str]) -> BootUnit:
    """``BOOT_UNIT``'s text for the NVIDIA nodes GPU guests pass (``paths``, as /dev/... on the host)."""
    commands, uncovered = boot_commands(paths)
    lines = [
        "# Managed by labwright (`labwright guest apply` of a GPU guest); rewritten by the next apply.",
        "# Creates the NVIDIA device nodes GPU containers pass through, at boot, before guests start:",
        "# Proxmox stats every devN path when a container starts, and nothing else makes /dev/nvidia-uvm.",
        f"# Remove: systemctl disable --now {BOOT_UNIT} && rm {BOOT_UNIT_PATH}",
        "# labwright: runs as root (it makes device nodes; docs/security.md \"Hardened units\")",
        *(f"# not created here (no nvidia-modprobe option): {p}" for p in uncovered),
        "[Unit]",
        "Description=NVIDIA device nodes for GPU containers (labwright)",
        "After=systemd-modules-load.service",
        f"Before={' '.join(_BOOT_BEFORE)}",
        "",
        "[Service]",
        "Type=oneshot",
        "RemainAfterExit=yes",
        *(f"ExecStart={' '.join(c)}" for c in commands),
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ]
    return BootUnit("\n".join(lines) + "\n", tuple(commands), tuple(uncovered))


def unit_paths(text: str | None) -> list[str]:
    """The node paths an installed boot unit makes (``boot_commands`` read back). A new unit keeps them, so two
    guests passing different nodes, or a plan made after a reboot took some away, never shrink it."""
    paths: list[str] = []
    caps = {proc: path for path, proc in CAP_PROC_FILES.items()}
    for line in (text or "").splitlines():
        argv = line.removeprefix("ExecStart=").split() if line.startswith(f"ExecStart={NVIDIA_MODPROBE} ") else []
        args = argv[1:]
        values = [args[i + 1] for i, a in enumerate(args[:-1]) if a in ("-c", "-f")]
        if "-u" in args:
            paths += LAZY_NODES
            continue
        paths += [("/dev/nvidiactl" if v == "255" else f"/dev/nvidia{v}") for v in values if v.isdigit()]
        paths += [caps[v] for v in values if v in caps]
        paths += ["/dev/nvidia-modeset"] if "-m" in args else []
    return paths


def installed_unit(host: HostFiles) -> str | None:
    """The boot unit as the host has it now (None: not installed)."""
    try:
        return host.read_file(BOOT_UNIT_PATH)
    except OperationFailed:
        return None


def install_boot_unit(host: HostFiles, unit: BootUnit, where: str) -> None:
    """Write the unit, enable it, and run it now (``restart``: a oneshot that already ran runs again, so nodes
    added since are made too; nvidia-modprobe leaves a node that is already right alone)."""
    host.write_file(BOOT_UNIT_PATH, unit.text)
    for argv in (("systemctl", "daemon-reload"), ("systemctl", "enable", BOOT_UNIT), ("systemctl", "restart",
                                                                                         BOOT_UNIT)):
        code, output = host.run(argv)
        if code:
            raise OperationFailed(f"{where}: `{' '.join(argv)}` failed on {host.label} (exit {code}): "
                                  f"{output.strip()[:200]}; check `journalctl -u {BOOT_UNIT}` there")


def remove_boot_unit(host: HostFiles, where: str) -> bool:
    """Disable and delete the unit; False when it was not installed. The nodes it made stay."""
    if installed_unit(host) is None:
        return False
    for argv in (("systemctl", "disable", "--now", BOOT_UNIT), ("rm", "-f", "--", BOOT_UNIT_PATH),
                 ("systemctl", "daemon-reload")):
        code, output = host.run(argv)
        if code:
            raise OperationFailed(f"{where}: `{' '.join(argv)}` failed on {host.label} (exit {code}): "
                                  f"{output.strip()[:200]}")
    return True


def missing_paths(wanted: Iterable[str], present: Iterable[str]) -> list[str]:
    """``wanted`` node paths the host does not have right now, in the order given."""
    have = set(present)
    return [p for p in dict.fromkeys(wanted) if p not in have]
