"""labwright.gpu.nvidia: host GPU facts from fake /proc and /dev trees (real mknod nodes), the boot unit, and the
driver-match rule."""

from __future__ import annotations

import os
import subprocess

import pytest

from labwright.facts.nvidia import NvidiaDriverMatch, NvidiaDriverVersion
from labwright.gpu.devices import parse_proc_devices
from labwright.gpu.nvidia.boot_unit import (
    BOOT_UNIT,
    BOOT_UNIT_PATH,
    boot_commands,
    boot_unit,
    install_boot_unit,
    installed_unit,
    missing_paths,
    remove_boot_unit,
    unit_paths,
)
from labwright.gpu.nvidia.driver import check_driver_match, parse_driver_version, parse_nvidia_smi, userspace_versions
from labwright.gpu.nvidia.host import UVM_PREFLIGHT
from labwright.guests.lxd import LxdBackend
from labwright.guests.model import spec_from_data
from labwright.lxd.client import Endpoint, LxdClient
from support.fake_nvidia import make_container_libraries, make_fake_nvidia_host, reboot, run_boot_unit
from support.gpu_host import TreeGpuHost

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")

OPEN_MODULE = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.133.07  Release Build  "
               "(dvs-builder@U16-I3-B03-4-3)  Fri Mar 14 07:17:28 UTC 2025\nGCC version:  gcc version 12.2.0\n")


def test_driver_version_from_both_module_flavours():
    assert parse_driver_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 "
                                "01:44:30 UTC 2024\n") == "550.54.14"
    assert parse_driver_version(OPEN_MODULE) == "570.133.07"
    assert parse_driver_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  470.256  x\n") == "470.256"
    assert parse_driver_version("") is None
    assert parse_driver_version("GCC version: 12.2.0 Kernel Module 1.2.3\n") is None


def test_proc_devices_character_majors_only():
    text = "Character devices:\n195 nvidia-frontend\n508 nvidia-uvm\n\nBlock devices:\n259 blkext\n508 md\n"
    assert parse_proc_devices(text) == {"nvidia-frontend": 195, "nvidia-uvm": 508}


def test_userspace_versions_take_versioned_files_only():
    names = ["libcuda.so", "libcuda.so.1", "libcuda.so.550.54.14", "/usr/lib64/libnvidia-ml.so.550.54.14",
             "libnvidia-ml.so.1", "libnvidia-encode.so.550.54.14"]
    assert userspace_versions(names) == {"libcuda.so": "550.54.14", "libnvidia-ml.so": "550.54.14"}


def test_nvidia_smi_output():
    assert parse_nvidia_smi("| NVIDIA-SMI 550.54.14   Driver Version: 550.54.14   CUDA Version: 12.4 |") == \
        ("550.54.14", False)
    assert parse_nvidia_smi("Failed to initialize NVML: Driver/library version mismatch\n") == (None, True)


@pytest.mark.parametrize(("host", "libs", "smi", "status"), [
    ("550.54.14", {"libcuda.so": "550.54.14", "libnvidia-ml.so": "550.54.14"}, "", "match"),
    # same major is NOT enough: NVRM "API mismatch" (570.148.06 vs .08)
    ("570.148.08", {"libcuda.so": "570.148.06"}, "", "mismatch"),
    ("550.54.14", {"libcuda.so": "550.54.14", "libnvidia-ml.so": "545.29.06"}, "", "mismatch"),
    ("550.54.14", {"libcuda.so": "550.54.14"}, "Failed to initialize NVML: Driver/library version mismatch",
     "mismatch"),
    ("550.54.14", {}, "", "missing-userspace"),
    (None, {"libcuda.so": "550.54.14"}, "", "no-host-driver"),
])
def test_driver_match_rule(host, libs, smi, status):
    result = check_driver_match(host, libs, smi)
    assert result.status == status and result.ok == (status == "match")
    if status in ("mismatch", "missing-userspace"):
        assert f"NVIDIA-Linux-x86_64-{host}.run --no-kernel-module" in result.message


