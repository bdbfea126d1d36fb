"""The real-node host side (labwright.hostupgrade.realhost.CommandHost) against the doubles of NVIDIA's installer,
dkms, proxmox-boot-tool and systemctl (tests/support/host_tools, derived from their sources), on a host tree: what
each command leaves is checked, not its exit status."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from labwright.errors import BadInput, OperationFailed
from labwright.hosts.local import LocalHost
from labwright.hostupgrade import state
from labwright.hostupgrade.plan import Plan, Step
from labwright.hostupgrade.realhost import CommandHost
from labwright.hostupgrade.run import Upgrade
from labwright.hostupgrade.state import RESUME_UNIT, RESUME_WANTS_LINK, resume_unit_text
from support.fake_nvidia import DRIVER_VERSION, fake_run_installer, write_installer
from support.host_doubles import TOOLS, make_node, tool_env
from support.host_tree import TreeHost

OLD, NEW = DRIVER_VERSION, "550.54.15"
RUNNING, NEXT = "6.8.12-4-pve", "6.8.12-9-pve"


def tree(root: Path, esp: bool = True, headers: tuple[str, ...] = (RUNNING, NEXT), old: str = OLD,
         new: str = NEW) -> Path:
    """A node running driver ``old`` (loaded, DKMS-built for the running kernel), ``old``'s and ``new``'s .run in
    the repository."""
    (root / "proc/sys/kernel").mkdir(parents=True)
    (root / "proc/sys/kernel/osrelease").write_text(RUNNING + "\n")
    (root / "proc/driver/nvidia").mkdir(parents=True)
    (root / "proc/driver/nvidia/version").write_text(f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {old}  x\n")
    (root / "etc/systemd/system").mkdir(parents=True)
    make_node(root, (RUNNING, NEXT), headers, old, RUNNING, esp=esp)
    libdir = root / "usr/lib/x86_64-linux-gnu"
    libdir.mkdir(parents=True)
    (libdir / f"libcuda.so.{old}").write_bytes(b"old")
    (libdir / "libcuda.so.1").symlink_to(f"libcuda.so.{old}")
    repo = root / "var/cache/labwright/nvidia"
    repo.mkdir(parents=True)
    for version in (old, new):
        write_installer(repo, version, fake_run_installer(version))
    return root


def host(root: Path, path: str | None = None) -> CommandHost:
    env = tool_env(root)
    runner = LocalHost(["env", f"PATH={path or env['PATH']}", f"LW_FAKE_ROOT={root}", f"LW_HOST_TOOLS={TOOLS}"])
    return CommandHost(TreeHost(root), root / "var/cache/labwright/nvidia", runner=runner)


def dkms_status(root: Path, *args: str) -> str:
    return subprocess.run([str(TOOLS / "dkms"), "status", *args], env=tool_env(root), capture_output=True,
                          text=True, check=True).stdout


def plan(boot: str, pin: bool = False) -> Plan:
    steps = [Step("pin-kernel", RUNNING, "")] if pin else []
    return Plan("lwnode1", OLD, NEW, boot, steps)


def test_the_driver_is_built_for_the_next_kernel_while_the_running_module_stays(tmp_path):
    root = tree(tmp_path)
    h = host(root)
    said = h.install_driver(NEW, NEXT)
    assert said.startswith(f"nvidia {NEW} built by DKMS for {NEXT} (nvidia.ko), host userspace {NEW}")
    assert dkms_status(root) == f"nvidia/{NEW}, {NEXT}, x86_64: installed\n"  # the old one was uninstalled
    assert (root / f"lib/modules/{NEXT}/updates/dkms/nvidia.ko").read_text() == f"nvidia {NEW} for {NEXT}\n"
    assert os.readlink(root / "usr/lib/x86_64-linux-gnu/libcuda.so.1") == f"libcuda.so.{NEW}"
    assert f"Kernel Module  {OLD}" in (root / "proc/driver/nvidia/version").read_text()  # loaded until the boot
    log = (root / "var/log/nvidia-installer.log").read_text()
    assert "--allow-installation-with-running-driver" in log and "is now complete." in log
    assert h.installed == NEW and h.previous == OLD


def test_an_installer_that_exits_0_without_the_dkms_install_is_caught(tmp_path):
    """The installer only warns when its DKMS registration fails and exits 0 (misc.c dkms_register_module): the
    module then sits in /kernel/drivers/video, rebuilt for no later kernel. The step fails, naming the log's
    error, and the driver is not counted as installed."""
    root = tree(tmp_path)
    (root / "labwright-sim").mkdir()
    (root / "labwright-sim/dkms-install-fails").write_text("")
    direct = subprocess.run(["sh", str(root / f"var/cache/labwright/nvidia/NVIDIA-Linux-x86_64-{NEW}.run"),
                             "--silent", f"--kernel-name={RUNNING}", "--allow-installation-with-running-driver"],
                            env=tool_env(root), capture_output=True, text=True)
    assert direct.returncode == 0 and "Failed to register the NVIDIA kernel modules with DKMS" in direct.stderr
    h = host(root)
    with pytest.raises(OperationFailed) as info:
        h.install_driver(NEW, NEXT)
    message = str(info.value)
    assert message.startswith(f"NVIDIA-Linux-x86_64-{NEW}.run --dkms for {NEXT}: no nvidia.ko in "
                              f"/lib/modules/{NEXT}/updates/dkms;")
    assert "the installer says: Failed to run `dkms install --no-depmod -m nvidia" in message
    assert message.endswith("(log: /var/log/nvidia-installer.log)") and "\n" not in message
    assert h.installed is None


def test_a_module_that_does_not_build_fails_the_step_naming_the_log(tmp_path):
    root = tree(tmp_path)
    (root / "labwright-sim").mkdir()
    (root / "labwright-sim/nvidia-build-fails").write_text("")
    with pytest.raises(OperationFailed) as info:
        host(root).install_driver(NEW, NEXT)
    message = str(info.value)
    assert "exit 1, no DKMS build of nvidia/550.54.15 for 6.8.12-9-pve" in message
    assert message.endswith('the installer says: An error occurred while performing the step: "Building kernel '
                            'modules". See /var/log/nvidia-installer.log for details. '
                            "(log: /var/log/nvidia-installer.log)")
    assert "Installation has failed." not in message  # the closing line every failed run ends with says nothing


def test_rollback_reinstalls_the_previous_version_for_the_running_kernel(tmp_path):
    root = tree(tmp_path)
    h = host(root)
    h.install_driver(NEW, NEXT)
    said = h.rollback_driver()
    assert said == (f"nvidia driver back to {OLD} (NVIDIA-Linux-x86_64-{OLD}.run --dkms for {RUNNING}); its module "
                    "is the one running")
    assert dkms_status(root) == f"nvidia/{OLD}, {RUNNING}, x86_64: installed\n"
    assert os.readlink(root / "usr/lib/x86_64-linux-gnu/libcuda.so.1") == f"libcuda.so.{OLD}"
    assert h.installed is None


def test_pin_refreshes_the_esps_or_updates_grub(tmp_path):
    """Without a terminal proxmox-boot-tool only writes the pin on an ESP-managed node; the next boot would still
    load the newest kernel unless refresh runs (the boot entry is what the doubles record)."""
    for esp in (True, False):
        root = tree(tmp_path / str(esp), esp=esp)
        said = host(root).pin_kernel(RUNNING)
        assert (root / "etc/kernel/proxmox-boot-pin").read_text() == RUNNING + "\n"
        assert (root / "labwright-sim/boot-entry").read_text() == RUNNING + "\n"
        assert said == f"proxmox-boot-tool kernel pin {RUNNING} (/etc/kernel/proxmox-boot-pin" + (
            ", ESPs refreshed)" if esp else ")")


def test_pin_of_a_kernel_without_an_image_is_refused_by_the_tool(tmp_path):
    root = tree(tmp_path)
    with pytest.raises(OperationFailed) as info:
        host(root).pin_kernel("6.2.16-3-pve")
    assert str(info.value).startswith("proxmox-boot-tool kernel pin 6.2.16-3-pve failed (exit 1): ")
    assert not (root / "etc/kernel/proxmox-boot-pin").exists()


def test_preflight_names_missing_tools_and_headers(tmp_path):
    root = tree(tmp_path, headers=(RUNNING,))
    with pytest.raises(BadInput) as info:
        host(root).preflight(plan(NEXT))
    assert str(info.value) == (f"kernel {NEXT}: no headers (/lib/modules/{NEXT}/build is missing), so DKMS cannot "
                               f"build the nvidia module for it; apt install proxmox-headers-{NEXT} and run again")
    host(root).preflight(plan(RUNNING, pin=True))  # the doubles are all there
    bare = tmp_path / "bin"
    bare.mkdir()
    (bare / "sh").symlink_to("/bin/sh")
    with pytest.raises(BadInput) as info:
        host(root, path=str(bare)).preflight(plan(RUNNING, pin=True))
    assert str(info.value).startswith("host upgrade: dkms, systemctl, proxmox-boot-tool not found on this host; "
                                      "dkms: apt install dkms;")


def test_the_resume_unit_is_enabled_and_removed_as_systemctl_leaves_it(tmp_path):
    root = tree(tmp_path)
    h = host(root)
    text = resume_unit_text("lwnode1", ["/usr/bin/python3", "-m", "labwright", "host", "upgrade", "lwnode1",
                                        "--resume"])
    assert h.enable_resume_unit(text) == f"{RESUME_UNIT} enabled"
    link = root / RESUME_WANTS_LINK.lstrip("/")
    assert link.is_symlink() and os.readlink(link) == f"/etc/systemd/system/{RESUME_UNIT}"
    h.remove_resume_unit()
    assert not link.is_symlink() and not (root / f"etc/systemd/system/{RESUME_UNIT}").exists()
    h.remove_resume_unit()  # nothing there: nothing to do


def test_enable_without_an_install_section_exits_0_and_is_caught(tmp_path):
    """systemctl enable of a unit with no [Install] section only warns and exits 0, enabling nothing."""
    root = tree(tmp_path)
    text = resume_unit_text("lwnode1", ["/usr/bin/python3", "-m", "labwright"]).split("[Install]")[0]
    with pytest.raises(OperationFailed) as info:
        host(root).enable_resume_unit(text)
    assert f"systemctl enable {RESUME_UNIT} exited 0 but {RESUME_WANTS_LINK} is not there" in str(info.value)


def test_reboot_is_asked_of_systemd(tmp_path):
    root = tree(tmp_path)
    said = host(root).reboot(NEXT)
    assert said == f"reboot into {NEXT} requested (systemctl reboot); the upgrade resumes at boot"
    assert (root / "labwright-sim/reboot-requested").exists()


def test_preflight_refuses_a_host_not_booted_with_systemd(tmp_path):
    root = tree(tmp_path)
    (root / "run/systemd/system").rmdir()
    with pytest.raises(BadInput) as info:
        host(root).preflight(plan(NEXT))
    assert str(info.value).startswith("host upgrade: this host was not booted with systemd (no /run/systemd/system)")


# --- the run up to the reboot, and what it leaves for the boot unit ------------------------------------------------
def driver_only_plan() -> Plan:
    """The host steps alone (a node whose guests are elsewhere in these tests): install, reboot, then a step the
    resumed run does."""
    return Plan("lwnode1", OLD, NEW, NEXT, [Step("host-driver", "lwnode1", ""), Step("reboot", "lwnode1", ""),
                                            Step("kernel", NEXT, "after the boot")])


def test_the_run_saves_its_state_enables_the_resume_unit_and_asks_for_the_reboot(tmp_path, monkeypatch):
    root = tree(tmp_path)
    monkeypatch.setenv("PROXMOX_TOKEN_ID", "root@pam!lw")
    monkeypatch.setenv("PROXMOX_TOKEN_SECRET", 'se"cret')
    monkeypatch.setenv("SSL_CERT_FILE", "/etc/ssl/certs/lab-ca.pem")
    monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
    upgrade = Upgrade(driver_only_plan(), TreeHost(root), root / "var/cache/labwright/nvidia", None, host=host(root))
    out = upgrade.run({})
    assert out.ok and out.rebooting, out.message
    assert out.message.startswith(f"node lwnode1: nvidia {NEW} installed for {NEXT}, rebooting; {RESUME_UNIT} resumes")
    assert [d.action for d in out.done] == ["host-driver", "reboot"]
    saved = state.load(TreeHost(root))
    assert saved is not None and saved.phase == state.REBOOTING and saved.next_step == 2
    assert saved.previous_driver == OLD and [d["action"] for d in saved.done] == ["host-driver"]
    assert (root / "var/lib/labwright/host-upgrade.json").stat().st_mode & 0o777 == 0o600
    # an LXD upgrade needs no Proxmox credential at boot: none is carried, whatever the environment holds
    assert not (root / "var/lib/labwright/host-upgrade.env").exists()
    unit = (root / f"etc/systemd/system/{RESUME_UNIT}").read_text()
    argv = state.unit_exec_start(unit)
    assert argv[1:] == ["-I", "-m", "labwright", "host", "upgrade", "lwnode1", "--resume"]
    assert (root / RESUME_WANTS_LINK.lstrip("/")).is_symlink()
    assert (root / "labwright-sim/reboot-requested").exists()


def test_a_refused_reboot_leaves_nothing_to_resume(tmp_path):
    root = tree(tmp_path)
    (root / "labwright-sim").mkdir()
    (root / "labwright-sim/reboot-refused").write_text("")
    upgrade = Upgrade(driver_only_plan(), TreeHost(root), root / "var/cache/labwright/nvidia", None, host=host(root))
    out = upgrade.run({})
    assert not out.ok and not out.rebooting
    assert out.message.startswith("systemctl reboot failed (exit 1): Failed to reboot system via logind: Access "
                                  "denied; restored 0/0 guest snapshot(s)"), out.message
    saved = state.load(TreeHost(root))
    assert saved is not None and saved.phase == state.FAILED
    assert saved.outcome is not None and saved.outcome["ok"] is False
    assert not (root / f"etc/systemd/system/{RESUME_UNIT}").exists()
    assert not (root / RESUME_WANTS_LINK.lstrip("/")).is_symlink()
    assert not (root / "var/lib/labwright/host-upgrade.env").exists()


def test_state_that_cannot_be_read_back_is_one_line(tmp_path):
    path = tmp_path / "var/lib/labwright/host-upgrade.json"
    path.parent.mkdir(parents=True)
    for text in ("{not json", '{"node": "x"}', "[]"):
        path.write_text(text)
        with pytest.raises(BadInput) as info:
            state.load(TreeHost(tmp_path))
        assert str(info.value).startswith(f"{path}: not a host upgrade state labwright can read (")
        assert "\n" not in str(info.value)
    path.unlink()
    assert state.load(TreeHost(tmp_path)) is None
