"""Snapshots of Proxmox VE qemu VMs (``kind: vm`` guests) through the API, against the PVE simulator's qemu snapshot
endpoints (support.pve_snapshot.QemuSnapshots: real proxmoxer, verified HTTPS on 127.0.0.1). A snapshot holds the
VM's config (the simulator keeps no disk contents), so "breaking" a VM here is changing its config, and a restore
must put that config back. Every assertion is on what the simulator stored or recorded (``sim.writes``).
"""

from __future__ import annotations

import pytest
from proxmoxer import ResourceException

from labwright import snapshots
from labwright.errors import OperationFailed
from support import pve_snapshot_sim as shared
from support.pve_snapshot import sections
from support.pve_snapshot_sim import cli, create, mine_and_three_keeping_two, options, wait
from support.snapshot_cli import assert_one_line_refusal

GUEST = "@pct/pve1/120"
#: The simulator, root's environment and a client: one set of fixtures for the container and the VM tests.
sim, root_env, api = shared.sim, shared.root_env, shared.api


def make_vm(api, vmid: int = 120, disk: str = "local-lvm:32", start: bool = True, **extra) -> None:
    """A GPU VM as labwright's ``kind: vm`` makes it: q35, OVMF, the RTX 4090 passed through, a CD-ROM."""
    create(api, "qemu", vmid, start, name="win1", memory=8192, cores=4, machine="q35", bios="ovmf", ostype="win11",
           scsi0=disk, efidisk0="local-lvm:1,efitype=4m", ide2="none,media=cdrom",
           hostpci0="0000:01:00,pcie=1,x-vga=1", net0="virtio,bridge=vmbr0", **extra)


def test_take_break_restore_a_running_gpu_vm(sim, api, root_env):
    make_vm(api)
    taken = snapshots.take(GUEST, "pkg-upgrade", **options(sim))

    assert taken.storage == "local-lvm (lvmthin)" and taken.how == "native (LVM-thin)"
    sent = [(r.method, r.path, r.params) for r in sim.writes if "snapshot" in r.path]
    assert sent == [("POST", "/nodes/pve1/qemu/120/snapshot",
                     {"snapname": taken.name, "description": "labwright: before pkg-upgrade"})]  # no vmstate
    conf = sim.vm_config("pve1", 120)
    snap = sections(conf)[taken.name]
    assert conf.options["parent"] == taken.name and "lock" not in conf.options
    assert snap.options["hostpci0"] == "0000:01:00,pcie=1,x-vga=1" and "vmstate" not in snap.options
    assert sim.is_running(120)  # a disk-only snapshot leaves the VM running
    api.nodes("pve1").qemu(120).config.put(memory=2048, name="broken")
    before = len(sim.writes)

    done = snapshots.restore(GUEST, force=True, **options(sim))

    assert done.steps == ["stop", "restore", "start"]
    assert [(r.method, r.path) for r in sim.writes[before:]] == [
        ("POST", "/nodes/pve1/qemu/120/status/stop"),
        ("POST", f"/nodes/pve1/qemu/120/snapshot/{taken.name}/rollback"),
        ("POST", "/nodes/pve1/qemu/120/status/start")]
    restored = sim.vm_config("pve1", 120).effective()
    assert restored["name"] == "win1" and restored["memory"] == "8192" and restored["parent"] == taken.name
    assert restored["vmgenid"] != snap.options["vmgenid"]  # a new generation after a rollback, as PVE gives it
    assert sim.is_running(120)


def test_cli_restore_onto_a_running_vm_without_force_is_refused_and_nothing_sent(sim, api):
    make_vm(api)
    made = cli(sim, "guest", "snapshot", GUEST, "--json")
    assert made.returncode == 0, made.stderr
    api.nodes("pve1").qemu(120).config.put(name="changed")
    before = len(sim.writes)

    refused = cli(sim, "guest", "restore", GUEST, "-y")

    assert_one_line_refusal(refused, GUEST, "is running", "--force")
    assert sim.writes[before:] == [] and sim.is_running(120)
    assert sim.vm_config("pve1", 120).options["name"] == "changed"

    forced = cli(sim, "guest", "restore", GUEST, "--force", "-y")
    assert forced.returncode == 0, forced.stderr
    assert sim.vm_config("pve1", 120).options["name"] == "win1" and sim.is_running(120)


