"""The boot unit: the NVIDIA nodes GPU guests pass exist after every reboot.

The driver makes ``/dev/nvidia-uvm`` (and the GPU nodes) only when something first uses it, and a container whose
passthrough names a missing node does not start; ``labwright-nvidia-uvm.service`` runs ``nvidia-modprobe`` for each
node the guests pass, before the guests start at boot.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from labwright.errors import OperationFailed
from labwright.hosts import Result
from labwright.textio import ascii_digits

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


class HostFiles(Protocol):
    """What installing the boot unit needs from a host: ``PveNode`` on Proxmox, ``GpuHost`` for local LXD."""

    label: str

    def read_file(self, path: str) -> str: ...

    def write_file(self, path: str, text: str) -> None: ...

    def run(self, argv: Sequence[str]) -> Result: ...


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
    minors = sorted(int(m.group(1)) for p in wanted if (m := re.fullmatch(r"(?a)/dev/nvidia(\d+)", p)))
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
        paths += [("/dev/nvidiactl" if v == "255" else f"/dev/nvidia{v}") for v in values if ascii_digits(v)]
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
        result = host.run(argv)
        if not result.ok:
            raise OperationFailed(f"{where}: `{' '.join(argv)}` failed on {host.label} (exit {result.rc}): "
                                  f"{_output(result)}; check `journalctl -u {BOOT_UNIT}` there")


def remove_boot_unit(host: HostFiles, where: str) -> bool:
    """Disable and delete the unit; False when it was not installed. The nodes it made stay."""
    if installed_unit(host) is None:
        return False
    for argv in (("systemctl", "disable", "--now", BOOT_UNIT), ("rm", "-f", "--", BOOT_UNIT_PATH),
                 ("systemctl", "daemon-reload")):
        result = host.run(argv)
        if not result.ok:
            raise OperationFailed(f"{where}: `{' '.join(argv)}` failed on {host.label} (exit {result.rc}): "
                                  f"{_output(result)}")
    return True


def _output(result: Result) -> str:
    return (result.stdout + result.stderr).strip()[:200]


def missing_paths(wanted: Iterable[str], present: Iterable[str]) -> list[str]:
    """``wanted`` node paths the host does not have right now, in the order given."""
    have = set(present)
    return [p for p in dict.fromkeys(wanted) if p not in have]
