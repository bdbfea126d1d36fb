"""Snapshots of an LXD/Incus instance through labwright's LXD client (``labwright.lxd.client``).

Requests (LXD REST API, doc/rest-api.yaml, ``/1.0/instances/{name}/snapshots``):
``GET .../snapshots?recursion=1`` lists (``name``, ``created_at``); ``POST .../snapshots`` ``{"name", "stateful":
false}`` takes one (an async operation); ``DELETE .../snapshots/{snap}`` drops one; ``PUT /1.0/instances/{name}``
``{"restore": snap}`` puts it back (what ``lxc restore`` sends).

Every LXD storage driver that holds instances can snapshot them; how differs and is said: ``dir`` copies the
whole root filesystem for each snapshot (rsync), ``btrfs``/``zfs``/``lvm``/``ceph`` make a native snapshot
(LXD doc/reference/storage_drivers.md, "Feature comparison": "Optimized instance snapshots" is no for dir only).
A driver outside that list (``cephfs``, ``cephobject``, or one added later) is reported unsupported before any
request is made.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from labwright.errors import BadInput, LxdError, LxdNotFound
from labwright.hostnames import LxdName
from labwright.lxd.client import LxdClient
from labwright.lxd.remotes import resolve_endpoint
from labwright.snapshots.model import Snapshot, SnapshotBackend, Support, snapshot_from

#: driver -> how an instance snapshot is made on it.
DRIVERS = {
    "dir": "copy (dir pool: each snapshot is a full copy of the root filesystem; slower, and as large as it)",
    "btrfs": "native (btrfs subvolume snapshot)",
    "zfs": "native (zfs snapshot)",
    "lvm": "native (LVM snapshot)",
    "lvmcluster": "native (LVM snapshot)",
    "ceph": "native (RBD snapshot)",
    "powerflex": "native",
    "pure": "native",
}


#: A snapshot refused because a file vanished while LXD walked the guest's tree (see LxdSnapshots.create).
_VANISHED = re.compile(r"lstat .*: no such file or directory")
VANISHED_FILE_TRIES = 3


def _created(value: Any) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


class LxdSnapshots(SnapshotBackend):
    def __init__(self, name: LxdName, client: LxdClient | None = None):
        self.name = name
        self.label = name.host
        if client is None:
            endpoint, project = resolve_endpoint(name.remote, flavour=name.flavour)
            client = LxdClient(endpoint, project=project)
            self._own_client = True
        else:
            self._own_client = False
        self.client = client
        self._path = f"/1.0/instances/{name.instance}"

    def close(self) -> None:
        if self._own_client:
            self.client.close()

    def missing(self) -> str:
        tool = "incus" if self.name.flavour == "incus" else "lxc"
        return (f"{self.label}: no instance {self.name.instance!r} on the daemon at {self.client.endpoint.describe()}"
                f"; check the name (`{tool} list{' ' + self.name.remote + ':' if self.name.remote else ''}`)")

    def _instance(self) -> dict[str, Any]:
        try:
            return self.client.instance(self.name.instance)
        except LxdNotFound as exc:
            raise BadInput(self.missing()) from exc

    def exists(self) -> bool:
        return self.client.instance_or_none(self.name.instance) is not None

    def running(self) -> bool:
        return str(self._instance().get("status")) != "Stopped"

    def support(self) -> Support:
        devices = self._instance().get("expanded_devices") or {}
        root = next((d for d in devices.values() if d.get("type") == "disk" and d.get("path") == "/"), None)
        pool = str((root or {}).get("pool") or "")
        if not pool:
            return Support(False, "?", "", f"{self.label} has no root disk on a storage pool")
        driver = str((self.client.get_or_none(f"/1.0/storage-pools/{pool}") or {}).get("driver") or "")
        how = DRIVERS.get(driver)
        if how is None:
            return Support(False, f"pool {pool} ({driver or 'unknown driver'})", "",
                           f"LXD storage driver {driver!r} of pool {pool} cannot snapshot instances")
        return Support(True, f"pool {pool} ({driver})", how)

    def list(self) -> list[Snapshot]:
        self._instance()
        items = self.client.request("GET", f"{self._path}/snapshots", params={"recursion": 1}) or []
        snapshots = []
        for item in items:
            name = str(item.get("name", "")).rsplit("/", 1)[-1]
            snapshots.append(snapshot_from(name, _created(item.get("created_at"))))
        return snapshots

    def create(self, name: str, description: str) -> None:
        # Instance snapshots have no description field in LXD; the name carries the step.
        for attempt in range(VANISHED_FILE_TRIES):
            try:
                self.client.request("POST", f"{self._path}/snapshots", {"name": name, "stateful": False})
                return
            except LxdError as exc:
                # btrfs: LXD looks for nested subvolumes by walking the running guest's whole tree first
                # (lxd/storage/drivers/driver_btrfs_utils.go getSubvolumes, filepath.Walk); a file the guest removes
                # during the walk (dhclient's resolv.conf.dhclient-new.PID) fails the snapshot with
                # "lstat ...: no such file or directory", and nothing was made. Asking again is safe.
                if attempt + 1 == VANISHED_FILE_TRIES or not _VANISHED.search(str(exc)):
                    raise

    def delete(self, name: str) -> None:
        self.client.request("DELETE", f"{self._path}/snapshots/{name}")

    def rollback(self, name: str) -> None:
        self.client.request("PUT", self._path, {"restore": name})

    def stop(self) -> None:
        self.client.set_state(self.name.instance, "stop", force=True)

    def start(self) -> None:
        self.client.set_state(self.name.instance, "start")

    def native_command(self, action: str, name: str) -> str:
        tool = "incus" if self.name.flavour == "incus" else "lxc"
        target = f"{self.name.remote}:{self.name.instance}" if self.name.remote else self.name.instance
        if action == "restore":
            return f"{tool} restore {target} {name}"
        if action == "start":
            return f"{tool} start {target}"
        return f"{tool} delete {target}/{name}"