def test_existing_name_refused_keep_last_n_and_a_stopped_vm_stays_stopped(sim, api, root_env):
    make_vm(api, start=False)
    mine_and_three_keeping_two(sim, GUEST, "stack-switch", lambda: sim.vm_config("pve1", 120))
    before = len(sim.writes)

    again = cli(sim, "guest", "snapshot", GUEST, "--name", "mine")
    assert_one_line_refusal(again, "'mine'", "exists already", "qm delsnapshot 120 mine")
    assert sim.writes[before:] == []

    api.nodes("pve1").qemu(120).config.put(cores=16)
    done = snapshots.restore(GUEST, "mine", **options(sim))
    assert done.steps == ["restore"] and not sim.is_running(120)
    assert sim.vm_config("pve1", 120).options["cores"] == "4"


def test_disk_storage_that_cannot_snapshot_is_said_and_nothing_sent(sim, api, root_env):
    make_vm(api, disk="dirstore:8", start=False)  # a raw file on a dir storage (the CD-ROM is skipped, as PVE does)
    before = len(sim.writes)
    with pytest.raises(OperationFailed, match=r"snapshots are not possible here: scsi0 \(dirstore:120/vm-120-disk-"
                                              r"\d\.raw\) is a raw file on storage dirstore of type dir"):
        snapshots.take(GUEST, "stack-switch", **options(sim))
    assert sim.writes[before:] == []
    with pytest.raises(OperationFailed, match="snapshot feature is not available"):  # PVE refuses it in the task
        wait(api, api.nodes("pve1").qemu(120).snapshot.post(snapname="direct"))
    assert sections(sim.vm_config("pve1", 120)) == {}


def test_simulator_qemu_snapshot_rules(sim, api):
    make_vm(api, vmid=130, disk="tank:8")
    vm = api.nodes("pve1").qemu(130)
    for reserved in ("current", "PENDING"):
        with pytest.raises(ResourceException, match=f"unable to use snapshot name '{reserved}' \\(reserved name\\)"):
            vm.snapshot.post(snapname=reserved)
    with pytest.raises(ResourceException, match="snapname"):  # the schema's pve-configid
        vm.snapshot.post(snapname="1bad")
    upid = vm.snapshot.post(snapname="ram", vmstate=1, description="with RAM")
    assert upid.split(":")[5:7] == ["qmsnapshot", "130"]
    wait(api, upid)
    with pytest.raises(OperationFailed, match="snapshot name 'ram' already used"):
        wait(api, vm.snapshot.post(snapname="ram"))
    rows = {r["name"]: r for r in vm.snapshot.get()}
    assert rows["ram"]["vmstate"] == 1 and rows["current"]["parent"] == "ram" and rows["current"]["running"] == 1
    state = sections(sim.vm_config("pve1", 130))["ram"].options
    # find_vmstate_storage: no shared storage, so the first local one by name (local-lvm holds the EFI disk)
    assert state["vmstate"] == "local-lvm:vm-130-state-ram" and state["runningmachine"] == "pc-q35-10.0+pve1"
    assert "local-lvm:vm-130-state-ram" in sim.cluster.storages["local-lvm"].volumes
    wait(api, vm.snapshot.post(snapname="disk"))
    with pytest.raises(OperationFailed, match="can't rollback, 'ram' is not most recent snapshot"):
        wait(api, vm.snapshot("ram").rollback.post())
    wait(api, vm.snapshot("disk").delete())
    wait(api, vm.status.stop.post())
    rollback = vm.snapshot("ram").rollback.post()
    assert rollback.split(":")[5] == "qmrollback"
    wait(api, rollback)
    assert sim.is_running(130)  # a snapshot with RAM resumes the VM from it
    assert "runningmachine" not in sim.vm_config("pve1", 130).options
    wait(api, vm.snapshot("ram").delete())
    assert "local-lvm:vm-130-state-ram" not in sim.cluster.storages["local-lvm"].volumes  # the state volume freed
    with pytest.raises(OperationFailed, match="snapshot 'ram' does not exist"):
        wait(api, vm.snapshot("ram").delete())


def test_restoring_a_user_snapshot_with_ram_does_not_start_the_vm_twice(sim, api, root_env):
    make_vm(api, disk="tank:8")
    wait(api, api.nodes("pve1").qemu(120).snapshot.post(snapname="withram", vmstate=1))
    before = len(sim.writes)

    done = snapshots.restore(GUEST, "withram", force=True, **options(sim))

    assert done.steps == ["stop", "restore", "start"] and sim.is_running(120)
    assert [(r.method, r.path) for r in sim.writes[before:]] == [
        ("POST", "/nodes/pve1/qemu/120/status/stop"), ("POST", "/nodes/pve1/qemu/120/snapshot/withram/rollback")]
