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

A snapshot of a RUNNING instance on ``dir`` is a full copy taken with the instance frozen for the whole copy
(canonical/lxd lxd/storage/drivers/driver_dir.go ``Info()``: ``RunningCopyFreeze: true``, and the copy is an rsync of
the root filesystem, driver_dir_volumes.go ``CreateVolumeSnapshot``; the instance is frozen around it in
lxd/storage/backend_lxd.go ``CreateInstanceSnapshot``): the service stops answering until the copy ends (measured:
27-86 s with a 900 MB stack on 2 cores). ``Support.freezes_running`` says so, and labwright.snapshots decides.

Every snapshot has a deadline (``snapshot_timeout``), and a guest is watched while LXD works: a freeze that does not
complete within ``FREEZING_STUCK`` seconds (a task caught mid-fork on the cgroup v1 freezer once kept a guest
FREEZING for 16 minutes, and LXD's "Snapshotting instance" operation with it) is asked again, as writing the freezer
state again by hand did; at the deadline the guest is thawed and the step fails naming what it waited for. A guest
found Frozen with no LXD operation on it (a snapshot that never finished) is thawed before a new one is taken.
Each of these is one line in ``notes``.
"""

from __future__ import annotations

import re
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from labwright.errors import BadInput, LxdError, LxdNotFound, OperationTimeout
from labwright.hostnames import LxdName
from labwright.lxd.client import LxdClient
from labwright.lxd.remotes import resolve_endpoint
from labwright.snapshots.model import Snapshot, SnapshotBackend, Support, snapshot_from
from labwright.textio import ascii_digits

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


#: Drivers whose snapshot of a running instance is a full copy with the instance frozen for all of it.
COPY_FREEZE_DRIVERS = frozenset({"dir"})
#: Instance states of a guest whose processes are (being) frozen.
FROZEN_STATES = ("Frozen", "Freezing")
#: Seconds a snapshot may take before the guest is thawed and the step fails (a copy of a large guest on dir).
SNAPSHOT_TIMEOUT = 900.0
#: Seconds a guest may stay Freezing (a freeze completes in milliseconds) before the freeze is asked again.
FREEZING_STUCK = 10.0
#: Where the cgroup freezer of a local container lives (cgroup v1, then v2); LXD and Incus name the cgroup
#: ``lxc.payload.<instance>`` (``<project>_<instance>`` outside the default project).
FREEZER_FILES = ("/sys/fs/cgroup/freezer/lxc.payload.{name}/freezer.state",
                 "/sys/fs/cgroup/lxc.payload.{name}/cgroup.freeze")


#: A snapshot refused because a file vanished while LXD walked the guest's tree (see LxdSnapshots.create).
_VANISHED = re.compile(r"lstat .*: no such file or directory")
VANISHED_FILE_TRIES = 3


def operations_on(client: LxdClient, instance: str) -> list[dict[str, Any]]:
    """LXD's running operations that name ``instance`` among their resources."""
    ops = client.request("GET", "/1.0/operations", params={"recursion": 1}) or {}
    path = f"/1.0/instances/{instance}"
    found = []
    for op in (ops.get("running") or []) if isinstance(ops, dict) else []:
        resources = (op.get("resources") or {}).get("instances") or []
        if any(str(r).split("?", 1)[0] == path for r in resources):
            found.append(op)
    return found


def freeze_note(client: LxdClient, instance: str, status: str, tool: str | None = None) -> str:
    """One line for a guest whose status is Frozen or Freezing (its services do not answer): what holds it, and
    how to thaw it when nothing does (``tool``: the client to name, by default the daemon's own: ``incus`` or
    ``lxc``); "" for any other status."""
    if status not in FROZEN_STATES:
        return ""
    daemon, tool = client.endpoint.title, tool or client.endpoint.tool
    try:
        held = operations_on(client, instance)
    except LxdError:
        held = []
    if held:
        what = ", ".join(sorted({str(op.get("description") or "an operation") for op in held}))
        return f"{status} by {daemon}'s running {what}: its services do not answer until it ends"
    return (f"{status} with no {daemon} operation on it (a snapshot that did not finish, or `{tool} pause`): its "
            f"services do not answer; `{tool} start {instance}` thaws it")


def _created(value: Any) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


class LxdSnapshots(SnapshotBackend):
    def __init__(self, name: LxdName, client: LxdClient | None = None, snapshot_timeout: float = SNAPSHOT_TIMEOUT,
                 freezer_root: str = ""):
        self.name = name
        self.label = name.host
        self.notes: list[str] = []
        self.snapshot_timeout = snapshot_timeout
        self._freezer_root = freezer_root  # tests: a tree standing in for /sys/fs/cgroup
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

    def status(self) -> str:
        return str(self._instance().get("status") or "")

    def _operations_on(self) -> list[dict[str, Any]]:
        return operations_on(self.client, self.name.instance)

    def _freezer(self) -> Path | None:
        """The local cgroup freezer file of this container, None for a remote daemon or a cgroup not found."""
        if self.client.endpoint.url:
            return None
        cgroup = self.name.instance if not self.client.project or self.client.project == "default" else \
            f"{self.client.project}_{self.name.instance}"
        for pattern in FREEZER_FILES:
            path = Path(self._freezer_root + pattern.format(name=cgroup))
            if path.exists():
                return path
        return None

    def _write_freezer(self, frozen: bool) -> bool:
        path = self._freezer()
        if path is None:
            return False
        value = ("FROZEN" if frozen else "THAWED") if path.name == "freezer.state" else ("1" if frozen else "0")
        try:
            path.write_text(value)
        except OSError:
            return False
        return True

    def thaw(self, why: str) -> str:
        """Thaw a guest left Frozen or Freezing; return the one line that says what was found and done.

        A Freezing guest is never thawed by writing THAWED: liblxc's freeze polls the freezer until it reads FROZEN,
        so LXD's operation would then wait for ever (found by this module's own test, on LXD 5.0.2 with the cgroup v1
        freezer). The freeze is completed first (FROZEN written again, what unsticks a task caught mid-fork), then
        the guest is unfrozen through LXD; LXD goes on copying with the guest running, and its snapshot succeeds."""
        status = self.status()
        if status not in FROZEN_STATES:
            return ""
        found = status
        tool = "incus" if self.name.flavour == "incus" else "lxc"
        if status == "Freezing":
            if self._write_freezer(True):
                status = self._status_after_freezing()
            if status == "Freezing":
                note = (f"{self.label} was Freezing {why}: it cannot be completed from here: on its host write FROZEN "
                        f"to /sys/fs/cgroup/freezer/lxc.payload.{self.name.instance}/freezer.state (then "
                        f"`{tool} start {self.name.instance}` thaws it)")
                self.notes.append(note)
                return note
        try:
            self.client.set_state(self.name.instance, "unfreeze")
            done = "thawed it"
        except LxdError as exc:
            # LXD says Frozen, so liblxc waits on nothing: the cgroup can be thawed directly.
            done = "thawed its freezer cgroup" if self._write_freezer(False) else f"thawing failed ({exc})"
        note = f"{self.label} was {found} {why}: {done}"
        self.notes.append(note)
        return note

    def _status_after_freezing(self) -> str:
        """The status once LXD has seen the freeze complete (liblxc polls about once a second), at most
        FREEZING_STUCK seconds from now."""
        deadline = time.monotonic() + FREEZING_STUCK
        while True:
            status = self.status()
            if status != "Freezing" or time.monotonic() >= deadline:
                return status
            time.sleep(0.2)

    def thaw_left_frozen(self) -> str:
        """A guest Frozen or Freezing with no LXD operation on it was left so by a snapshot that never finished
        (or paused by hand): thaw it before anything else runs; return the line said, "" when nothing was."""
        if self.status() not in FROZEN_STATES or self._operations_on():
            return ""
        tool = "incus" if self.name.flavour == "incus" else "lxc"
        return self.thaw(f"with no {self.client.endpoint.title} operation on it (a snapshot that did not finish, or "
                         f"`{tool} pause`)")

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
                           f"{self.client.endpoint.title} storage driver {driver!r} of pool {pool} cannot snapshot "
                           "instances")
        return Support(True, f"pool {pool} ({driver})", how, freezes_running=driver in COPY_FREEZE_DRIVERS)

    def copy_size(self) -> int | None:
        """Bytes a full copy of the guest's root filesystem moves (``du -sxb /`` in the guest), None if unknown."""
        try:
            result = self.client.exec(self.name.instance, ["du", "-sxb", "/"])
        except LxdError:
            return None
        head = result.stdout.decode(errors="replace").split()
        return int(head[0]) if head and ascii_digits(head[0]) else None

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
        self.thaw_left_frozen()
        for attempt in range(VANISHED_FILE_TRIES):
            try:
                self._create_once(name)
                return
            except LxdError as exc:
                # btrfs: LXD looks for nested subvolumes by walking the running guest's whole tree first
                # (lxd/storage/drivers/driver_btrfs_utils.go getSubvolumes, filepath.Walk); a file the guest removes
                # during the walk (dhclient's resolv.conf.dhclient-new.PID) fails the snapshot with
                # "lstat ...: no such file or directory", and nothing was made. Asking again is safe.
                if attempt + 1 == VANISHED_FILE_TRIES or not _VANISHED.search(str(exc)):
                    raise

    def _create_once(self, name: str) -> None:
        meta = self.client.request("POST", f"{self._path}/snapshots", {"name": name, "stateful": False}, wait=False)
        operation = f"/1.0/operations/{(meta or {}).get('id')}"
        freezing_since: list[float] = []

        def watch(_op: dict[str, Any]) -> None:
            # A freeze that hangs (a task caught mid-fork, cgroup v1) is asked again once, as by hand.
            if self.status() != "Freezing":
                freezing_since.clear()
                return
            if not freezing_since:
                freezing_since.append(time.monotonic())
            elif time.monotonic() - freezing_since[0] >= FREEZING_STUCK and len(freezing_since) == 1:
                freezing_since.append(time.monotonic())
                asked = self._write_freezer(True)
                self.notes.append(f"{self.label} stayed Freezing {FREEZING_STUCK:.0f} s into snapshot {name}: "
                                  + ("the freeze was asked again" if asked else "its freezer is not reachable from "
                                     "here; waiting for the deadline"))

        try:
            self.client.wait_operation(operation, timeout=self.snapshot_timeout, every=2, on_wait=watch,
                                       what=f"{self.label}: snapshot {name}")
        except OperationTimeout as exc:
            note = self.thaw(f"by snapshot {name}, which did not finish within {self.snapshot_timeout:.0f} s")
            raise OperationTimeout(f"{exc}" + (f"; {note}" if note else "") + "; the snapshot may still complete "
                                   f"({self.client.endpoint.title} goes on copying): list it with `labwright guest "
                                   f"snapshots {self.label}`") from exc

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
