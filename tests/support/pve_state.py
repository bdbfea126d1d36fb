"""The simulated cluster's state: nodes, storages, users and tokens, pmxcfs files, running containers, tasks.

Containers live as config files under a temporary pmxcfs directory (``nodes/NODE/lxc/VMID.conf``),
so a test can read or edit them like ``/etc/pve`` on a node. Tasks run in threads with PVE's UPIDs
and can be told to fail or to hang (see ``PveCluster.plan_task``), which is how tests reach the
error paths of a client's task polling.

Provenance (read for these behaviours; versions and commits in docs/pve-simulator.md):
- pve-common 9.2.1 (f665029eac78), src/PVE/UPID.pm: ``UPID:NODE:%08X pid:%08X pstart:%08X start:TYPE:ID:USER:``
  (``encode`` 18-30, ``decode`` 32-57); exit status from the log's last line: "TASK OK" -> ``OK``, "TASK ERROR: X"
  -> X, "TASK WARNINGS: N" -> ``WARNINGS: N`` (``read_status`` 71-85); WARNINGS is not an error (88-91).
- pve-common 9.2.1, src/PVE/RESTEnvironment.pm ``fork_worker`` (520-680): the UPID is returned at once; a
  killed worker dies "received interrupt" (566); the error is chomped and newlines become spaces (654-658);
  ``warn`` logs "WARN: ..." and counts (757-769), ending "TASK WARNINGS: N" (659-661).
- pve-guest-common 6.0.2 (4a8f6cbf78e1), src/PVE/AbstractConfig.pm ``load_config``: "Configuration file
  'nodes/NODE/lxc/VMID.conf' does not exist" (50-62); pve-common src/PVE/Tools.pm ``assert_if_modified`` (868-873).
- pve-access-control 9.1.1 (5ccd07d93025), src/PVE/RPCEnvironment.pm ``check``/``check_any`` (291-326).
"""

from __future__ import annotations

import itertools
import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from support.pve_config import CtConfig, digest
from support.pve_schema import PveApiError

GiB = 1024**3
#: What an "Administrator" holds; a principal with ``privileges=None`` has all of them.
ALL = None


@dataclass
class SimNode:
    """One cluster node. ``devices`` are the host's character devices (path -> (major, minor)) that
    ``devN`` entries may name; PVE stats them on every config change and at start."""

    name: str
    version: str = "8.2.4"
    devices: dict[str, tuple[int, int]] = field(default_factory=dict)
    online: bool = True
    ip: str = "127.0.0.1"
    maxcpu: int = 16
    maxmem: int = 64 * GiB
    #: The host's PCI devices as ``GET /nodes/NODE/hardware/pci`` lists them with ``pci-class-blacklist=`` (none
    #: left out): ``id``, ``class``, ``vendor``, ``device``, ``iommugroup`` (-1: the IOMMU is off), names... See
    #: ``support.pve_qemu.gpu_host_pci`` for a typical host.
    pci: list[dict[str, object]] = field(default_factory=list)

    @property
    def release(self) -> str:
        return ".".join(self.version.split("-")[0].split(".")[:2])

    def at_least(self, major: int, minor: int) -> bool:
        parts = [int(p) for p in self.version.split("-")[0].split(".")[:2] if p.isdigit()] + [0, 0]
        return (parts[0], parts[1]) >= (major, minor)


@dataclass
class SimStorage:
    """A storage. ``templates`` are file names under ``vztmpl/`` (only on storages with vztmpl content)."""

    name: str
    type: str = "dir"
    content: tuple[str, ...] = ("iso", "vztmpl", "backup")
    shared: bool = False
    templates: list[str] = field(default_factory=list)
    total: int = 200 * GiB
    volumes: dict[str, tuple[str, int]] = field(default_factory=dict)  # volid -> (node, bytes)

    def used(self, node: str) -> int:
        """Bytes allocated on ``node`` (a shared storage counts every node's volumes)."""
        return sum(size for owner, size in self.volumes.values() if self.shared or owner == node)

    def volume_name(self, vmid: int, index: int) -> str:
        """Where a new disk goes: ``local-lvm:vm-101-disk-0`` (block storages) or ``local:101/vm-101-disk-0.raw``."""
        if self.type in ("dir", "nfs", "cifs", "glusterfs", "btrfs"):
            return f"{self.name}:{vmid}/vm-{vmid}-disk-{index}.raw"
        if self.type in ("zfspool",):
            return f"{self.name}:subvol-{vmid}-disk-{index}"
        return f"{self.name}:vm-{vmid}-disk-{index}"


@dataclass
class Principal:
    """A user (``root@pam``, with a password) or an API token (``root@pam!ci``, with its secret)."""

    userid: str
    secret: str
    privileges: frozenset[str] | None = ALL

    @property
    def is_token(self) -> bool:
        return "!" in self.userid


class TaskAbort(Exception):
    """Ends a task's work; the text becomes the task's ``exitstatus``."""


