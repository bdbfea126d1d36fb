"""Container snapshots in the PVE simulator: list, create, delete, rollback, as pve-container and
pve-guest-common do them, with the config file's ``[SNAPNAME]`` sections as the state.

The simulator holds no file system, so a snapshot is the container's config (as PVE keeps it in the section)
and a rollback puts that config back; the volumes' contents are not simulated.

Provenance (read for these behaviours):
- pve-container 6.1.10 (commit 94f558522ef6), src/PVE/API2/LXC/Snapshot.pm: list with a ``current`` entry
  (``digest``, ``running``, "You are here!", its ``parent``) and per snapshot ``name``, ``snaptime``,
  ``description``, ``parent``, ``snapstate`` (69-104); create: "unable to use snapshot name 'current'/'vzdump'
  (reserved name)" before the worker (152-156), worker ``vzsnapshot`` (158-163); delete: worker
  ``vzdelsnapshot`` (204-227); rollback: worker ``vzrollback``, ``start`` after (305-321).
- pve-guest-common 6.0.2 (commit 4a8f6cbf78e1), src/PVE/AbstractConfig.pm: ``__snapshot_copy_config`` skips
  snapshots, snapstate, snaptime, vmstate, lock, digest, description, unusedN (690-706); ``__snapshot_apply_config``
  keeps the snapshot list, description and unusedN (708-727); ``__snapshot_prepare``: template (739-740),
  ``check_lock`` (742), lock ``snapshot`` (746), "snapshot name 'X' already used" (750-751), "snapshot feature is
  not available" (753-755), ``snapstate: prepare`` and ``snaptime`` (774-776); ``__snapshot_commit`` drops the
  state and lock and sets the config's ``parent`` (788-812); ``snapshot_delete``: "snapshot 'X' does not exist"
  (952), ``set_lock`` ``snapshot-delete`` (check_lock first, 351-361), parents relinked (972-981, 1027-1035);
  ``snapshot_rollback``: "snapshot 'X' does not exist" (1137), incomplete snapshot (1162-1163), ``check_lock`` and
  a running CT stopped (1165-1168), lock ``rollback`` then the snapshot's config applied with ``parent`` set
  (1173-1186); ``check_lock`` "CT is locked (X)" (336-340).
- pve-container 6.1.10 src/PVE/LXC/Config.pm ``has_feature`` (88-113): every volume must have the feature;
  ``__snapshot_rollback_vm_stop`` stops a running CT (278-283).
- pve-storage 9.1.7 (commit 0c56bad8b2a7), ``volume_has_feature('snapshot')`` for a container's raw/subvol
  volumes: yes on zfspool (ZFSPoolPlugin.pm 809-813), lvmthin (LvmThinPlugin.pm 408-412), rbd (RBDPlugin.pm
  955-959), btrfs (BTRFSPlugin.pm 600-605); qcow2 only on dir/nfs/cifs (Plugin.pm 1575-1582) and lvm
  (LVMPlugin.pm 1367-1382), so no for a container there. ZFS rolls back only to its most recent snapshot:
  "can't rollback, 'X' is not most recent snapshot on 'VOLID'" (ZFSPoolPlugin.pm 610).
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable
from typing import Any

from support.pve_config import CtConfig, digest
from support.pve_qemu import DISK, PINNED, MiB, Qemu, QmConfig
from support.pve_schema import PveApiError
from support.pve_state import PveCluster, SimStorage, Task, TaskAbort

#: Storage types whose container volumes can be snapshotted (pve-storage 9.1.7, see above).
SNAPSHOT_TYPES = frozenset({"zfspool", "lvmthin", "rbd", "btrfs"})
_SECTION = re.compile(r"^\[([a-z][a-z0-9_\-]+)\]\s*$", re.I | re.M)
_VOLUME_KEY = re.compile(r"^(rootfs|mp\d+)$")
#: Keys a snapshot does not copy from the config (``__snapshot_copy_config``).
NOT_COPIED = ("snapshots", "snapstate", "snaptime", "vmstate", "lock", "digest", "description")


def sections(conf: CtConfig) -> dict[str, CtConfig]:
    """The config file's snapshot sections, by name."""
    text = conf.snapshots
    found: dict[str, CtConfig] = {}
    marks = list(_SECTION.finditer(text))
    for index, mark in enumerate(marks):
        end = marks[index + 1].start() if index + 1 < len(marks) else len(text)
        found[mark.group(1)] = CtConfig.parse(text[mark.end():end])
    return found