@needs_root
def test_device_nodes_and_majors_from_a_fake_host(tmp_path):
    make_fake_nvidia_host(tmp_path, gpus=2, uvm_major=237, caps_major=238)
    host = TreeGpuHost(tmp_path)
    nodes = [(n.path, n.major, n.minor) for n in host.device_nodes()]
    assert nodes == [
        ("/dev/nvidia0", 195, 0), ("/dev/nvidia1", 195, 1), ("/dev/nvidia-modeset", 195, 254),
        ("/dev/nvidia-uvm", 237, 0), ("/dev/nvidia-uvm-tools", 237, 1), ("/dev/nvidiactl", 195, 255),
        ("/dev/nvidia-caps/nvidia-cap1", 238, 1), ("/dev/nvidia-caps/nvidia-cap2", 238, 2),
    ]
    assert host.device_nodes()[0].source == str(tmp_path / "dev" / "nvidia0")
    assert host.majors() == {"nvidia-frontend": 195, "nvidia-uvm": 237, "nvidia-caps": 238}
    assert host.driver_version() == "550.54.14" and host.has_driver()
    assert host.preflight_commands() == []
    assert not host.has_container_tools()
    (tmp_path / "usr" / "bin").mkdir(parents=True)
    (tmp_path / "usr" / "bin" / "nvidia-container-cli").write_text("#!/bin/sh\n")
    assert host.has_container_tools()


@needs_root
def test_missing_uvm_asks_for_nvidia_modprobe(tmp_path):
    make_fake_nvidia_host(tmp_path, with_uvm=False)
    host = TreeGpuHost(tmp_path)
    assert host.preflight_commands() == [UVM_PREFLIGHT] == [("nvidia-modprobe", "-u", "-c", "0")]
    assert "nvidia-uvm" not in {n.name for n in host.device_nodes()}


@needs_root
def test_the_uvm_preflight_before_a_gpu_guest_starts_runs_on_the_gpu_hosts_host(tmp_path):
    """LxdBackend runs nvidia-modprobe through the GpuHost's Host (here the tree's double: recorded, not run), and
    only where the tool is there (the uvm nodes are optional devices)."""
    make_fake_nvidia_host(tmp_path, with_uvm=False)
    host = TreeGpuHost(tmp_path)
    backend = LxdBackend(LxdClient(Endpoint(socket_path=str(tmp_path / "no-daemon"))), gpu_host=host)  # never asked
    backend._preflight(spec_from_data("@lxd/web1", {"backend": "lxd", "gpu": "none"}, source="inv.py"))
    assert host.ran == []
    backend._preflight(spec_from_data("@lxd/web1", {"backend": "lxd", "gpu": "nvidia"}, source="inv.py"))
    assert host.ran == [("command -v nvidia-modprobe >/dev/null 2>&1 || exit 0; nvidia-modprobe -u -c 0",)]


def test_host_without_driver(tmp_path):
    make_fake_nvidia_host(tmp_path, driver=None)
    host = TreeGpuHost(tmp_path)
    assert host.driver_version() is None and host.device_nodes() == [] and host.preflight_commands() == []
    message = host.missing_driver_message("inv.py: guest a")
    assert message.startswith("inv.py: guest a: gpu: nvidia, but this host has no NVIDIA driver")
    assert "\n" not in message


# --- the pyinfra facts, their shell commands run for real against fake trees --------------------
def run_fact(fact_cls, root):
    fact = fact_cls()
    proc = subprocess.run(["sh", "-c", fact.command(root=str(root))], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return fact.process(proc.stdout.splitlines())


@needs_root
def test_driver_match_fact_reports_a_mismatch_then_a_match(tmp_path):
    make_fake_nvidia_host(tmp_path, driver="570.148.08")
    make_container_libraries(tmp_path, "570.148.06")
    result = run_fact(NvidiaDriverMatch, tmp_path)
    assert result["status"] == "mismatch" and not result["ok"]
    assert result["host_version"] == "570.148.08"
    assert result["userspace"] == {"libcuda.so": "570.148.06", "libnvidia-ml.so": "570.148.06"}
    assert "libcuda.so 570.148.06" in result["message"]
    # What re-running the deploy after a host driver upgrade does: reinstall the userspace to match.
    for lib in ("libcuda.so", "libnvidia-ml.so"):
        (tmp_path / "usr/lib/x86_64-linux-gnu" / f"{lib}.570.148.06").unlink()
    make_container_libraries(tmp_path, "570.148.08")
    assert run_fact(NvidiaDriverMatch, tmp_path)["status"] == "match"
    assert run_fact(NvidiaDriverVersion, tmp_path) == "570.148.08"


def test_driver_match_fact_without_driver_or_libraries(tmp_path):
    assert run_fact(NvidiaDriverMatch, tmp_path)["status"] == "no-host-driver"
    assert run_fact(NvidiaDriverVersion, tmp_path) is None
    (tmp_path / "proc/driver/nvidia").mkdir(parents=True)
    (tmp_path / "proc/driver/nvidia/version").write_text(OPEN_MODULE)
    result = run_fact(NvidiaDriverMatch, tmp_path)
    assert result["status"] == "missing-userspace" and result["host_version"] == "570.133.07"


def test_driver_match_fact_on_this_machine_runs():
    # The real root: no driver on a CI machine, a verdict on a GPU host; either way the command works.
    assert run_fact(NvidiaDriverMatch, "/")["status"] in ("match", "mismatch", "missing-userspace", "no-host-driver")


# --- the boot unit ----------------------------------------------------------------------------------
ALL_NODES = ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-modeset", "/dev/nvidia-uvm",
             "/dev/nvidia-uvm-tools", "/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia-caps/nvidia-cap2"]