@dataclass
class Task:
    upid: str
    node: str
    type: str
    id: str
    user: str
    pid: int
    pstart: int
    starttime: int
    status: str = "running"
    exitstatus: str | None = None
    endtime: int | None = None
    log: list[str] = field(default_factory=list)
    fail: str | None = None
    hang: bool = False
    warnings: list[str] = field(default_factory=list)
    cancel: threading.Event = field(default_factory=threading.Event, repr=False)

    def checkpoint(self) -> None:
        """Where a killed or a made-to-fail task stops, after the work it did so far (as a signal would)."""
        if self.cancel.is_set():
            raise TaskAbort("received interrupt")
        if self.fail is not None:
            raise TaskAbort(self.fail)

    def as_status(self) -> dict[str, object]:
        data: dict[str, object] = {"upid": self.upid, "node": self.node, "pid": self.pid, "pstart": self.pstart,
                                   "starttime": self.starttime, "type": self.type, "id": self.id, "user": self.user,
                                   "status": self.status}
        if self.status == "stopped":
            data["exitstatus"] = self.exitstatus
        return data


@dataclass
class _TaskPlan:
    kind: str  # "fail", "warn" or "hang"
    task_type: str | None
    message: str = ""


@dataclass(frozen=True)
class PassthroughNode:
    """A device node inside a CT, from its ``devN`` line: pve-container 6.1.10 (94f558522ef6) src/PVE/LXC.pm
    ``create_passthrough_device_node`` 1897-1921 mknods it with the host node's rdev, then ``chmod``s it to the
    line's ``mode`` (default 0660, 1906-1909) and ``chown``s it to its ``uid``/``gid`` (default 0, 1911-1918;
    the CT's ids, mapped to the host's for an unprivileged CT)."""

    major: int
    minor: int
    mode: int
    uid: int
    gid: int


