"""Which VM disks Proxmox VE can snapshot (labwright.snapshots.proxmox), decided before anything is asked of the API:
qemu-server ``has_feature`` asks every disk but a CD-ROM; pve-storage snapshots qcow2 files on directory storages and
raw volumes only on zfspool, lvmthin, rbd, btrfs."""

from __future__ import annotations

import pytest

from labwright.hostnames import PctName
from labwright.snapshots.proxmox import PveSnapshots

STORAGES = {"local": "dir", "local-lvm": "lvmthin", "tank": "zfspool", "nas": "nfs", "thick": "lvm"}


def support(config: dict[str, str]):
    return PveSnapshots(PctName("pve1", 120))._vm_support(config, STORAGES)


@pytest.mark.parametrize(("config", "storage", "how"), [
    ({"scsi0": "local-lvm:vm-120-disk-1,size=32G", "efidisk0": "local-lvm:vm-120-disk-0,efitype=4m,size=4M"},
     "local-lvm (lvmthin)", "native (LVM-thin)"),
    ({"virtio0": "tank:vm-120-disk-0,size=8G", "ide2": "local:iso/debian.iso,media=cdrom"}, "tank (zfspool)",
     "native (ZFS)"),
    ({"scsi0": "nas:120/vm-120-disk-0.qcow2,size=8G", "ide2": "none,media=cdrom"}, "nas (nfs, qcow2)",
     "native (qcow2 internal snapshot)"),
])
def test_disks_that_can_snapshot(config, storage, how):
    result = support({**config, "name": "win1", "hostpci0": "0000:01:00,pcie=1"})
    assert (result.supported, result.storage, result.how) == (True, storage, how)


@pytest.mark.parametrize(("config", "needle"), [
    ({"scsi0": "local:120/vm-120-disk-0.raw,size=8G"}, "scsi0 (local:120/vm-120-disk-0.raw) is a raw file on storage "
     "local of type dir, which snapshots qcow2 disks only"),
    ({"scsi0": "local-lvm:vm-120-disk-0", "sata1": "thick:vm-120-disk-1"}, "sata1 is on storage thick of type lvm, "
     "which cannot snapshot VM disks"),
    ({"scsi0": "/dev/disk/by-id/nvme-x,size=1T"}, "scsi0 is on a path, which cannot snapshot VM disks"),
    ({"ide2": "local:iso/win11.iso,media=cdrom"}, "has no disk to snapshot"),
])
def test_disks_that_cannot_snapshot_are_named(config, needle):
    result = support(config)
    assert not result.supported and needle in result.reason, result.reason
