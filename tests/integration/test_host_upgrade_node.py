"""`host upgrade` on a real node's own tools, across a real reboot's break: the host side runs NVIDIA's installer,
dkms, proxmox-boot-tool and systemctl (the doubles of tests/support/host_tools, derived from their sources, acting on
a host tree below /dev), the guests are real LXD containers. The run stops at `systemctl reboot` with its state
saved and the resume unit enabled; the test then boots the tree (the kernel the boot entry names, the module DKMS
installed for it, a new nvidia-uvm major, every /dev/nvidia* node gone and made again by the device-node unit) and
starts the resume unit's ExecStart as systemd would: the guests get the new majors and the exactly matching
userspace, restart, and pass gpu check, or are restored from their snapshots."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from labwright.cli import main, register
from labwright.gpu.nvidia.host import GpuHost
from labwright.gpu.nvidia.upgrade_facts import node_facts
from labwright.hostupgrade import state
from labwright.hostupgrade.plan import make_plan
from labwright.hostupgrade.realhost import CommandHost
from labwright.hostupgrade.run import Upgrade
from labwright.lxd.client import LxdClient
from support.fake_nvidia import (
    DRIVER_VERSION,
    fake_root_in_dev,
    make_fake_nvidia_host,
    make_upgrade_host,
    remove_fake_root,
)
from support.gpu_guest import libs_in, nodes_in, sh, upgrade_guest
from support.host_cli import on_tree, resume_command
from support.host_doubles import RESUME_LINK, RESUME_UNIT, boot, make_node, run_resume_unit, tool_env
from support.host_tree import TreeHost

pytestmark = pytest.mark.lab
NEW = "550.54.15"
OLD_KERNEL, NEW_KERNEL = "6.8.12-4-pve", "6.8.12-9-pve"


@pytest.fixture
def node_root(monkeypatch) -> Iterator[Path]:
    root = fake_root_in_dev("lwtest-hn")
    try:
        make_fake_nvidia_host(root, uvm_major=509, caps_major=511)
        make_upgrade_host(root, OLD_KERNEL, NEW_KERNEL, built={OLD_KERNEL: [DRIVER_VERSION]},
                          repository=(DRIVER_VERSION, NEW), hostname="lwnode1", host_userspace=True)
        make_node(root, (OLD_KERNEL, NEW_KERNEL), (OLD_KERNEL, NEW_KERNEL), DRIVER_VERSION, OLD_KERNEL)
        for key, value in tool_env(root).items():
            if key in ("PATH", "LW_FAKE_ROOT", "LW_HOST_TOOLS"):
                monkeypatch.setenv(key, value)
        with on_tree(root):  # the node `host upgrade` and `gpu check` act on (support.host_cli)
            yield root
    finally:
        remove_fake_root(root)


def start(client: LxdClient, root: Path) -> tuple[Upgrade, float]:
    """What `host upgrade lwnode1 --yes` does on a node, up to the reboot (the CLI picks CommandHost for "/")."""
    repo = root / "var/cache/labwright/nvidia"
    facts = node_facts("lwnode1", TreeHost(root), client, repo)
    plan = make_plan(facts)
    host = CommandHost(TreeHost(root), repo)
    host.preflight(plan)
    upgrade = Upgrade(plan, TreeHost(root), repo, client, host=host)
    upgrade.resume_command = resume_command(root, "lwnode1")  # the boot unit runs labwright on the tree
    started = time.monotonic()
    out = upgrade.run({g.name: g.services for g in facts.guests})
    assert out.ok and out.rebooting, (out.message, out.left)
    return upgrade, started


def dry(capsys, root: Path, *extra: str) -> tuple[int, str, str]:
    register(["host"])
    capsys.readouterr()
    code = main(["host", "upgrade", "lwnode1", *extra])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_upgrade_stops_at_the_reboot_and_the_boot_unit_finishes_it(lab, client, names, node_root, capsys):
    guest = upgrade_guest(client, names, node_root, DRIVER_VERSION)
    upgrade, started = start(client, node_root)
    plan = upgrade.plan
    assert plan.boot_kernel == NEW_KERNEL  # its headers let the install build the new driver for it
    done = [d.action for d in upgrade.outcome.done]
    assert done == ["list", "kernel", "snapshot", "host-driver", "boot-unit", "reboot"]
    # Before the boot: the driver is on disk for the new kernel, the running module and the guest are as they were.
    assert (node_root / f"lib/modules/{NEW_KERNEL}/updates/dkms/nvidia.ko").read_text() == \
        f"nvidia {NEW} for {NEW_KERNEL}\n"
    assert GpuHost(TreeHost(node_root)).driver_version() == DRIVER_VERSION
    assert libs_in(client, guest) == f"libcuda.so.{DRIVER_VERSION}\nlibnvidia-ml.so.{DRIVER_VERSION}"
    snapshot = upgrade.outcome.snapshots[guest]
    assert [s["name"] for s in client.request("GET", f"/1.0/instances/{guest}/snapshots?recursion=1")] == [snapshot]
    saved = state.load(TreeHost(node_root))
    assert saved is not None and saved.phase == state.REBOOTING and saved.snapshots == {guest: snapshot}
    assert plan.steps[saved.next_step].action == "majors"
    assert (node_root / "labwright-sim/reboot-requested").exists() and (node_root / RESUME_LINK).is_symlink()
    # Until the boot unit has run: the plan says the upgrade waits; a second --yes is refused, nothing changed.
    code, out, err = dry(capsys, node_root, "--json")
    assert code == 0 and "the upgrade started" in err and f"waits for its reboot: {state.RESUME_UNIT}" in err
    code, out, err = dry(capsys, node_root, "--yes")
    assert code == 2 and out == "" and len(err.splitlines()) == 1 and "nothing was changed" in err

    kernel, loaded = boot(node_root, uvm_major=237)
    assert (kernel, loaded) == (NEW_KERNEL, NEW)
    resumed = run_resume_unit(node_root, tool_env(node_root))
    serving = time.monotonic() - started
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "pass gpu check" in resumed.stdout
    assert nodes_in(client, guest) == {"/dev/nvidia-uvm": "237:0", "/dev/nvidia-uvm-tools": "237:1",
                                       "/dev/nvidia0": "195:0"}
    assert libs_in(client, guest) == f"libcuda.so.{NEW}\nlibnvidia-ml.so.{NEW}"
    saved = state.load(TreeHost(node_root))
    assert saved is not None and saved.phase == state.DONE and saved.outcome is not None and saved.outcome["ok"]
    assert [d["action"] for d in saved.outcome["done"]][-3:] == ["userspace", "restart", "check"]
    assert not (node_root / RESUME_UNIT).exists() and not (node_root / RESUME_LINK).is_symlink()
    # The resume unit is gone; running it again by hand says there is nothing to resume, and the plan says how the
    # last upgrade ended.
    code, out, err = dry(capsys, node_root, "--resume")
    assert code == 2 and err.startswith("labwright: error: node lwnode1: nothing to resume: the upgrade started ")
    assert " finished: node lwnode1: nvidia 550.54.14 -> 550.54.15" in err
    register(["gpu"])
    assert main(["gpu", "check", guest, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"]
    with capsys.disabled():
        print(f"\nhost upgrade --yes on the node's tools, through the boot, to gpu check passing: {serving:.1f} s")


def test_a_guest_that_fails_its_check_after_the_boot_is_restored(lab, client, names, node_root, capsys):
    guest = upgrade_guest(client, names, node_root, DRIVER_VERSION)
    upgrade, _ = start(client, node_root)
    boot(node_root, uvm_major=237)
    # An engine that never opens the GPU appears before the boot unit runs: gpu check fails it (a CPU fallback).
    sh(client, guest, "printf '[Service]\\nExecStart=/bin/sleep infinity\\n[Install]\\nWantedBy=multi-user.target\\n'"
                      " > /etc/systemd/system/llama-server.service && systemctl daemon-reload && "
                      "systemctl enable --now llama-server.service")
    resumed = run_resume_unit(node_root, tool_env(node_root))
    assert resumed.returncode == 1, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert f"gpu check {guest} failed after the upgrade: engine llama-server on the GPU" in resumed.stderr
    assert libs_in(client, guest) == f"libcuda.so.{DRIVER_VERSION}\nlibnvidia-ml.so.{DRIVER_VERSION}"
    saved = state.load(TreeHost(node_root))
    assert saved is not None and saved.phase == state.FAILED and saved.outcome is not None
    assert saved.outcome["restored"] == [guest]
    assert not (node_root / RESUME_LINK).is_symlink()  # it does not run again at the next boot
    # The host driver goes back too, so the restored userspace matches the module the next boot loads.
    assert f"host lwnode1: nvidia driver back to {DRIVER_VERSION} (NVIDIA-Linux-x86_64-{DRIVER_VERSION}.run --dkms " \
           f"for {NEW_KERNEL}); the running module is {NEW} until the node boots again: reboot it to load " \
           f"{DRIVER_VERSION}" in saved.outcome["left"], saved.outcome["left"]
    assert boot(node_root) == (NEW_KERNEL, DRIVER_VERSION)
    assert GpuHost(TreeHost(node_root)).driver_version() == DRIVER_VERSION