class PveCluster:
    """All state behind the API. Every mutation happens under ``lock``; tasks take it for their work."""

    def __init__(self, nodes: list[SimNode], storages: list[SimStorage], principals: list[Principal], pmxcfs: Path,
                 task_seconds: float = 0.05, cluster_name: str | None = None):
        self.nodes = {n.name: n for n in nodes}
        self.storages = {s.name: s for s in storages}
        self.principals = {p.userid: p for p in principals}
        self.pmxcfs = pmxcfs
        self.task_seconds = task_seconds
        self.cluster_name = cluster_name
        self.lock = threading.RLock()
        self.running: set[int] = set()
        #: The device nodes a running CT's devN lines made, as pve-container makes them at start
        #: (``create_passthrough_device_node``): vmid -> {path: PassthroughNode}.
        self.passthrough: dict[int, dict[str, PassthroughNode]] = {}
        #: Called with (node, vmid, config) when a CT boots, before it counts as running; an exception fails the
        #: start task. Tests set it to make the CT real on a node (see PveSimulator's ``on_boot``).
        self.on_boot: Callable[[str, int, CtConfig], None] | None = None
        #: Cluster-wide PCI resource mappings (``/etc/pve/mapping/pci.cfg``): id -> {node: "0000:01:00"}.
        self.pci_mappings: dict[str, dict[str, str]] = {}
        self.tasks: dict[str, Task] = {}
        self._plans: list[_TaskPlan] = []
        self._pids = itertools.count(random.randrange(100_000, 900_000))
        self._threads: list[threading.Thread] = []
        for node in nodes:
            (pmxcfs / "nodes" / node.name / "lxc").mkdir(parents=True, exist_ok=True)
            (pmxcfs / "nodes" / node.name / "qemu-server").mkdir(parents=True, exist_ok=True)

    # --- container files ------------------------------------------------------------------------
    def conf_path(self, node: str, vmid: int) -> Path:
        return self.pmxcfs / "nodes" / node / "lxc" / f"{vmid}.conf"

    def qemu_conf_path(self, node: str, vmid: int) -> Path:
        return self.pmxcfs / "nodes" / node / "qemu-server" / f"{vmid}.conf"

    def locate(self, vmid: int) -> str | None:
        """The node whose pmxcfs directory holds ``vmid`` as a container or a VM (PVE's vmlist), or None."""
        found = self.locate_guest(vmid)
        return found[0] if found else None

    def locate_guest(self, vmid: int) -> tuple[str, str] | None:
        """(node, ``lxc`` or ``qemu``) of ``vmid`` in the vmlist, or None."""
        for node in self.nodes:
            if self.conf_path(node, vmid).exists():
                return node, "lxc"
            if self.qemu_conf_path(node, vmid).exists():
                return node, "qemu"
        return None

    def vmid_unused(self, vmid: int) -> None:
        """``PVE::Cluster::check_vmid_unused`` (pve-cluster 9.1.6 src/PVE/Cluster.pm 785-797)."""
        found = self.locate_guest(vmid)
        if found is not None:
            raise PveApiError(500, f"{'VM' if found[1] == 'qemu' else 'CT'} {vmid} already exists on node "
                                   f"'{found[0]}'")

    def qemu_vmids(self) -> Iterator[tuple[str, int]]:
        for node in self.nodes:
            for path in sorted((self.pmxcfs / "nodes" / node / "qemu-server").glob("*.conf")):
                if path.stem.isdigit():
                    yield node, int(path.stem)

    def vmids(self) -> Iterator[tuple[str, int]]:
        for node in self.nodes:
            for path in sorted((self.pmxcfs / "nodes" / node / "lxc").glob("*.conf")):
                if path.stem.isdigit():
                    yield node, int(path.stem)

    def load(self, node: str, vmid: int) -> tuple[CtConfig, str]:
        """(config, digest); a missing file is PVE's 500 naming the pmxcfs path."""
        path = self.conf_path(node, vmid)
        try:
            text = path.read_text()
        except FileNotFoundError:
            raise PveApiError(500, f"Configuration file 'nodes/{node}/lxc/{vmid}.conf' does not exist") from None
        return CtConfig.parse(text, vmid), digest(text)

    def save(self, node: str, vmid: int, conf: CtConfig) -> None:
        path = self.conf_path(node, vmid)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(conf.render())
        os.replace(tmp, path)  # pmxcfs writes are atomic per file

    # --- permissions ------------------------------------------------------------------------------
    def has_privs(self, userid: str, privs: list[str], any_of: bool = False) -> bool:
        principal = self.principals.get(userid)
        if principal is None:
            return False
        if principal.privileges is ALL:
            return True
        held = [p in principal.privileges for p in privs]
        return any(held) if any_of else all(held)

    def check_perm(self, userid: str, path: str, privs: list[str], any_of: bool = False) -> None:
        """``rpcenv->check``: 403 "Permission check failed (PATH, PRIV)" when the principal lacks them."""
        if self.has_privs(userid, privs, any_of):
            return
        if any_of:
            raise PveApiError(403, f"Permission check failed ({path}, {'|'.join(privs)})")
        missing = next(p for p in privs if not self.has_privs(userid, [p]))  # check() names the first one missing
        raise PveApiError(403, f"Permission check failed ({path}, {missing})")

    # --- tasks ----------------------------------------------------------------------------------
    def plan_task(self, kind: str, task_type: str | None = None, message: str = "") -> None:
        """Make the next task (of ``task_type``, e.g. ``vzcreate``; any when None) ``fail`` with ``message``
        as its exitstatus, or ``hang`` until it is stopped (``DELETE .../tasks/UPID``) or the simulator stops."""
        self._plans.append(_TaskPlan(kind, task_type, message))

    def start_task(self, node: str, task_type: str, task_id: str, user: str, work: Callable[[Task], None]) -> str:
        """Fork a worker like ``fork_worker``: returns the UPID at once; ``work`` runs in a thread."""
        pid, now = next(self._pids), int(time.time())
        pstart = int(time.monotonic() * 100) % 0xFFFFFFFF
        upid = f"UPID:{node}:{pid:08X}:{pstart:08X}:{now:08X}:{task_type}:{task_id}:{user}:"
        task = Task(upid, node, task_type, task_id, user, pid, pstart, now)
        for plan in self._plans:
            if plan.task_type in (None, task_type):
                self._plans.remove(plan)
                task.fail = plan.message if plan.kind == "fail" else None
                task.hang = plan.kind == "hang"
                task.warnings = plan.message.split("\n") if plan.kind == "warn" else []
                break
        self.tasks[upid] = task
        thread = threading.Thread(target=self._run, args=(task, work), name=f"pve-task-{pid}", daemon=True)
        self._threads.append(thread)
        thread.start()
        return upid

    def _run(self, task: Task, work: Callable[[Task], None]) -> None:
        task.cancel.wait(self.task_seconds)
        if task.hang:
            task.cancel.wait()
        try:
            with self.lock:
                work(task)
            task.log += [f"WARN: {w}" for w in task.warnings]
            task.exitstatus = f"WARNINGS: {len(task.warnings)}" if task.warnings else "OK"
            task.log.append(f"TASK {task.exitstatus}")
        except Exception as exc:  # any failure ends the task the way a dying worker does
            # fork_worker: chomp, then every newline becomes a space (RESTEnvironment.pm 655-658)
            task.exitstatus = str(exc).removesuffix("\n").replace("\n", " ") or type(exc).__name__
            task.log.append(f"TASK ERROR: {task.exitstatus}")
        task.endtime = int(time.time())
        task.status = "stopped"

    def stop_task(self, upid: str) -> None:
        task = self.tasks[upid]
        task.cancel.set()

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stop hung tasks and wait for every worker thread."""
        for task in self.tasks.values():
            task.cancel.set()
        for thread in self._threads:
            thread.join(timeout)
