"""`labwright host upgrade NODE` on the local lab: the host side is a fake NVIDIA tree below /dev (tests/support/
fake_nvidia: /proc version and devices, mknod nodes, kernels, DKMS's tree, a repository of stand-in .run installers),
the guests are real LXD containers with those nodes passed through. The whole sequence runs for real on the guests
(LXD snapshots, device config PATCHed with the new majors, the installer run inside each guest, restarts under their
systemd, `gpu check`); the host's driver install and reboot are simulated on the tree (support.sim_host):
after the reboot nvidia-uvm has a new major and the nodes exist only because the boot unit made them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from labwright.cli import main, register
from labwright.errors import LxdError
from labwright.gpu.nvidia.host import GpuHost
from labwright.gpu.nvidia.upgrade_facts import node_facts
from labwright.hostnames import LxdName
from labwright.hostupgrade.plan import make_plan
from labwright.hostupgrade.realhost import PIN_FILE
from labwright.hostupgrade.run import Upgrade
from labwright.snapshots.lxd import LxdSnapshots
from labwright.testing.waiting import wait_for
from support.fake_nvidia import (
    DRIVER_VERSION,
    fake_root_in_dev,
    make_fake_nvidia_host,
    make_upgrade_host,
    remove_fake_root,
)
from support.gpu_guest import libs_in, nodes_in, sh, upgrade_guest
from support.guest_lock import holding
from support.host_cli import on_tree
from support.host_tree import TreeHost
from support.sim_host import SimulatedHost

pytestmark = pytest.mark.lab
NEW = "550.54.15"
OLD_KERNEL, NEW_KERNEL = "6.8.12-4-pve", "6.8.12-9-pve"


@pytest.fixture
def host_root() -> Iterator[Path]:
    root = fake_root_in_dev("lwtest-hu")
    try:
        make_fake_nvidia_host(root, uvm_major=509, caps_major=511)
        make_upgrade_host(root, OLD_KERNEL, NEW_KERNEL, built={OLD_KERNEL: [DRIVER_VERSION],
                                                               NEW_KERNEL: [DRIVER_VERSION, NEW]},
                          repository=(NEW,), hostname="lwnode1", uvm_major_after_reboot=237)
        with on_tree(root):  # the node `host upgrade` and `gpu check` act on (support.host_cli)
            yield root
    finally:
        remove_fake_root(root)


def host(capsys, *args: str) -> tuple[int, str, str]:
    register(["host", "gpu"])
    capsys.readouterr()  # what setting the guests up printed (their progress lines) is not this command's output
    code = main(["host", "upgrade", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_whole_upgrade_with_a_reboot_that_moves_nvidia_uvm(lab, client, names, host_root, capsys):
    matched = upgrade_guest(client, names, host_root, DRIVER_VERSION)
    mismatched = upgrade_guest(client, names, host_root, "550.40.07")  # already wrong before the upgrade
    stopped = upgrade_guest(client, names, host_root, DRIVER_VERSION)
    client.set_state(stopped, "stop", force=True)
    assert nodes_in(client, matched)["/dev/nvidia-uvm"] == "509:0"

    # A guest mismatched before the upgrade is refused in one line, nothing changed, dry or not.
    for extra in ((), ("--yes",)):
        code, out, err = host(capsys, "lwnode1", *extra)
        assert code == 2 and err.count("\n") == 1 and f"guest {mismatched} runs userspace 550.40.07" in err, err
        assert "--fix-mismatched" in err and GpuHost(TreeHost(host_root)).driver_version() == DRIVER_VERSION
    assert client.request("GET", f"/1.0/instances/{matched}/snapshots") == []
    # Dry by default: the plan, the mismatch said, nothing changed.
    code, out, err = host(capsys, "lwnode1", "--fix-mismatched", "--json")
    plan = json.loads(out)
    assert code == 0 and plan["dry"] and plan["to"] == NEW and plan["boot_kernel"] == NEW_KERNEL
    assert [s["action"] for s in plan["steps"]][:5] == ["list", "kernel", "snapshot", "snapshot", "snapshot"]
    assert err == (f"labwright: note: guest {mismatched} runs userspace 550.40.07 but the host module is "
                   f"{DRIVER_VERSION}: mismatched now; the upgrade installs {NEW} in it (--fix-mismatched)\n"
                   f"labwright: note: guest {stopped} is stopped: its userspace is not known; the upgrade starts it "
                   f"and installs {NEW} in it\n")
    assert GpuHost(TreeHost(host_root)).driver_version() == DRIVER_VERSION
    assert client.request("GET", f"/1.0/instances/{matched}/snapshots") == []

    code, out, err = host(capsys, "lwnode1", "--fix-mismatched", "--yes", "--json")
    result = json.loads(out)
    assert code == 0 and result["ok"], (out, err)
    for name in (matched, mismatched, stopped):
        assert nodes_in(client, name) == {"/dev/nvidia-uvm": "237:0", "/dev/nvidia-uvm-tools": "237:1",
                                          "/dev/nvidia0": "195:0"}
        assert libs_in(client, name) == f"libcuda.so.{NEW}\nlibnvidia-ml.so.{NEW}"
        assert result["snapshots"][name].startswith("labwright-host-upgrade-")
        checks = [d for d in result["done"] if d["action"] == "check" and d["target"] == name]
        assert checks and checks[0]["ok"], result["done"]
        # The guest config carries the re-read majors (what the next start of the guest passes).
        devices = client.instance(name)["devices"]
        assert {d["major"] for d in devices.values() if d.get("path") == "/dev/nvidia-uvm"} == {"237"}
    gpu = GpuHost(TreeHost(host_root))
    assert gpu.driver_version() == NEW
    assert (host_root / "proc/sys/kernel/osrelease").read_text().strip() == NEW_KERNEL
    assert "-u -c 0" in (host_root / "etc/systemd/system/labwright-nvidia-uvm.service").read_text()
    # gpu check from the CLI agrees, on both guests.
    register(["gpu"])
    for name in (matched, mismatched, stopped):
        assert main(["gpu", "check", name, "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["ok"]
    with capsys.disabled():
        print(f"\nhost upgrade --yes of 3 GPU guests (one stopped) to gpu check passing: {result['seconds']:.1f} s")


def test_a_failed_check_restores_every_snapshot(lab, client, names, host_root, capsys):
    good = upgrade_guest(client, names, host_root, DRIVER_VERSION)
    engine = upgrade_guest(client, names, host_root, DRIVER_VERSION)
    # An engine unit that never opens the GPU (a CPU fallback): gpu check fails it after the upgrade.
    wait_for(f"systemd in {engine} to finish starting", lambda: client.exec(engine, [
        "sh", "-c", "systemctl is-system-running"]).stdout.decode().strip() in ("running", "degraded"), timeout=120)
    sh(client, engine, "printf '[Service]\\nExecStart=/bin/sleep infinity\\n[Install]\\nWantedBy=multi-user.target\\n'"
                       " > /etc/systemd/system/llama-server.service && systemctl daemon-reload && "
                       "systemctl enable --now llama-server.service")
    code, out, err = host(capsys, "lwnode1", "--yes", "--json")
    result = json.loads(out)
    assert code == 1 and not result["ok"]
    assert len(err.strip().splitlines()) == 1
    assert f"gpu check {engine} failed after the upgrade: engine llama-server on the GPU" in err
    assert sorted(result["restored"]) == sorted([good, engine])
    for name in (good, engine):
        assert libs_in(client, name) == f"libcuda.so.{DRIVER_VERSION}\nlibnvidia-ml.so.{DRIVER_VERSION}"
        devices = client.instance(name)["devices"]
        assert {d["major"] for d in devices.values() if d.get("path") == "/dev/nvidia-uvm"} == {"509"}
        assert client.instance(name)["status"] == "Running"
    assert any(line.startswith("host lwnode1: keeps nvidia 550.54.15") for line in result["left"]), result["left"]


def test_bad_input_is_one_line_and_nothing_is_upgraded(lab, client, names, host_root, capsys):
    name = upgrade_guest(client, names, host_root, DRIVER_VERSION)
    code, out, err = host(capsys, "pve9", "--yes")
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert "node 'pve9' is not this host (it answers to lwnode1" in err
    code, out, err = host(capsys, "lwnode1", "--to", "550.54.99", "--yes")
    assert code == 2 and out == "" and err == (
        "labwright: error: --to 550.54.99: no such driver version in the repository "
        f"{host_root}/var/cache/labwright/nvidia (there: {NEW}); give one of those or add "
        "NVIDIA-Linux-x86_64-550.54.99.run to it\n")
    # An installer that is not the one whose sha256 was recorded: refused before any snapshot, naming the file and
    # both hashes, nothing run.
    installer = host_root / f"var/cache/labwright/nvidia/NVIDIA-Linux-x86_64-{NEW}.run"
    good = installer.read_bytes()
    installer.write_bytes(good + b"# changed on the way\n")
    code, out, err = host(capsys, "lwnode1", "--yes")
    assert code == 2 and out == "" and len(err.splitlines()) == 1, err
    assert err.startswith(f"labwright: error: {installer}: sha256 ") and err.endswith("; nothing was run\n")
    assert f"does not match {hashlib.sha256(good).hexdigest()} recorded in {installer.name}.sha256sum" in err
    assert client.request("GET", f"/1.0/instances/{name}/snapshots") == []
    code, out, err = host(capsys, "lwnode1", "--json")  # the dry plan says so first
    assert code == 0 and f"labwright: note: --yes will refuse: {installer}: sha256 " in err
    assert any(n.startswith("--yes will refuse: ") for n in json.loads(out)["notes"])
    installer.write_bytes(good)
    # The new kernel without a build of the target: refused (or pinned with --pin-kernel).
    (host_root / "var/lib/dkms/nvidia" / NEW / NEW_KERNEL / "x86_64/module/nvidia.ko").unlink()
    code, out, err = host(capsys, "lwnode1", "--yes")
    assert code == 1 and out == "" and len(err.splitlines()) == 1
    assert f"the new kernel {NEW_KERNEL} has no nvidia {NEW} module build" in err
    assert GpuHost(TreeHost(host_root)).driver_version() == DRIVER_VERSION
    assert client.request("GET", f"/1.0/instances/{name}/snapshots") == []
    code, out, err = host(capsys, "lwnode1", "--pin-kernel", "--json")
    assert code == 0 and json.loads(out)["boot_kernel"] == OLD_KERNEL
    # And done: the running kernel pinned (proxmox-boot-tool kernel pin, simulated under the root) and booted again
    # with the new driver; the guest carried through.
    code, out, err = host(capsys, "lwnode1", "--pin-kernel", "--yes", "--json")
    result = json.loads(out)
    assert code == 0 and result["ok"], (out, err)
    assert (host_root / PIN_FILE).read_text().strip() == OLD_KERNEL
    assert (host_root / "proc/sys/kernel/osrelease").read_text().strip() == OLD_KERNEL
    assert GpuHost(TreeHost(host_root)).driver_version() == NEW
    assert libs_in(client, name) == f"libcuda.so.{NEW}\nlibnvidia-ml.so.{NEW}"


def test_a_guest_another_labwright_run_holds_is_waited_for_or_refused(lab, client, names, host_root, capsys):
    # A deploy or stack switch still running in a GPU guest: the upgrade (which stops, changes and restarts the guest)
    # refuses naming it, before any snapshot or host change, and goes ahead once that run is gone.
    name = upgrade_guest(client, names, host_root, DRIVER_VERSION)
    with holding(name) as holder:
        code, out, err = host(capsys, "lwnode1", "--yes", "--lock-wait", "0", "--json")
        result = json.loads(out)
        assert code == 1 and not result["ok"], (out, err)
        assert "another labwright run holds this guest" in result["message"] and f"pid {holder.pid}" in \
            result["message"], result["message"]
        assert "nothing was upgraded" in result["message"]
        assert GpuHost(TreeHost(host_root)).driver_version() == DRIVER_VERSION
        assert client.request("GET", f"/1.0/instances/{name}/snapshots") == []
    code, out, err = host(capsys, "lwnode1", "--yes", "--lock-wait", "0", "--json")
    assert code == 0 and json.loads(out)["ok"], (out, err)
    assert "released a stale run lock" in err  # the killed holder's, by this controller (its pid is gone)
    assert GpuHost(TreeHost(host_root)).driver_version() == NEW


class _RefusingSnapshots(LxdSnapshots):
    """The daemon refusing one guest's snapshot (as LXD words a failed snapshot operation); the other guests' go to
    the real daemon."""

    def create(self, name: str, description: str) -> None:
        raise LxdError(f"Create instance snapshot: Failed creating instance snapshot record \"{name}\": no space")


def test_a_snapshot_that_cannot_be_taken_upgrades_nothing(lab, client, names, host_root):
    first = upgrade_guest(client, names, host_root, DRIVER_VERSION)
    second = upgrade_guest(client, names, host_root, DRIVER_VERSION)
    refusing = max(first, second)  # guests are snapshotted in name order: the other one's snapshot is taken first
    facts = node_facts("lwnode1", TreeHost(host_root), client)
    plan = make_plan(facts)

    class Refusing(Upgrade):
        def _backend(self, guest: str) -> LxdSnapshots:
            kind = _RefusingSnapshots if guest == refusing else LxdSnapshots
            return kind(LxdName("lxd", None, guest), client=self.client)

    outcome = Refusing(plan, TreeHost(host_root), host_root / "var/cache/labwright/nvidia", client,
                       host=SimulatedHost(host_root)).run({})
    assert not outcome.ok
    assert outcome.message.startswith(f"guest {refusing}: the snapshot could not be taken: Create instance snapshot")
    assert "nothing was upgraded (snapshots taken: labwright-host-upgrade-" in outcome.message
    assert [d.action for d in outcome.done] == ["list", "kernel", "snapshot"]
    assert GpuHost(TreeHost(host_root)).driver_version() == DRIVER_VERSION
    assert not (host_root / "var/lib/dkms/nvidia" / NEW / OLD_KERNEL).exists()
    for name in (first, second):
        assert libs_in(client, name) == f"libcuda.so.{DRIVER_VERSION}\nlibnvidia-ml.so.{DRIVER_VERSION}"
        assert nodes_in(client, name)["/dev/nvidia-uvm"] == "509:0"