def store(conf: CtConfig, snaps: dict[str, CtConfig]) -> None:
    """Write ``snaps`` back as sections, sorted by name (``write_pct_config``)."""
    conf.snapshots = "\n".join(f"[{name}]\n{snaps[name].render()}" for name in sorted(snaps))


def _ancestors(snaps: dict[str, CtConfig], name: str) -> set[str]:
    """The snapshots ``name`` descends from (its ``parent`` chain)."""
    seen: set[str] = set()
    parent = snaps[name].options.get("parent")
    while parent and parent in snaps and parent not in seen:
        seen.add(parent)
        parent = snaps[parent].options.get("parent")
    return seen


def _copy(source: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in source.items() if k not in NOT_COPIED and not re.match(r"^unused\d+$", k)}


class Snapshots:
    """The container snapshot endpoints of one simulated cluster (``QemuSnapshots`` below: the VMs')."""

    #: The guest type in "CT is locked (X)" (``guest_type``), and the workers' names.
    GUEST = "CT"
    TASKS = {"create": "vzsnapshot", "delete": "vzdelsnapshot", "rollback": "vzrollback"}
    RESERVED = ("current", "vzdump")
    #: The config class a rollback writes back.
    CONFIG: type[CtConfig] = CtConfig

    def __init__(self, cluster: PveCluster, configs: PveCluster | Qemu | None = None):
        self.cluster = cluster
        #: Where the guests' config files are loaded from and saved to (the cluster's lxc/, a ``Qemu``'s qemu-server/).
        self.configs = configs or cluster
        #: The storage side the simulator does not keep (volume contents): called as ``volumes(action, node, vmid,
        #: snapname)`` with ``snapshot``, ``rollback`` or ``delete`` inside the task, where PVE snapshots, rolls back
        #: or deletes the volumes; an exception fails the task. Tests set it (support.pve_pct_node).
        self.volumes: Callable[[str, str, int, str], None] | None = None

    def _volume(self, action: str, node: str, vmid: int, snapname: str) -> None:
        if self.volumes is not None:
            self.volumes(action, node, vmid, snapname)

    def _load(self, node: str, vmid: int) -> tuple[CtConfig, str]:
        return self.configs.load(node, vmid)

    def _save(self, node: str, vmid: int, conf: CtConfig) -> None:
        self.configs.save(node, vmid, conf)

    def _new_config(self, options: dict[str, str], lxc: list[tuple[str, str]]) -> CtConfig:
        return self.CONFIG(options=options, lxc=lxc)

    def _volumes(self, conf: CtConfig) -> list[tuple[str, str]]:
        """(volid, storage type) of the container's volumes; a bind mount's type is ``bind``."""
        volumes = []
        for key in sorted(k for k in conf.options if _VOLUME_KEY.match(k)):
            volid = conf.options[key].split(",", 1)[0]
            storage = self.cluster.storages.get(volid.split(":", 1)[0]) if ":" in volid else None
            volumes.append((volid, storage.type if storage else "bind"))
        return volumes

    def _can_snapshot(self, volid: str, kind: str) -> bool:
        return kind in SNAPSHOT_TYPES

    def _row(self, snap: CtConfig) -> dict[str, Any]:
        return {}

    def list(self, node: str, vmid: int) -> list[dict[str, Any]]:
        conf, conf_digest = self._load(node, vmid)
        rows: list[dict[str, Any]] = []
        for name, snap in sections(conf).items():
            row: dict[str, Any] = {"name": name, "snaptime": int(snap.options.get("snaptime", "0")),
                                   "description": snap.options.get("description", ""), **self._row(snap)}
            for key in ("parent", "snapstate"):
                if snap.options.get(key):
                    row[key] = snap.options[key]
            rows.append(row)
        current: dict[str, Any] = {"name": "current", "digest": conf_digest,
                                   "running": int(vmid in self.cluster.running), "description": "You are here!"}
        if conf.options.get("parent"):
            current["parent"] = conf.options["parent"]
        return [*rows, current]

    def _reserved(self, snapname: str) -> None:
        if snapname in self.RESERVED:
            raise PveApiError(500, f"unable to use snapshot name '{snapname}' (reserved name)")

    def _save_state(self, node: str, vmid: int, conf: CtConfig, snap: CtConfig, snapname: str,
                    vmstate: bool) -> None:
        """Save the guest's RAM into the snapshot (VMs only)."""

    def _drop_state(self, snap: CtConfig) -> None:
        """Free the snapshot's RAM state volume (VMs only)."""

    def _after_rollback(self, node: str, vmid: int, snap: CtConfig, restored: CtConfig, task: Task,
                        start: bool, boot: Any) -> None:
        if start:
            boot(node, vmid, task)

    def _locked(self, conf: CtConfig) -> None:
        if conf.options.get("lock"):  # check_lock (AbstractConfig.pm 336-340)
            raise TaskAbort(f"{self.GUEST} is locked ({conf.options['lock']})")

    def create(self, user: str, node: str, vmid: int, snapname: str, description: str | None,
               vmstate: bool = False) -> str:
        self._load(node, vmid)
        self._reserved(snapname)

        def work(task: Task) -> None:
            conf, _ = self._load(node, vmid)
            if conf.options.get("template") == "1":
                raise TaskAbort("you can't take a snapshot if it's a template")
            self._locked(conf)
            snaps = sections(conf)
            if snapname in snaps:
                raise TaskAbort(f"snapshot name '{snapname}' already used")
            if not all(self._can_snapshot(volid, kind) for volid, kind in self._volumes(conf)):
                raise TaskAbort("snapshot feature is not available")
            # __snapshot_copy_config copies every key but a few, the raw lxc lines (the `lxc` key) too
            # (pve-guest-common src/PVE/AbstractConfig.pm; LXC::Config does not override it).
            snap = self._new_config(_copy(conf.options), list(conf.lxc))
            self._save_state(node, vmid, conf, snap, snapname, vmstate)
            snap.options.update(snapstate="prepare", snaptime=str(int(time.time())))
            if description:
                snap.options["description"] = description
            snaps[snapname] = snap
            conf.options["lock"] = "snapshot"
            store(conf, snaps)
            self._save(node, vmid, conf)
            task.checkpoint()  # a killed snapshot task leaves the lock and the 'prepare' state, as PVE's does
            self._volume("snapshot", node, vmid, snapname)
            del snap.options["snapstate"]
            del conf.options["lock"]
            conf.options["parent"] = snapname
            store(conf, snaps)
            self._save(node, vmid, conf)

        return self.cluster.start_task(node, self.TASKS["create"], str(vmid), user, work)

    def delete(self, user: str, node: str, vmid: int, snapname: str) -> str:
        self._load(node, vmid)

        def work(task: Task) -> None:
            conf, _ = self._load(node, vmid)
            snaps = sections(conf)
            if snapname not in snaps:
                raise TaskAbort(f"snapshot '{snapname}' does not exist")
            self._locked(conf)
            task.checkpoint()
            new_parent = snaps[snapname].options.get("parent")
            self._volume("delete", node, vmid, snapname)
            self._drop_state(snaps[snapname])
            del snaps[snapname]
            for holder in [conf, *snaps.values()]:
                if holder.options.get("parent") == snapname:
                    if new_parent:
                        holder.options["parent"] = new_parent
                    else:
                        del holder.options["parent"]
            store(conf, snaps)
            self._save(node, vmid, conf)

        return self.cluster.start_task(node, self.TASKS["delete"], str(vmid), user, work)

    def rollback(self, user: str, node: str, vmid: int, snapname: str, start: bool,
                 boot: Any) -> str:
        self._load(node, vmid)

        def work(task: Task) -> None:
            conf, _ = self._load(node, vmid)
            if conf.options.get("template") == "1":
                raise TaskAbort("you can't rollback if vm is a template")
            snaps = sections(conf)
            snap = snaps.get(snapname)
            if snap is None:
                raise TaskAbort(f"snapshot '{snapname}' does not exist")
            newer = [n for n, s in snaps.items() if n != snapname and (
                int(s.options.get("snaptime", "0")) > int(snap.options.get("snaptime", "0"))
                or snapname in _ancestors(snaps, n))]  # snaptime has 1 s resolution; the parent chain orders
            for volid, kind in self._volumes(self._new_config(dict(snap.options), [])):
                if kind == "zfspool" and newer:
                    raise TaskAbort(f"can't rollback, '{snapname}' is not most recent snapshot on "
                                    f"'{volid.split(':', 1)[1]}'")
            if snap.options.get("snapstate"):
                raise TaskAbort(f"unable to rollback to incomplete snapshot (snapstate = {snap.options['snapstate']})")
            self._locked(conf)
            self.cluster.running.discard(vmid)  # vm_stop($vmid, 1): a running guest is stopped, not refused
            task.checkpoint()
            self._volume("rollback", node, vmid, snapname)
            kept = {k: v for k, v in conf.options.items() if re.match(r"^unused\d+$", k) or k == "description"}
            restored = self._new_config({**kept, **_copy(snap.options), "parent": snapname}, list(snap.lxc))
            restored.snapshots = conf.snapshots
            self._save(node, vmid, restored)
            self._after_rollback(node, vmid, snap, restored, task, start, boot)

        return self.cluster.start_task(node, self.TASKS["rollback"], str(vmid), user, work)

