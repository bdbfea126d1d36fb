"""Snapshots of a Proxmox VE guest, a container or a qemu VM (``kind: vm``), through the API, the way
``labwright.guests.proxmox`` talks to it (proxmoxer, credentials from the environment, tasks waited on with
``TaskWaiter``). ``@pct/NODE/VMID`` names either: a VMID is unique in the cluster, and ``GET /cluster/resources``
says whether it is an ``lxc`` or a ``qemu`` guest; the endpoints below are then under ``/lxc/`` or ``/qemu/``.

Endpoints (pve-container 6.1.10 src/PVE/API2/LXC/Snapshot.pm): ``GET /nodes/N/lxc/V/snapshot`` lists (with a
``current`` entry, 23-104), ``POST .../snapshot`` ``snapname``, ``description`` takes one (a ``vzsnapshot``
task, 106-165), ``DELETE .../snapshot/{snapname}`` (``vzdelsnapshot``, 167-229), ``POST
.../snapshot/{snapname}/rollback`` (``vzrollback``, 267-322; PVE stops a running container itself, so labwright
refuses a running guest before asking, unless ``--force``).

Storage support: PVE asks every volume of the container (rootfs and mpN) ``volume_has_feature('snapshot')``
(pve-container src/PVE/LXC/Config.pm ``has_feature`` 88-113, from pve-guest-common 6.0.2
src/PVE/AbstractConfig.pm ``__snapshot_prepare`` 753-755: "snapshot feature is not available"). A container's
volumes are ``raw`` or ``subvol``, which only these storage types can snapshot (pve-storage 9.1.7
src/PVE/Storage: ZFSPoolPlugin.pm 809-813, LvmThinPlugin.pm 408-412, RBDPlugin.pm 955-959, BTRFSPlugin.pm 600-605);
``dir``, ``nfs``, ``cifs`` and thick ``lvm`` snapshot qcow2 (VM disks) only (Plugin.pm 1575-1582, LVMPlugin.pm
1367-1382). labwright checks that before it asks, and names the volume and storage in the message.

VMs (qemu-server 9.2.6, commit e6352be67f70, src/PVE/API2/Qemu.pm): ``GET/POST /nodes/N/qemu/V/snapshot``
(``snapshot_list`` 6076-6164, ``snapshot`` 6166-6231: worker ``qmsnapshot``; ``current`` and ``pending`` reserved),
``POST .../snapshot/{snapname}/rollback`` (``qmrollback`` 6367-6433: PVE stops a running VM itself),
``DELETE .../snapshot/{snapname}`` (``qmdelsnapshot`` 6435-6509). Every disk but a CD-ROM must support snapshots
(src/PVE/QemuConfig.pm ``has_feature`` 74-93): the container types above, or a ``qcow2`` file on a directory
storage (``dir``, ``nfs``, ``cifs``, ``glusterfs``; a ``raw`` file there cannot). labwright takes disk-only snapshots
(no ``vmstate``): a VM with a GPU passed through cannot save its RAM (VFIO devices block QEMU's migration stream),
and the guest keeps running while its disks are snapshotted. A user's snapshot with RAM restores into a running
VM (PVE starts it from the state); labwright then does not start it a second time.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from proxmoxer import ProxmoxAPI

from labwright.errors import BadInput
from labwright.guests.proxmox_api import Credentials, TaskWaiter, call, connect
from labwright.hostnames import PctName
from labwright.snapshots.model import Snapshot, SnapshotBackend, Support, snapshot_from

#: PVE storage types whose container volumes (raw, subvol) can be snapshotted.
SNAPSHOT_TYPES = {"zfspool": "native (ZFS)", "lvmthin": "native (LVM-thin)", "rbd": "native (Ceph RBD)",
                  "btrfs": "native (btrfs)", "zfs": "native (ZFS over iSCSI)"}
_VOLUME_KEY = re.compile(r"(?a)^(rootfs|mp\d+)$")
#: A VM's disks (qemu-server src/PVE/QemuServer/Drive.pm ``valid_drive_names``).
_VM_DISK_KEY = re.compile(r"(?a)^(?:ide|sata|scsi|virtio)\d+$|^efidisk0$|^tpmstate0$")
#: Storage types that hold disks as files: a VM disk there snapshots as qcow2 only (pve-storage Plugin.pm).
FILE_TYPES = frozenset({"dir", "nfs", "cifs", "glusterfs", "cephfs"})


class PveSnapshots(SnapshotBackend):
    def __init__(self, name: PctName, node_data: Mapping[str, Any] | None = None, api: ProxmoxAPI | None = None,
                 credentials: Credentials | None = None, task_timeout: float = 600.0, poll_interval: float = 0.5):
        self.name = name
        self.label = name.host
        self.node_data = dict(node_data or {})
        self._api = api
        self._credentials = credentials
        self.task_timeout = task_timeout
        self.poll_interval = poll_interval
        self._kind: str | None = None

    @property
    def api(self) -> ProxmoxAPI:
        if self._api is None:
            credentials = self._credentials or Credentials.from_env()
            self._api = connect(credentials, self.name.node, self.node_data)
        return self._api

    @property
    def kind(self) -> str:
        """``lxc`` or ``qemu``, from the cluster's resources (``lxc`` for a guest that does not exist yet)."""
        if self._kind is None:
            self._entry()
        return self._kind or "lxc"

    @property
    def what(self) -> str:
        return "VM" if self.kind == "qemu" else "container"

    @property
    def _ct(self) -> Any:
        node = self.api.nodes(self.name.node)
        return (node.qemu if self.kind == "qemu" else node.lxc)(self.name.vmid)

    def _wait(self, upid: str, what: str) -> None:
        TaskWaiter(self.api, self.task_timeout, self.poll_interval).wait(upid, what)

    def _entry(self) -> dict[str, Any] | None:
        resources = call(f"{self.label}: listing cluster resources", lambda: self.api.cluster.resources.get(type="vm"))
        entry = next((r for r in resources if int(r.get("vmid", 0)) == self.name.vmid
                      and r.get("type") in ("lxc", "qemu")), None)
        if entry is not None and entry.get("node") != self.name.node:
            kind = "container" if entry.get("type") == "lxc" else "VM"
            raise BadInput(f"{self.label}: {self.name.vmid} is a {kind} on node {entry.get('node')}, not on "
                           f"{self.name.node}; fix the name (@pct/{entry.get('node')}/{self.name.vmid})")
        if entry is not None:
            self._kind = str(entry.get("type"))
        return entry

    def missing(self) -> str:
        return (f"{self.label}: no container {self.name.vmid} on {self.name.node} (and no VM); check the name "
                "(`pct list` and `qm list` on the node)")

    def _require(self) -> dict[str, Any]:
        entry = self._entry()
        if entry is None:
            raise BadInput(self.missing())
        return entry

    def exists(self) -> bool:
        return self._entry() is not None

    def running(self) -> bool:
        self._require()
        status = call(f"{self.label}: reading status", self._ct.status.current.get)
        return str(status.get("status")) == "running"

    def support(self) -> Support:
        self._require()
        config = call(f"{self.label}: reading config", self._ct.config.get)
        storages = {str(s.get("storage")): str(s.get("type"))
                    for s in call(f"{self.label}: listing storages", self.api.nodes(self.name.node).storage.get)}
        if self.kind == "qemu":
            return self._vm_support(config, storages)
        used: list[str] = []
        for key in sorted(k for k in config if _VOLUME_KEY.match(k)):
            volume = str(config[key]).split(",", 1)[0]
            if volume.startswith("/"):
                return Support(False, f"{key} {volume}", "", f"{key} is a bind mount ({volume}); Proxmox cannot "
                               "snapshot a container with bind mounts")
            sid = volume.split(":", 1)[0]
            kind = storages.get(sid, "unknown")
            if kind not in SNAPSHOT_TYPES:
                return Support(False, f"storage {sid} ({kind})", "",
                               f"{key} is on storage {sid} of type {kind}, which cannot snapshot container volumes "
                               f"(types that can: {', '.join(sorted(SNAPSHOT_TYPES))})")
            used.append(f"{sid} ({kind})")
        if not used:
            return Support(False, "?", "", f"{self.label} has no rootfs volume")
        first = used[0].split(" (", 1)[1].rstrip(")")
        return Support(True, ", ".join(dict.fromkeys(used)), SNAPSHOT_TYPES[first])

    def _vm_support(self, config: Mapping[str, Any], storages: Mapping[str, str]) -> Support:
        """Every disk but a CD-ROM (``has_feature`` skips those) on storage that can snapshot it."""
        used: list[str] = []
        for key in sorted(k for k in config if _VM_DISK_KEY.match(k)):
            value = str(config[key])
            if re.search(r"(?:^|,)media=cdrom(?:,|$)", value):
                continue
            volume = value.split(",", 1)[0].removeprefix("file=")
            sid = volume.split(":", 1)[0] if ":" in volume else ""
            kind = storages.get(sid, "unknown") if sid else "a path"
            if kind in FILE_TYPES:
                if not volume.endswith(".qcow2"):
                    return Support(False, f"storage {sid} ({kind})", "",
                                   f"{key} ({volume}) is a raw file on storage {sid} of type {kind}, which snapshots "
                                   "qcow2 disks only; convert it (Hardware > Disk Action > Move Storage, format "
                                   "qcow2) or move it to storage that can")
                used.append(f"{sid} ({kind}, qcow2)")
                continue
            if kind not in SNAPSHOT_TYPES:
                return Support(False, f"storage {sid or volume} ({kind})", "",
                               f"{key} is on {'storage ' + sid + ' of type ' + kind if sid else kind}, which cannot "
                               f"snapshot VM disks (types that can: {', '.join(sorted(SNAPSHOT_TYPES))}, or qcow2 "
                               "files on dir/nfs/cifs)")
            used.append(f"{sid} ({kind})")
        if not used:
            return Support(False, "?", "", f"{self.label} has no disk to snapshot")
        first = used[0].split(" (", 1)[1].rstrip(")")
        how = "native (qcow2 internal snapshot)" if first.endswith("qcow2") else SNAPSHOT_TYPES[first]
        return Support(True, ", ".join(dict.fromkeys(used)), how)

    def list(self) -> list[Snapshot]:
        self._require()
        items = call(f"{self.label}: listing snapshots", self._ct.snapshot.get)
        result = []
        for item in items:
            if item.get("name") == "current":
                continue
            when = item.get("snaptime")
            created = datetime.fromtimestamp(int(when), UTC) if when else None
            # A snapshot whose creation or deletion did not finish keeps ``snapstate`` (``prepare``/``delete``) and is
            # listed with it (pve-container src/PVE/API2/LXC/Snapshot.pm and qemu-server src/PVE/API2/Qemu.pm
            # snapshot_list: ``$item->{snapstate} = $d->{snapstate} if $d->{snapstate}``); PVE refuses to roll back
            # to it (pve-guest-common src/PVE/AbstractConfig.pm snapshot_rollback: "unable to rollback to
            # incomplete snapshot (snapstate = ...)").
            result.append(snapshot_from(str(item.get("name")), created, str(item.get("description") or ""),
                                        str(item.get("snapstate") or "")))
        return result

    def create(self, name: str, description: str) -> None:
        params = {"snapname": name, **({"description": description} if description else {})}
        upid = call(f"{self.label}: taking snapshot {name}", lambda: self._ct.snapshot.post(**params))
        self._wait(upid, f"{self.label}: taking snapshot {name}")

    def delete(self, name: str) -> None:
        upid = call(f"{self.label}: deleting snapshot {name}", lambda: self._ct.snapshot(name).delete())
        self._wait(upid, f"{self.label}: deleting snapshot {name}")

    def rollback(self, name: str) -> None:
        upid = call(f"{self.label}: rolling back to {name}", lambda: self._ct.snapshot(name).rollback.post())
        self._wait(upid, f"{self.label}: rolling back to {name}")

    def stop(self) -> None:
        self._wait(call(f"{self.label}: stopping", self._ct.status.stop.post), f"{self.label}: stopping")

    def start(self) -> None:
        if self.kind == "qemu" and self.running():
            return  # a snapshot with RAM: PVE's rollback started the VM from its saved state
        self._wait(call(f"{self.label}: starting", self._ct.status.start.post), f"{self.label}: starting")

    def native_command(self, action: str, name: str) -> str:
        where = f" (on node {self.name.node})"
        tool = "qm" if self.kind == "qemu" else "pct"
        if action == "restore":
            return f"{tool} rollback {self.name.vmid} {name}{where}"
        if action == "start":
            return f"{tool} start {self.name.vmid}{where}"
        return f"{tool} delsnapshot {self.name.vmid} {name}{where}"
