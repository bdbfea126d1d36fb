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
from typing import Any

from support.pve_config import CtConfig, digest
from support.pve_schema import PveApiError
from support.pve_state import PveCluster, Task, TaskAbort

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
    """The snapshot endpoints of one simulated cluster."""

    def __init__(self, cluster: PveCluster):
        self.cluster = cluster

    def _volumes(self, conf: CtConfig) -> list[tuple[str, str]]:
        """(volid, storage type) of the container's volumes; a bind mount's type is ``bind``."""
        volumes = []
        for key in sorted(k for k in conf.options if _VOLUME_KEY.match(k)):
            volid = conf.options[key].split(",", 1)[0]
            storage = self.cluster.storages.get(volid.split(":", 1)[0]) if ":" in volid else None
            volumes.append((volid, storage.type if storage else "bind"))
        return volumes

    def list(self, node: str, vmid: int) -> list[dict[str, Any]]:
        conf, conf_digest = self.cluster.load(node, vmid)
        rows: list[dict[str, Any]] = []
        for name, snap in sections(conf).items():
            row: dict[str, Any] = {"name": name, "snaptime": int(snap.options.get("snaptime", "0")),
                                   "description": snap.options.get("description", "")}
            for key in ("parent", "snapstate"):
                if snap.options.get(key):
                    row[key] = snap.options[key]
            rows.append(row)
        current: dict[str, Any] = {"name": "current", "digest": conf_digest,
                                   "running": int(vmid in self.cluster.running), "description": "You are here!"}
        if conf.options.get("parent"):
            current["parent"] = conf.options["parent"]
        return [*rows, current]

    def create(self, user: str, node: str, vmid: int, snapname: str, description: str | None) -> str:
        self.cluster.load(node, vmid)
        if snapname in ("current", "vzdump"):
            raise PveApiError(500, f"unable to use snapshot name '{snapname}' (reserved name)")

        def work(task: Task) -> None:
            conf, _ = self.cluster.load(node, vmid)
            if conf.options.get("template") == "1":
                raise TaskAbort("you can't take a snapshot if it's a template")
            if conf.options.get("lock"):
                raise TaskAbort(f"CT is locked ({conf.options['lock']})")
            snaps = sections(conf)
            if snapname in snaps:
                raise TaskAbort(f"snapshot name '{snapname}' already used")
            if any(kind not in SNAPSHOT_TYPES for _, kind in self._volumes(conf)):
                raise TaskAbort("snapshot feature is not available")
            # __snapshot_copy_config copies every key but a few, the raw lxc lines (the `lxc` key) too
            # (pve-guest-common src/PVE/AbstractConfig.pm; LXC::Config does not override it).
            snap = CtConfig(options=_copy(conf.options), lxc=list(conf.lxc))
            snap.options.update(snapstate="prepare", snaptime=str(int(time.time())))
            if description:
                snap.options["description"] = description
            snaps[snapname] = snap
            conf.options["lock"] = "snapshot"
            store(conf, snaps)
            self.cluster.save(node, vmid, conf)
            task.checkpoint()  # a killed snapshot task leaves the lock and the 'prepare' state, as PVE's does
            del snap.options["snapstate"]
            del conf.options["lock"]
            conf.options["parent"] = snapname
            store(conf, snaps)
            self.cluster.save(node, vmid, conf)

        return self.cluster.start_task(node, "vzsnapshot", str(vmid), user, work)

    def delete(self, user: str, node: str, vmid: int, snapname: str) -> str:
        self.cluster.load(node, vmid)

        def work(task: Task) -> None:
            conf, _ = self.cluster.load(node, vmid)
            snaps = sections(conf)
            if snapname not in snaps:
                raise TaskAbort(f"snapshot '{snapname}' does not exist")
            if conf.options.get("lock"):
                raise TaskAbort(f"CT is locked ({conf.options['lock']})")
            task.checkpoint()
            new_parent = snaps[snapname].options.get("parent")
            del snaps[snapname]
            for holder in [conf, *snaps.values()]:
                if holder.options.get("parent") == snapname:
                    if new_parent:
                        holder.options["parent"] = new_parent
                    else:
                        del holder.options["parent"]
            store(conf, snaps)
            self.cluster.save(node, vmid, conf)

        return self.cluster.start_task(node, "vzdelsnapshot", str(vmid), user, work)

    def rollback(self, user: str, node: str, vmid: int, snapname: str, start: bool,
                 boot: Any) -> str:
        self.cluster.load(node, vmid)

        def work(task: Task) -> None:
            conf, _ = self.cluster.load(node, vmid)
            if conf.options.get("template") == "1":
                raise TaskAbort("you can't rollback if vm is a template")
            snaps = sections(conf)
            snap = snaps.get(snapname)
            if snap is None:
                raise TaskAbort(f"snapshot '{snapname}' does not exist")
            newer = [n for n, s in snaps.items() if n != snapname and (
                int(s.options.get("snaptime", "0")) > int(snap.options.get("snaptime", "0"))
                or snapname in _ancestors(snaps, n))]  # snaptime has 1 s resolution; the parent chain orders
            for volid, kind in self._volumes(CtConfig(options=dict(snap.options))):
                if kind == "zfspool" and newer:
                    raise TaskAbort(f"can't rollback, '{snapname}' is not most recent snapshot on "
                                    f"'{volid.split(':', 1)[1]}'")
            if snap.options.get("snapstate"):
                raise TaskAbort(f"unable to rollback to incomplete snapshot (snapstate = {snap.options['snapstate']})")
            if conf.options.get("lock"):
                raise TaskAbort(f"CT is locked ({conf.options['lock']})")
            self.cluster.running.discard(vmid)  # vm_stop($vmid, 1): a running CT is stopped, not refused
            task.checkpoint()
            kept = {k: v for k, v in conf.options.items() if re.match(r"^unused\d+$", k) or k == "description"}
            restored = CtConfig(options={**kept, **_copy(snap.options), "parent": snapname}, lxc=list(snap.lxc))
            restored.snapshots = conf.snapshots
            self.cluster.save(node, vmid, restored)
            if start:
                boot(node, vmid, task)

        return self.cluster.start_task(node, "vzrollback", str(vmid), user, work)


__all__ = ["SNAPSHOT_TYPES", "Snapshots", "digest", "sections", "store"]
