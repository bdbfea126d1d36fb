"""A host tree the real-node path of `host upgrade` can run on: the doubles of tests/support/host_tools first on
PATH (NVIDIA's installer, dkms, proxmox-boot-tool, systemctl, each acting below ``LW_FAKE_ROOT``), the files those
tools read, and ``boot``: what the node's next boot does to the tree, then the enabled labwright units run as
systemd would run them (the device-node unit's nvidia-modprobe lines, then the resume unit's ExecStart)."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

from labwright.hostupgrade.plan import kernel_key
from labwright.hostupgrade.state import RESUME_UNIT_PATH, RESUME_WANTS_LINK, unit_exec_start
from support.fake_nvidia import VERSION_TEXT, reboot, run_boot_unit

TOOLS = Path(__file__).resolve().parent / "host_tools"
SIM = "labwright-sim"
UVM_UNIT = "etc/systemd/system/labwright-nvidia-uvm.service"
RESUME_UNIT = RESUME_UNIT_PATH.lstrip("/")
RESUME_LINK = RESUME_WANTS_LINK.lstrip("/")


def tool_env(root: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a command on the node runs in: the doubles first on PATH, acting on ``root``."""
    env = dict(os.environ if base is None else base)
    env["PATH"] = f"{TOOLS}:{env.get('PATH', '/usr/bin:/bin')}"
    env["LW_FAKE_ROOT"] = str(root)
    env["LW_HOST_TOOLS"] = str(TOOLS)
    return env


def make_node(root: Path, kernels: tuple[str, ...], headers: tuple[str, ...], driver: str, running: str,
              esp: bool = True) -> None:
    """What a Proxmox/Debian node has besides the NVIDIA files: /boot/vmlinuz-K per kernel, headers
    (/lib/modules/K/build/include) for ``headers``, the running driver registered in DKMS and installed for the
    running kernel as `dkms install` leaves it, and (``esp``) proxmox-boot-tool's ESP list."""
    (root / "boot").mkdir(exist_ok=True)
    (root / "run/systemd/system").mkdir(parents=True, exist_ok=True)  # booted with systemd (sd_booted)
    for kernel in kernels:
        (root / "boot" / f"vmlinuz-{kernel}").write_bytes(b"kernel\n")
        (root / "lib/modules" / kernel).mkdir(parents=True, exist_ok=True)
    for kernel in headers:
        (root / "lib/modules" / kernel / "build/include").mkdir(parents=True, exist_ok=True)
    source = root / "usr/src" / f"nvidia-{driver}"
    source.mkdir(parents=True, exist_ok=True)
    (source / "dkms.conf").write_text(f'PACKAGE_NAME="nvidia"\nPACKAGE_VERSION="{driver}"\n')
    tree = root / "var/lib/dkms/nvidia" / driver
    module = tree / running / "x86_64/module"
    module.mkdir(parents=True, exist_ok=True)
    (module / "nvidia.ko").write_text(f"nvidia {driver} for {running}\n")
    (tree / "source").unlink(missing_ok=True)
    (tree / "source").symlink_to(source)
    link = root / "var/lib/dkms/nvidia" / f"kernel-{running}-x86_64"
    link.unlink(missing_ok=True)
    link.symlink_to(f"{driver}/{running}/x86_64")
    installed = root / "lib/modules" / running / "updates/dkms"
    installed.mkdir(parents=True, exist_ok=True)
    (installed / "nvidia.ko").write_text(f"nvidia {driver} for {running}\n")
    if esp:
        (root / "etc/kernel").mkdir(parents=True, exist_ok=True)
        (root / "etc/kernel/proxmox-boot-uuids").write_text("1234-ABCD\n")


def boot(root: Path, uvm_major: int | None = None) -> tuple[str, str | None]:
    """The node boots: the kernel its boot entry names (proxmox-boot-tool's recorded entry, else the newest
    /boot/vmlinuz-*), the nvidia module installed for that kernel loaded (DKMS's /updates/dkms, else the
    installer's own /kernel/drivers/video; none: no driver, /proc/driver/nvidia/version gone), nvidia-uvm's major
    ``uvm_major`` (a new boot may give another), every /dev/nvidia* node gone, then the device-node unit's
    nvidia-modprobe lines. Returns (kernel, loaded version)."""
    entry = root / SIM / "boot-entry"
    kernels = sorted((p.name.removeprefix("vmlinuz-") for p in (root / "boot").glob("vmlinuz-*")), key=kernel_key)
    kernel = entry.read_text().strip() if entry.exists() else kernels[-1]
    (root / "proc/sys/kernel/osrelease").write_text(kernel + "\n")
    version = None
    for place in ("updates/dkms", "kernel/drivers/video"):
        module = root / "lib/modules" / kernel / place / "nvidia.ko"
        if module.exists():
            version = module.read_text().split()[1]
            break
    version_file = root / "proc/driver/nvidia/version"
    if version is None:
        version_file.unlink(missing_ok=True)
    else:
        version_file.write_text(VERSION_TEXT.format(version=version))
    if uvm_major is not None:
        devices = root / "proc/devices"
        lines = [f"{uvm_major:3d} nvidia-uvm" if line.endswith(" nvidia-uvm") else line
                 for line in devices.read_text().splitlines()]
        devices.write_text("\n".join(lines) + "\n")
    reboot(root, everything=True)
    (root / SIM / "reboot-requested").unlink(missing_ok=True)
    unit = root / UVM_UNIT
    if unit.exists() and version is not None:
        run_boot_unit(root, unit.read_text())
    return kernel, version


def run_resume_unit(root: Path, env: dict[str, str], timeout: float = 900) -> subprocess.CompletedProcess:
    """The resume unit as systemd starts it at boot when it is enabled (its wants link is there): its ExecStart,
    with the unit's EnvironmentFile= read (systemd.exec(5): KEY=VALUE lines, double-quoted values)."""
    assert (root / RESUME_LINK).is_symlink(), "the resume unit is not enabled"
    text = (root / RESUME_UNIT).read_text()
    argv = unit_exec_start(text)
    unit_env = dict(env)
    for line in text.splitlines():
        if line.startswith("EnvironmentFile="):
            path = root / line.split("=", 1)[1].lstrip("-").lstrip("/")
            if path.exists():
                for item in path.read_text().splitlines():
                    key, _, value = item.partition("=")
                    unit_env[key] = shlex.split(value)[0] if value else ""
    try:
        return subprocess.run(argv, env=unit_env, capture_output=True, text=True, timeout=timeout)
    finally:
        run_stop_post(root, text)


def run_stop_post(root: Path, text: str) -> None:
    """The unit's ExecStopPost= lines, as systemd runs them once the service stopped however it stopped (a clean
    exit, a failure, a kill): each ``rm -f`` with its absolute paths taken below ``root``; a leading ``-`` lets
    the command fail (systemd.service(5))."""
    for line in text.splitlines():
        if not line.startswith("ExecStopPost="):
            continue
        argv = shlex.split(line.removeprefix("ExecStopPost=").lstrip("-"))
        assert Path(argv[0]).name == "rm" and argv[1] == "-f", f"an ExecStopPost= this double cannot run: {line}"
        for path in argv[2:]:
            target = root / path.lstrip("/")
            if target.is_symlink() or target.exists():
                target.unlink()
