"""The host side of the upgrade on the node itself: NVIDIA's installer, DKMS, proxmox-boot-tool and systemd for real.

``CommandHost`` runs them and then checks what they left, because an exit status is not proof: the installer's
``--dkms`` path reports success from its own log, and ``systemctl enable`` of a unit without an [Install] target
exits 0 having enabled nothing.

- driver: ``sh NVIDIA-Linux-x86_64-VER.run --silent --dkms --kernel-name=BOOT`` with ``BOOT`` the kernel the node
  boots next, and ``--allow-installation-with-running-driver`` where VER's installer knows it (545.23.06 and later:
  every option is chosen by VER, labwright.hostupgrade.installer_options; an older installer with a module loaded is
  refused before it runs). For a kernel other than the running one the installer builds and installs the module
  for it through DKMS (``dkms add``, ``dkms build -k BOOT``, ``dkms install -k BOOT``) and does not try to load it,
  so the engines that hold the running module keep running until the reboot. Checked: DKMS's module for BOOT
  (``/var/lib/dkms/nvidia/VER/BOOT/<arch>/module/nvidia.ko*``), the installed copy in
  ``/lib/modules/BOOT/updates/dkms/``, and the host's ``libcuda.so.VER``. A failure quotes the installer's ERROR
  lines that say what failed (not its closing "Installation has failed.": labwright.hostupgrade.installer) and names
  the log it wrote.
- the new kernel's build: the same run (``--kernel-name``), so a kernel without headers fails before the reboot.
- ``proxmox-boot-tool kernel pin K``: checked by the pin file it writes (``/etc/kernel/proxmox-boot-pin``).
- reboot: ``systemctl reboot`` after the state file and the resume unit are in place (state.py).
- rollback: the previous version's installer again, when the repository still has it.
- every installer is verified against the sha256 recorded beside it (``.run.sha256sum``, labwright.hostupgrade
  .trust) right before it runs.

Every command runs through ``runner`` (this machine's shell by default; tests put the doubles of tests/support/
host_tools first on PATH with a host tree as their root); the node's files are read and written through ``files``
(this machine's ``LocalHost``; tests: a double over that tree, tests/support/host_tree.py).
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from pathlib import Path

from labwright.atomic import write_text_atomic
from labwright.errors import BadInput, OperationFailed
from labwright.gpu.nvidia.host import GpuHost
from labwright.gpu.nvidia.upgrade_facts import dkms_tree_builds, installer_name, packaged_modules, running_kernel
from labwright.hosts import Host, Result
from labwright.hosts.local import LocalHost
from labwright.hostupgrade.installer import failure, named_log
from labwright.hostupgrade.installer_options import UNLOAD, installer_args, refusal
from labwright.hostupgrade.plan import Plan, headers_package
from labwright.hostupgrade.state import RESUME_UNIT, RESUME_UNIT_PATH, RESUME_WANTS_LINK
from labwright.hostupgrade.trust import verify_installer
from labwright.shell import quote

INSTALLER_LOG = "/var/log/nvidia-installer.log"
#: Where the driver's userspace lies on the host (the installer's default for Debian/PVE), without the leading /.
HOST_LIBDIR = "usr/lib/x86_64-linux-gnu"
#: What ``proxmox-boot-tool kernel pin K`` writes (proxmox-kernel-helper), without the leading /.
PIN_FILE = "etc/kernel/proxmox-boot-pin"
#: The ESPs proxmox-boot-tool manages (absent: GRUB, where pin runs update-grub itself).
ESP_LIST = "/etc/kernel/proxmox-boot-uuids"
#: Seconds the installer may take (it compiles the module: minutes on a homelab CPU).
INSTALL_TIMEOUT = 1800.0


class CommandHost:
    """The node's own tools, run and then checked (module files, pin file, libraries)."""

    #: The reboot ends this process: the run saves its state and a boot unit resumes it (state.py).
    reboots_for_real = True

    def __init__(self, files: LocalHost, repository: Path, runner: Host | None = None):
        self.files = files
        self.repository = repository
        self.runner = runner or LocalHost(label="this host")
        self.label = self.runner.label
        self.installed: str | None = None
        self.previous: str | None = None

    def run(self, command: str | Sequence[str], stdin: bytes | str | None = None,
            timeout: float | None = None) -> Result:
        """A command of the node's own (the boot unit's systemctl), through ``runner``."""
        return self.runner.run(command, stdin=stdin, timeout=timeout)

    # --- checks before anything is done ---------------------------------------------------------------------------
    def preflight(self, plan: Plan) -> None:
        """BadInput naming the missing tool or headers, before the first snapshot."""
        boot_kernel = plan.boot_kernel
        pin = any(s.action == "pin-kernel" for s in plan.steps)
        needed = ["sh", "dkms", "systemctl"] + (["proxmox-boot-tool"] if pin else [])
        missing = [tool for tool in needed if not self.runner.run(f"command -v {tool}").ok]
        if missing:
            hint = {"dkms": "apt install dkms", "proxmox-boot-tool": "it is Proxmox VE's (proxmox-kernel-helper); "
                    "on another distribution hold the kernel in the boot loader and run without --pin-kernel",
                    "systemctl": "the resume after the reboot is a systemd unit"}
            raise BadInput(f"host upgrade: {', '.join(missing)} not found on this host; "
                           + "; ".join(f"{m}: {hint.get(m, 'install it')}" for m in missing))
        booted = self.files.stat("/run/systemd/system")
        if booted is None or not booted.is_dir:
            # sd_booted(): what systemctl itself checks before it talks to the manager (sd-daemon.c)
            raise BadInput("host upgrade: this host was not booted with systemd (no /run/systemd/system); the "
                           f"upgrade goes on after its reboot through the systemd unit {RESUME_UNIT}: run it on a "
                           "systemd host")
        if not self.files.exists(f"/lib/modules/{boot_kernel}/build"):
            raise BadInput(f"kernel {boot_kernel}: no headers (/lib/modules/{boot_kernel}/build is missing), so DKMS "
                           f"cannot build the nvidia module for it; apt install {headers_package(boot_kernel)} and "
                           "run again")

    # --- the steps ------------------------------------------------------------------------------------------------
    def _run(self, command: str, what: str, timeout: float = 120.0) -> Result:
        result = self.runner.run(command, timeout=timeout)
        if not result.ok:
            raise OperationFailed(f"{what} failed (exit {result.rc}): {_tail(result)}")
        return result

    def install_driver(self, version: str, kernel: str) -> str:
        """The driver ``version`` for ``kernel`` (the kernel the node boots next): installer, then the results."""
        installer = self.repository / installer_name(version)
        self.previous = GpuHost(self.files).driver_version()
        cannot = refusal(version, self.previous)
        if cannot:  # the plan refuses it first (make_plan); never run an installer that stops at its options
            raise OperationFailed(f"{installer.name} not run: {cannot}")
        verify_installer(installer, version)  # its recorded sha256 (trust.py), right before it runs as root
        command = installer_command(installer, version, kernel)
        result = self.runner.run(command, timeout=INSTALL_TIMEOUT)
        problems = []
        if not result.ok:
            problems.append(f"exit {result.rc}")
        built = self.dkms_module(version, kernel)
        if built is None:
            problems.append(f"no DKMS build of nvidia/{version} for {kernel} in /var/lib/dkms")
        installed = self.installed_module(kernel)
        if installed is None:
            problems.append(f"no nvidia.ko in /lib/modules/{kernel}/updates/dkms")
        if not self.files.exists(f"/{HOST_LIBDIR}/libcuda.so.{version}"):
            problems.append(f"no /{HOST_LIBDIR}/libcuda.so.{version}")
        if problems:
            raise OperationFailed(f"{installer.name} --dkms for {kernel}: {', '.join(problems)}; "
                                  f"{self._installer_said(result)}")
        self.installed = version
        module = posixpath.basename(built) if built else ""
        return f"nvidia {version} built by DKMS for {kernel} ({module}), host userspace {version}"

    def dkms_module(self, version: str, kernel: str) -> str | None:
        """The module file of DKMS's finished build of ``version`` for ``kernel`` (a ``.tmp_ARCH_XXXXXX`` directory
        a failed build left is none: facts.dkms_tree_builds)."""
        found = dkms_tree_builds(self.files, version, kernel)
        return found[0].module if found else None

    def installed_module(self, kernel: str) -> str | None:
        found = packaged_modules(self.files, kernel)
        return found[0] if found else None

    def rollback_driver(self) -> str:
        """The version before ``install_driver`` again, from its installer in the repository (loaded at the next
        boot); OSError-free: a failure is OperationFailed naming what to run."""
        new, previous = self.installed, self.previous
        if previous is None:
            raise OperationFailed(f"no driver was loaded before {new}; remove it with nvidia-uninstall if needed")
        installer = self.repository / installer_name(previous)
        if not installer.is_file():
            raise OperationFailed(f"{installer.name} is not in the repository {self.repository}; put it there and "
                                  "run it with --dkms")
        running = running_kernel(self.files)
        cannot = refusal(previous, GpuHost(self.files).driver_version())
        if cannot:
            by_hand = " ".join(["sh", quote(str(installer)), *installer_args(previous, running, INSTALLER_LOG)])
            raise OperationFailed(f"{installer.name} not run: {cannot}; put {previous} back by hand: stop the GPU "
                                  f"guests, {UNLOAD}, {by_hand}, then reboot")
        verify_installer(installer, previous)
        result = self.runner.run(installer_command(installer, previous, running), timeout=INSTALL_TIMEOUT)
        if not result.ok:
            raise OperationFailed(f"{installer.name} --dkms failed (exit {result.rc}): {self._installer_said(result)}")
        self.installed = None
        loaded = GpuHost(self.files).driver_version()
        module = ("its module is the one running" if loaded == previous else
                  f"the running module is {loaded} until the node boots again: reboot it to load {previous}")
        return f"nvidia driver back to {previous} ({installer.name} --dkms for {running}); {module}"

    def pin_kernel(self, kernel: str) -> str:
        """``proxmox-boot-tool kernel pin K``, then ``refresh`` on a node whose ESPs it manages: run without a
        terminal, pin only writes the pin file there and says "Use the 'refresh' command" (proxmox-kernel-helper
        8.1.0, _ask_interactive_refresh), so the next boot would still load the new kernel."""
        self._run(f"proxmox-boot-tool kernel pin {quote(kernel)}", f"proxmox-boot-tool kernel pin {kernel}")
        refreshed = ""
        if self.files.exists(ESP_LIST):
            self._run("proxmox-boot-tool refresh", "proxmox-boot-tool refresh", timeout=600.0)
            refreshed = ", ESPs refreshed"
        try:
            pinned = self.files.read_text(f"/{PIN_FILE}").strip()
        except OSError:
            pinned = ""
        if pinned != kernel:
            raise OperationFailed(f"proxmox-boot-tool kernel pin {kernel} exited 0 but /{PIN_FILE} says "
                                  f"{pinned or 'nothing'}; pin it by hand and run again")
        return f"proxmox-boot-tool kernel pin {kernel} (/{PIN_FILE}{refreshed})"

    def reboot(self, kernel: str) -> str:
        self._run("systemctl reboot", "systemctl reboot")
        return f"reboot into {kernel} requested (systemctl reboot); the upgrade resumes at boot"

    def enable_resume_unit(self, text: str) -> str:
        """Write the resume unit and enable it; checked by the link ``systemctl enable`` makes."""
        path = self.files.local_path(RESUME_UNIT_PATH)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(path, text, mode=0o644)
        except OSError as exc:
            raise OperationFailed(f"writing {RESUME_UNIT_PATH} failed ({exc}); not rebooting") from exc
        self._run("systemctl daemon-reload", "systemctl daemon-reload")
        self._run(f"systemctl enable {RESUME_UNIT}", f"systemctl enable {RESUME_UNIT}")
        if not self._enabled():
            raise OperationFailed(f"systemctl enable {RESUME_UNIT} exited 0 but {RESUME_WANTS_LINK} is not there; "
                                  "not rebooting (nothing would resume the upgrade)")
        return f"{RESUME_UNIT} enabled"

    def _enabled(self) -> bool:
        """The link ``systemctl enable`` makes for the resume unit is there."""
        link = self.files.stat(RESUME_WANTS_LINK, follow_symlinks=False)
        return link is not None and link.is_symlink

    def remove_resume_unit(self) -> None:
        path = self.files.local_path(RESUME_UNIT_PATH)
        if path.exists() or self._enabled():
            self._run(f"systemctl disable {RESUME_UNIT}", f"systemctl disable {RESUME_UNIT}")
        path.unlink(missing_ok=True)
        self.runner.run("systemctl daemon-reload")  # the unit is gone either way; systemd forgets it at the reload
        if self._enabled():
            raise OperationFailed(f"systemctl disable {RESUME_UNIT} left {RESUME_WANTS_LINK}")

    # --- facts ----------------------------------------------------------------------------------------------------
    def _installer_said(self, result: Result) -> str:
        """What failed, in the installer's words (labwright.hostupgrade.installer: its ERROR lines that name the
        failure, not the closing "Installation has failed." every failed run ends with), from its output or else
        its log, and the log it names."""
        output = f"{result.stderr}\n{result.stdout}"
        log = named_log(output) if "Installation has failed." in output else INSTALLER_LOG
        try:
            text = self.files.get(log).decode(errors="replace")
        except OSError:
            text = ""
        found = failure(output, text)
        said = found.said()
        where = "it stopped at its options and wrote no log" if found.commandline else f"log: {found.log or log}"
        return f"{f'the installer says: {said}' if said else _tail(result)} ({where})"


def installer_command(installer: Path, version: str, kernel: str) -> str:
    """The host install with driver ``version``'s installer: silent (``--ui=none --no-questions``), registered with
    DKMS, built for ``kernel``, logged to ``INSTALLER_LOG``, and (545.23.06 and later) allowed while the running
    module is in use (the guests' engines hold it until the reboot: without the flag a silent 545+ run takes the
    default answer, "Abort installation"; kernel.c check_for_unloaded_kernel_module, which ``--kernel-name`` alone
    does not skip). Only the options ``version``'s installer knows (labwright.hostupgrade.installer_options): one it
    does not know stops it at once."""
    args = " ".join(quote(arg) for arg in installer_args(version, kernel, INSTALLER_LOG))
    return f"sh {quote(str(installer))} {args}"


def _tail(result: Result) -> str:
    return result.last_line()[:200]