class QemuSnapshots(Snapshots):
    """The VM snapshot endpoints: the same ``[SNAPNAME]`` sections in ``nodes/NODE/qemu-server/VMID.conf``, with
    qemu-server's differences (provenance: qemu-server 9.2.6, commit e6352be67f70):

    - src/PVE/API2/Qemu.pm: list adds ``vmstate`` 0/1 per snapshot (``snapshot_list`` 6076-6164); create refuses
      ``current`` and (any case) ``pending`` before the worker (6212-6216), then
      ``check_non_migratable_resources`` with ``vmstate`` ("Cannot live-migrate, snapshot (with RAM), or hibernate
      a VM with: amd-sev", src/PVE/QemuMigrate/Helpers.pm 17-33), worker ``qmsnapshot`` (6229); rollback worker
      ``qmrollback``, ``start`` only when the VM is not running after it (6421-6431); delete worker
      ``qmdelsnapshot`` (6507).
    - src/PVE/QemuConfig.pm: ``has_feature`` skips CD-ROM drives (74-93; Drive.pm ``drive_is_cdrom`` 761-767);
      ``__snapshot_save_vmstate`` (219-262) on a running VM with ``vmstate=1``: a state volume
      ``vm-VMID-state-SNAPNAME`` (``.raw`` on a file storage) on ``find_vmstate_storage`` (733-758: ``vmstatestorage``,
      else a shared storage of the VM's disks, else a local one, file-based preferred, else ``local``), and
      ``runningmachine`` recorded; ``__snapshot_rollback_hook`` (443-482) drops ``runningmachine`` and gives the VM
      a new ``vmgenid``; a snapshot with a vmstate starts the VM from it after the rollback (pve-guest-common 6.0.2
      src/PVE/AbstractConfig.pm ``snapshot_rollback`` 1196-1198); ``__snapshot_delete_vmstate_file`` (419-429).
    - "VM is locked (X)": ``check_lock`` with ``guest_type`` VM (AbstractConfig.pm 336-340).
    - Volumes: a VM disk on a file storage (dir, nfs, cifs, glusterfs) snapshots only as qcow2 (pve-storage 9.1.7
      Plugin.pm 1575-1582), thick ``lvm`` not at all (LVMPlugin.pm 1367-1382); zfspool, lvmthin, rbd, btrfs do.
    """

    GUEST = "VM"
    TASKS = {"create": "qmsnapshot", "delete": "qmdelsnapshot", "rollback": "qmrollback"}
    FILE_TYPES = frozenset({"dir", "nfs", "cifs", "glusterfs", "cephfs"})

    CONFIG = QmConfig

    def __init__(self, cluster: PveCluster, qemu: Qemu):
        super().__init__(cluster, qemu)
        self.qemu = qemu

    def _reserved(self, snapname: str) -> None:
        if snapname == "current" or snapname.lower() == "pending":
            raise PveApiError(500, f"unable to use snapshot name '{snapname}' (reserved name)")

    def _volumes(self, conf: CtConfig) -> list[tuple[str, str]]:
        volumes = []
        for key in sorted(k for k in conf.options if DISK.match(k)):
            value = conf.options[key]
            if re.search(r"(?:^|,)media=cdrom(?:,|$)", value):
                continue
            volid = value.split(",", 1)[0].removeprefix("file=")
            storage = self.cluster.storages.get(volid.split(":", 1)[0]) if ":" in volid else None
            volumes.append((volid, storage.type if storage else "path"))
        return volumes

    def _can_snapshot(self, volid: str, kind: str) -> bool:
        if kind in self.FILE_TYPES:
            return volid.endswith(".qcow2")
        return kind in SNAPSHOT_TYPES

    def _row(self, snap: CtConfig) -> dict[str, Any]:
        return {"vmstate": 1 if snap.options.get("vmstate") else 0}

    def create(self, user: str, node: str, vmid: int, snapname: str, description: str | None,
               vmstate: bool = False) -> str:
        conf, _ = self._load(node, vmid)
        self._reserved(snapname)
        if vmstate:
            blockers = [k for k in ("amd-sev", "intel-tdx") if conf.options.get(k)]
            blockers += ["virtiofs"] if any(re.match(r"^virtiofs\d+$", k) for k in conf.options) else []
            if blockers:
                raise PveApiError(500, "Cannot live-migrate, snapshot (with RAM), or hibernate a VM with: "
                                       + ", ".join(blockers))
        return super().create(user, node, vmid, snapname, description, vmstate)

    def _state_storage(self, conf: CtConfig) -> SimStorage:
        if conf.options.get("vmstatestorage"):
            return self.qemu.storage(conf.options["vmstatestorage"])
        shared: SimStorage | None = None
        local: SimStorage | None = None
        for sid in sorted({volid.split(":", 1)[0] for volid, _ in self._volumes(conf)}):  # foreach_storage_used_by_vm
            storage = self.cluster.storages.get(sid)
            if storage is None:
                continue
            file_based = storage.type in self.FILE_TYPES
            if storage.shared:
                shared = storage if shared is None or file_based else shared
            else:
                local = storage if local is None or file_based else local
        return shared or local or self.qemu.storage("local")

    def _save_state(self, node: str, vmid: int, conf: CtConfig, snap: CtConfig, snapname: str,
                    vmstate: bool) -> None:
        if not vmstate or vmid not in self.cluster.running:
            return  # a stopped VM has no RAM to save: the snapshot is taken without one
        storage = self._state_storage(conf)
        name = f"vm-{vmid}-state-{snapname}"
        volid = f"{storage.name}:{vmid}/{name}.raw" if storage.type in self.FILE_TYPES else f"{storage.name}:{name}"
        memory = int(re.sub(r"^current=|,.*$", "", conf.options.get("memory", "512")) or "512")
        storage.volumes[volid] = (node, (memory * 2 + 500) * MiB)
        machine = conf.options.get("machine", "")
        snap.options["vmstate"] = volid
        snap.options["runningmachine"] = machine if "-" in machine else (
            f"pc-{'q35' if machine == 'q35' else 'i440fx'}-{PINNED}")

    def _drop_state(self, snap: CtConfig) -> None:
        volid = snap.options.get("vmstate")
        if volid:
            for storage in self.cluster.storages.values():
                storage.volumes.pop(volid, None)

    def _after_rollback(self, node: str, vmid: int, snap: CtConfig, restored: CtConfig, task: Task,
                        start: bool, boot: Any) -> None:
        restored.options.pop("runningmachine", None)
        if restored.options.get("vmgenid"):
            restored.options["vmgenid"] = str(uuid.uuid4())
        self._save(node, vmid, restored)
        if snap.options.get("vmstate"):
            task.log.append(f"resuming VM {vmid} from the RAM state of snapshot {snap.options['vmstate']}")
            boot(node, vmid, task)
        elif start:
            boot(node, vmid, task)