def test_boot_commands_follow_nvidia_modprobes_options():
    commands, uncovered = boot_commands([*ALL_NODES, "/dev/nvidia-caps/nvidia-cap9"])
    assert commands == [
        ("/usr/bin/nvidia-modprobe", "-c", "0", "-c", "1", "-c", "255"),
        ("/usr/bin/nvidia-modprobe", "-m"),
        ("/usr/bin/nvidia-modprobe", "-u", "-c", "0"),  # -u and plain -c are separate branches: a call of its own
        ("/usr/bin/nvidia-modprobe", "-f", "/proc/driver/nvidia/capabilities/mig/config",
         "-f", "/proc/driver/nvidia/capabilities/mig/monitor"),
    ]
    assert uncovered == ["/dev/nvidia-caps/nvidia-cap9"]
    assert boot_commands(["/dev/nvidia-uvm-tools"]) == ([("/usr/bin/nvidia-modprobe", "-u", "-c", "0")], [])


def test_boot_unit_orders_itself_before_the_guests_start():
    unit = boot_unit(ALL_NODES)
    assert unit.text == boot_unit(reversed(ALL_NODES)).text  # the same nodes, the same file: no churn
    lines = unit.text.splitlines()
    assert "Type=oneshot" in lines and "RemainAfterExit=yes" in lines and "WantedBy=multi-user.target" in lines
    before = next(line for line in lines if line.startswith("Before=")).split("=", 1)[1].split()
    assert {"pve-guests.service", "pve-ha-lrm.service", "lxc.service", "lxd.service", "snap.lxd.daemon.service",
            "incus.service"} <= set(before)
    assert [line for line in lines if line.startswith("ExecStart=")][2] == "ExecStart=/usr/bin/nvidia-modprobe -u -c 0"
    assert f"# Remove: systemctl disable --now {BOOT_UNIT} && rm {BOOT_UNIT_PATH}" in lines
    assert unit.summary().startswith("nvidia-modprobe -c 0 -c 1 -c 255; nvidia-modprobe -m;")
    assert missing_paths(["/dev/nvidia-uvm", "/dev/nvidia0", "/dev/nvidia-uvm"], ["/dev/nvidia0"]) == \
        ["/dev/nvidia-uvm"]


@needs_root
def test_boot_unit_on_a_host_tree_recreates_what_a_reboot_removed(tmp_path):
    make_fake_nvidia_host(tmp_path, uvm_major=237)
    host = TreeGpuHost(tmp_path)
    unit = boot_unit([n.path for n in host.device_nodes()])
    assert installed_unit(host) is None
    install_boot_unit(host, unit, "lab.py: guest llm1")
    assert installed_unit(host) == unit.text and host.ran == [
        ("systemctl", "daemon-reload"), ("systemctl", "enable", BOOT_UNIT), ("systemctl", "restart", BOOT_UNIT)]
    before = {(n.path, n.major, n.minor, n.mode) for n in host.device_nodes()}
    reboot(tmp_path, everything=True)
    assert host.device_nodes() == []
    run_boot_unit(tmp_path, unit.text)
    assert {(n.path, n.major, n.minor, n.mode) for n in host.device_nodes()} == before
    assert remove_boot_unit(host, "x") and host.ran[-3:] == [
        ("systemctl", "disable", "--now", BOOT_UNIT), ("rm", "-f", "--", BOOT_UNIT_PATH),
        ("systemctl", "daemon-reload")]


def test_unit_paths_read_back_what_a_unit_makes_so_it_never_shrinks():
    assert sorted(unit_paths(boot_unit(ALL_NODES).text)) == sorted(ALL_NODES)
    assert unit_paths(None) == [] and unit_paths("ExecStart=/bin/true\n") == []
    grown = boot_unit([*unit_paths(boot_unit(["/dev/nvidia0", "/dev/nvidia-uvm"]).text), "/dev/nvidiactl"])
    assert grown.commands[0] == ("/usr/bin/nvidia-modprobe", "-c", "0", "-c", "255")
