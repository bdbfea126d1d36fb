"""The host side on a fake tree: kernels, DKMS builds and the repository read; the simulated reboot's new majors and
nodes made by the boot unit (real mknod, so run as root like the other fake_nvidia tests)."""

from __future__ import annotations

import os
from pathlib import Path

from labwright.gpu.nvidia.boot_unit import LAZY_NODES, boot_unit, install_boot_unit
from labwright.gpu.nvidia.upgrade_facts import dkms_builds, installed_kernels, repository_versions, running_kernel
from support.fake_nvidia import DRIVER_VERSION, make_fake_nvidia_host, make_upgrade_host
from support.gpu_host import TreeGpuHost
from support.host_tree import TreeHost
from support.sim_host import SimulatedHost


def tree(tmp_path: Path, **kw) -> Path:
    root = make_fake_nvidia_host(tmp_path / "host", uvm_major=509)
    return make_upgrade_host(root, **kw)


def test_facts_read_from_the_tree(tmp_path):
    root = tree(tmp_path, built={"6.8.12-4-pve": [DRIVER_VERSION], "6.8.12-9-pve": ["550.54.15"]},
                repository=("550.54.15", "550.120"))
    (root / "var/cache/labwright/nvidia/notes.txt").write_text("not an installer")
    assert running_kernel(TreeHost(root)) == "6.8.12-4-pve"
    assert installed_kernels(TreeHost(root)) == ["6.8.12-4-pve", "6.8.12-9-pve"]
    assert dkms_builds(TreeHost(root), DRIVER_VERSION) == {"6.8.12-4-pve": (DRIVER_VERSION,),
                                                          "6.8.12-9-pve": ("550.54.15",)}
    assert repository_versions(root / "var/cache/labwright/nvidia") == ("550.120", "550.54.15")
    assert repository_versions(root / "nowhere") == ()


def test_a_packaged_module_counts_as_the_loaded_version(tmp_path):
    root = tree(tmp_path, built={})
    (root / "lib/modules/6.8.12-9-pve/updates/dkms").mkdir(parents=True)
    (root / "lib/modules/6.8.12-9-pve/updates/dkms/nvidia.ko.xz").write_bytes(b"x")
    assert dkms_builds(TreeHost(root), DRIVER_VERSION) == {"6.8.12-9-pve": (DRIVER_VERSION,)}


def test_simulated_reboot_gives_a_new_uvm_major_and_the_boot_unit_makes_every_node(tmp_path):
    root = tree(tmp_path, uvm_major_after_reboot=237)
    host = TreeGpuHost(root)
    before = {n.path: (n.major, n.minor) for n in host.device_nodes()}
    install_boot_unit(host, boot_unit([*(n.path for n in host.device_nodes()), *LAZY_NODES]), "test")
    sim = SimulatedHost(root)
    sim.install_driver("550.54.15", "6.8.12-4-pve")
    assert (root / "var/lib/dkms/nvidia/550.54.15/6.8.12-4-pve/x86_64/module/nvidia.ko").exists()
    said = sim.reboot("6.8.12-9-pve")
    assert "nvidia-uvm major 237" in said
    assert running_kernel(TreeHost(root)) == "6.8.12-9-pve" and host.driver_version() == "550.54.15"
    after = {n.path: (n.major, n.minor) for n in host.device_nodes()}
    assert set(after) == set(before)
    assert after["/dev/nvidia-uvm"] == (237, 0) and after["/dev/nvidia-uvm-tools"] == (237, 1)
    assert after["/dev/nvidia0"] == before["/dev/nvidia0"] == (195, 0)
    assert os.stat(root / "dev/nvidia-caps/nvidia-cap1").st_mode & 0o777 == 0o444


def test_without_the_boot_unit_the_reboot_leaves_no_node(tmp_path):
    root = tree(tmp_path)
    SimulatedHost(root).reboot("6.8.12-4-pve")
    assert TreeGpuHost(root).device_nodes() == []


def test_driver_rollback_puts_the_previous_versions_files_back(tmp_path):
    root = tree(tmp_path, host_userspace=True)
    lib = root / "usr/lib/x86_64-linux-gnu"
    before = {p.name: os.readlink(p) if p.is_symlink() else p.read_bytes() for p in lib.iterdir()}
    assert f"libcuda.so.{DRIVER_VERSION}" in before
    sim = SimulatedHost(root)
    sim.install_driver("550.54.15", "6.8.12-4-pve")
    assert sorted(p.name for p in lib.glob("libcuda.so.*")) == ["libcuda.so.1", "libcuda.so.550.54.15"]
    assert "550.54.15" in (root / "usr/bin/nvidia-smi").read_text()

    said = sim.rollback_driver()

    assert said == (f"nvidia driver back to {DRIVER_VERSION}: 550.54.15's files and DKMS build removed, 6 file(s) of "
                    f"{DRIVER_VERSION} restored; its module is the one running (the node had not booted 550.54.15)")
    assert {p.name: os.readlink(p) if p.is_symlink() else p.read_bytes() for p in lib.iterdir()} == before
    assert not (root / "usr/bin/nvidia-smi").exists()  # the old version had none on this host
    assert not (root / "var/lib/dkms/nvidia/550.54.15/6.8.12-4-pve").exists()
    assert (root / "var/lib/dkms/nvidia" / DRIVER_VERSION / "6.8.12-4-pve").exists()  # its own build kept