def snapshot_routes(guests: str, snapshots: Snapshots, boot: Callable[[str, int, Task], None]
                    ) -> dict[tuple[str, str], Any]:
    """The four snapshot routes of ``/nodes/{node}/GUESTS/{vmid}`` (``lxc`` or ``qemu``), in ``PveApi.routes``'
    shape; ``boot`` starts the guest after a rollback asked to (``start=1``)."""
    snap = f"/nodes/{{node}}/{guests}/{{vmid}}/snapshot"
    return {
        ("GET", snap): lambda u, p: snapshots.list(p["node"], int(p["vmid"])),
        ("POST", snap): lambda u, p: snapshots.create(u, p["node"], int(p["vmid"]), p["snapname"],
                                                      p.get("description"), p.get("vmstate") == "1"),
        ("DELETE", snap + "/{snapname}"):
            lambda u, p: snapshots.delete(u, p["node"], int(p["vmid"]), p["snapname"]),
        ("POST", snap + "/{snapname}/rollback"):
            lambda u, p: snapshots.rollback(u, p["node"], int(p["vmid"]), p["snapname"], p.get("start") == "1",
                                            boot),
    }


__all__ = ["SNAPSHOT_TYPES", "QemuSnapshots", "Snapshots", "digest", "sections", "snapshot_routes", "store"]
