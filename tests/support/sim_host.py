"""A host-side double of the upgrade (run.NodeHost) on a host tree (the local lab's fake NVIDIA files, tests/support/
fake_nvidia): what ``TreeNode`` (tests/support/host_cli.py) gives ``labwright host upgrade`` instead of the node's
own tools (labwright.hostupgrade.realhost.CommandHost). labwright does not ship it.

What it does to the tree is what the real steps leave on a host: the installer's ``--dkms`` build for the running
kernel in DKMS's tree; ``proxmox-boot-tool kernel pin`` writing ``/etc/kernel/proxmox-boot-pin``; and a reboot:
the kernel release in ``/proc/sys/kernel/osrelease``, the new module's version in ``/proc/driver/nvidia/version``,
nvidia-uvm's dynamic major in ``/proc/devices`` (the value in ``labwright-sim/uvm-major-after-reboot`` under the
root when that file exists: a new boot may give it another one), every ``/dev/nvidia*`` node gone and then made
again by the ExecStart lines of labwright's boot unit, as nvidia-modprobe makes them. Nothing on the real host is
touched; the guests (real LXD containers) keep running through the simulated reboot and are restarted after it.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
from collections.abc import Sequence
from pathlib import Path

from labwright.gpu.devices import parse_proc_devices
from labwright.gpu.nvidia.boot_unit import BOOT_UNIT_PATH, CAP_PROC_FILES
from labwright.gpu.nvidia.driver import NVIDIA_MAJOR
from labwright.hosts import Result
from labwright.hostupgrade.realhost import HOST_LIBDIR, PIN_FILE

SIM_DIR = "labwright-sim"
_MODULE_LINE = re.compile(r"(Kernel Module(?:\s+for\s+\S+)?\s+)\d+\.\d+(?:\.\d+)?")


#: The driver's userspace files on the host (below HOST_LIBDIR, the installer's default for Debian/PVE).
HOST_FILE_GLOBS = (f"{HOST_LIBDIR}/libcuda.so*", f"{HOST_LIBDIR}/libnvidia-ml.so*", "usr/bin/nvidia-smi")
PREVIOUS_DIR = f"{SIM_DIR}/driver-previous"


class SimulatedHost:
    #: The simulated reboot happens in this process: no state file, no resume unit.
    reboots_for_real = False

    def __init__(self, root: Path):
        self.root = root
        self.label = f"the simulated host {root}"
        self.installed: str | None = None
        self.previous: str | None = None
        self._new_builds: list[Path] = []
        #: The commands the upgrade gave the node (the boot unit's systemctl): recorded, none runs (the simulated
        #: boot runs the unit's nvidia-modprobe lines: tests/support/fake_nvidia.run_boot_unit).
        self.ran: list[tuple[str, ...]] = []

    def run(self, command: str | Sequence[str], stdin: bytes | str | None = None,
            timeout: float | None = None) -> Result:
        self.ran.append((command,) if isinstance(command, str) else tuple(command))
        return Result(0, "", "")

    def preflight(self, plan: object) -> None:
        """Nothing to check: the tree's steps need no tool or headers."""

    def _module_version(self) -> str | None:
        try:
            match = _MODULE_LINE.search((self.root / "proc/driver/nvidia/version").read_text())
        except OSError:
            return None
        return match.group(0).split()[-1] if match else None

    def _host_files(self) -> list[Path]:
        return sorted(p for pattern in HOST_FILE_GLOBS for p in self.root.glob(pattern)
                      if p.is_file() or p.is_symlink())

    def _mknod(self, name: str, major: int, minor: int, mode: int = 0o666) -> None:
        path = self.root / "dev" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            os.mknod(path, mode | stat.S_IFCHR, os.makedev(major, minor))
            os.chmod(path, mode)

    def install_driver(self, version: str, kernel: str) -> str:
        """``NVIDIA-Linux-x86_64-VERSION.run --dkms --silent``: the module built for the running kernel (DKMS's
        tree; loaded at the next boot) and the host's userspace replaced (libcuda, libnvidia-ml, nvidia-smi), the
        previous version's files kept under ``labwright-sim/driver-previous`` for ``rollback_driver``."""
        self.previous = self._module_version()
        module = self.root / "var/lib/dkms/nvidia" / version / kernel / "x86_64/module"
        if not module.exists():
            self._new_builds.append(self.root / "var/lib/dkms/nvidia" / version / kernel)
        module.mkdir(parents=True, exist_ok=True)
        (module / "nvidia.ko").write_bytes(b"\x7fELF fake nvidia module\n")
        saved = self.root / PREVIOUS_DIR
        shutil.rmtree(saved, ignore_errors=True)
        for path in self._host_files():
            target = saved / path.relative_to(self.root)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(path, target)
        libdir = self.root / HOST_LIBDIR
        libdir.mkdir(parents=True, exist_ok=True)
        for lib in ("libcuda.so", "libnvidia-ml.so"):
            (libdir / f"{lib}.{version}").write_bytes(b"\x7fELF fake\n")
            (libdir / f"{lib}.1").symlink_to(f"{lib}.{version}")
        smi = self.root / "usr/bin/nvidia-smi"
        smi.parent.mkdir(parents=True, exist_ok=True)
        smi.write_text(f"#!/bin/sh\necho 'NVIDIA-SMI {version}  Driver Version: {version}'\n")
        self.installed = version
        return f"nvidia {version} built by DKMS for {kernel}, host userspace {version} (simulated under {self.root})"

    def rollback_driver(self) -> str:
        """The driver before ``install_driver`` back: the new version's files and DKMS build removed, the previous
        version's files restored. Its module is loaded at the next boot (the running one stays until then)."""
        new = self.installed
        for path in self._host_files():
            path.unlink()
        saved = self.root / PREVIOUS_DIR
        restored = 0
        if saved.exists():
            for path in sorted(p for p in saved.rglob("*") if p.is_file() or p.is_symlink()):
                target = self.root / path.relative_to(saved)
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(path, target)
                restored += 1
            shutil.rmtree(saved)
        for build in self._new_builds:
            shutil.rmtree(build, ignore_errors=True)
        self._new_builds = []
        self.installed = None
        loaded = self._module_version()
        module = (f"its module is the one running (the node had not booted {new})" if loaded == self.previous else
                  f"the running module is {loaded} until the node boots again: reboot it to load {self.previous}")
        return (f"nvidia driver back to {self.previous}: {new}'s files and DKMS build removed, {restored} file(s) of "
                f"{self.previous} restored; {module}")

    def enable_resume_unit(self, text: str) -> str:
        raise OSError("the lab's simulated reboot needs no resume unit")

    def remove_resume_unit(self) -> None:
        """Nothing was installed."""

    def pin_kernel(self, kernel: str) -> str:
        target = self.root / PIN_FILE
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(kernel + "\n")
        return f"proxmox-boot-tool kernel pin {kernel} (simulated: {PIN_FILE})"

    def reboot(self, kernel: str) -> str:
        proc = self.root / "proc"
        (proc / "sys/kernel").mkdir(parents=True, exist_ok=True)
        (proc / "sys/kernel/osrelease").write_text(kernel + "\n")
        version_file = proc / "driver/nvidia/version"
        if self.installed is not None:
            version_file.write_text(_MODULE_LINE.sub(lambda m: m.group(1) + str(self.installed),
                                                     version_file.read_text(), count=1))
        devices = (proc / "devices").read_text()
        majors = parse_proc_devices(devices)
        after = self.root / SIM_DIR / "uvm-major-after-reboot"
        if after.exists() and "nvidia-uvm" in majors:
            new = int(after.read_text().strip())
            devices = re.sub(rf"(?m)^\s*{majors['nvidia-uvm']} nvidia-uvm$", f"{new:3d} nvidia-uvm", devices)
            (proc / "devices").write_text(devices)
        dev = self.root / "dev"
        for path in list(dev.glob("nvidia*")):
            if path.is_dir():
                shutil.rmtree(path)
            elif path.is_char_device():
                path.unlink()
        made = self.run_boot_unit()
        uvm = parse_proc_devices((proc / "devices").read_text()).get("nvidia-uvm")
        return (f"rebooted into {kernel}, nvidia {self.installed or 'unchanged'} loaded, nvidia-uvm major {uvm}; "
                f"boot unit made {len(made)} node(s)")

    def run_boot_unit(self) -> list[str]:
        """The installed boot unit's ``nvidia-modprobe`` lines against the tree (nvidia-modprobe.c: ``-c N``
        /dev/nvidiaN or nvidiactl for 255, ``-m`` nvidia-modeset, ``-u -c B`` nvidia-uvm B and -tools B+1 with the
        major from /proc/devices, ``-f PROC`` a capability node)."""
        unit = self.root / BOOT_UNIT_PATH.lstrip("/")
        if not unit.exists():
            return []
        majors = parse_proc_devices((self.root / "proc/devices").read_text())
        caps = {proc: int(path.rsplit("nvidia-cap", 1)[1]) for path, proc in CAP_PROC_FILES.items()}
        made: list[str] = []
        for line in unit.read_text().splitlines():
            if not line.startswith("ExecStart="):
                continue
            args = line.removeprefix("ExecStart=").split()[1:]
            values = [args[i + 1] for i, a in enumerate(args[:-1]) if a in ("-c", "-f")]
            nodes: list[tuple[str, int, int, int]] = []
            if "-u" in args and "nvidia-uvm" in majors:
                for base in (int(v) for v in values if v.isdigit()):
                    nodes += [("nvidia-uvm", majors["nvidia-uvm"], base, 0o666),
                              ("nvidia-uvm-tools", majors["nvidia-uvm"], base + 1, 0o666)]
            elif "-u" not in args:
                nodes += [("nvidiactl" if v == "255" else f"nvidia{v}", NVIDIA_MAJOR, int(v), 0o666)
                          for v in values if v.isdigit()]
                nodes += [("nvidia-modeset", NVIDIA_MAJOR, 254, 0o666)] if "-m" in args else []
                nodes += [(f"nvidia-caps/nvidia-cap{caps[v]}", majors.get("nvidia-caps", 0), caps[v], 0o444)
                          for v in values if v in caps and "nvidia-caps" in majors]
            for name, major, minor, mode in nodes:
                if not (self.root / "dev" / name).exists():
                    self._mknod(name, major, minor, mode)
                    made.append("/dev/" + name)
        return made
