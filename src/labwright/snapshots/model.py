"""Snapshot names, the keep-last-N rule and the backend seam: pure, no I/O.

A snapshot labwright takes is named ``labwright-<step>-<UTC time>`` (``labwright-stack-switch-20261124T062441Z``);
only those are ever pruned, a user's own snapshots (any other name) never are. One name rule serves both
backends, the stricter of the two: Proxmox's ``pve-snapshot-name`` (format ``pve-configid``,
``^[a-z][a-z0-9_-]+$`` case-insensitive, at most 40 characters; pve-common src/PVE/JSONSchema.pm
``pve-configid`` and the ``pve-snapshot-name`` standard option, as pve-docs 9.1.3's API schema gives it for
``POST /nodes/{node}/lxc/{vmid}/snapshot``), minus ``current`` and ``vzdump``, which PVE reserves (pve-container
6.1.10 src/PVE/API2/LXC/Snapshot.pm 152-156). LXD accepts every such name.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from labwright.errors import BadInput

PREFIX = "labwright-"
#: A snapshot name both backends accept (PVE's pve-configid with maxLength 40).
NAME_RULE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{1,39}$")
RESERVED = ("current", "vzdump")
STAMP = "%Y%m%dT%H%M%SZ"
_STAMP_LEN = len("20261124T062441Z")
#: Room left for the step in a 40-character name: ``labwright-`` + step + ``-`` + stamp.
STEP_MAX = 40 - len(PREFIX) - 1 - _STAMP_LEN
_OURS = re.compile(rf"^{PREFIX}(?P<step>[a-z0-9-]+)-(?P<stamp>[0-9]{{8}}T[0-9]{{6}}Z)$")
DEFAULT_KEEP = 3
#: More kept snapshots than this is a typo (each one holds a copy of what changed since; on LXD's dir pool, the
#: whole guest).
MAX_KEEP = 100


@dataclass(frozen=True)
class Snapshot:
    """One snapshot as the backend lists it. ``created`` is UTC; ``step`` is set for labwright's own."""

    name: str
    created: datetime | None
    step: str | None = None
    description: str = ""
    #: Proxmox lists a snapshot whose creation or deletion did not finish with its ``snapstate`` (``prepare``,
    #: ``delete``); it cannot be rolled back (see labwright.snapshots.proxmox). "" for a complete one.
    incomplete: str = ""

    @property
    def ours(self) -> bool:
        return self.step is not None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["created"] = self.created.isoformat() if self.created else None
        data["labwright"] = self.ours
        return data


def step_slug(step: str) -> str:
    """``step`` as it goes into a name: lower case, runs of other characters as one hyphen, at most STEP_MAX."""
    slug = re.sub(r"[^a-z0-9]+", "-", step.lower()).strip("-")[:STEP_MAX].strip("-")
    if not slug:
        raise BadInput(f"snapshot step {step!r} has no letter or digit; name the step, e.g. stack-switch")
    return slug


def make_name(step: str, when: datetime) -> str:
    return f"{PREFIX}{step_slug(step)}-{when.astimezone(UTC).strftime(STAMP)}"


def free_name(step: str, when: datetime, taken: set[str]) -> str:
    """A labwright name for ``step`` at ``when`` that is not in ``taken``: two snapshots in the same second get
    the next free second (the names keep sorting by time and stay within 40 characters)."""
    for offset in range(3600):
        name = make_name(step, when + timedelta(seconds=offset))
        if name not in taken:
            return name
    raise BadInput(f"snapshot step {step!r}: an hour of names after {when:%H:%M:%S} is taken; prune old snapshots")


def parse_ours(name: str) -> tuple[str, datetime] | None:
    """(step, time) of a name labwright made; None for any other name."""
    match = _OURS.match(name)
    if not match:
        return None
    try:
        when = datetime.strptime(match.group("stamp"), STAMP).replace(tzinfo=UTC)
    except ValueError:
        return None
    return match.group("step"), when


def check_user_name(name: str, guest: str) -> None:
    """Refuse a name given with ``--name`` that a backend would refuse, or that labwright would later prune."""
    if not NAME_RULE.match(name):
        raise BadInput(f"snapshot name {name!r} for {guest}: use 2-40 letters, digits, '-' and '_', starting with a "
                       "letter (the rule Proxmox, LXD and Incus all accept), e.g. --name before-upgrade")
    if name.lower() in RESERVED:
        raise BadInput(f"snapshot name {name!r} for {guest} is reserved by Proxmox; pick another --name")
    if name.startswith(PREFIX):
        raise BadInput(f"snapshot name {name!r} for {guest}: names starting with {PREFIX!r} are labwright's own and "
                       "pruned to the last few; pick another --name, or leave --name out to take one of those")


def sort_key(snapshot: Snapshot) -> tuple[datetime, str]:
    earliest = datetime.min.replace(tzinfo=UTC)
    ours = parse_ours(snapshot.name)
    return (ours[1] if ours else snapshot.created or earliest), snapshot.name


def to_prune(snapshots: list[Snapshot], keep: int) -> list[Snapshot]:
    """labwright's snapshots beyond the newest ``keep``, oldest first; a user's snapshot is never listed."""
    if keep < 1:
        raise BadInput(f"--keep {keep}: keep at least 1 snapshot (the one just taken)")
    ours = sorted((s for s in snapshots if s.ours), key=sort_key)
    return ours[: max(0, len(ours) - keep)]


def latest_ours(snapshots: list[Snapshot]) -> Snapshot | None:
    """labwright's newest snapshot that can be put back (an incomplete one never can)."""
    ours = sorted((s for s in snapshots if s.ours and not s.incomplete), key=sort_key)
    return ours[-1] if ours else None


def snapshot_from(name: str, created: datetime | None, description: str = "", incomplete: str = "") -> Snapshot:
    ours = parse_ours(name)
    return Snapshot(name, created, ours[0] if ours else None, description, incomplete)


@dataclass(frozen=True)
class Support:
    """Whether the guest's storage can take snapshots; ``how`` says how (``copy`` costs a full copy).

    ``freezes_running``: a snapshot of the running guest is a full copy taken with the guest frozen for the whole
    copy (LXD's and Incus's ``dir`` driver), so the service stops answering until it ends. A copy-on-write snapshot
    (btrfs, zfs, LVM, Ceph; every storage Proxmox snapshots on) freezes for an instant at most."""

    supported: bool
    storage: str
    how: str  # e.g. "zfs", "copy (dir pool: every snapshot is a full copy of the root filesystem)"
    reason: str = ""
    freezes_running: bool = False


class SnapshotBackend(ABC):
    """One guest on one endpoint. ``label`` names it in messages (``@lxd/llm1``, ``@pct/pve1/101``)."""

    label: str

    @abstractmethod
    def exists(self) -> bool: ...

    def missing(self) -> str:
        """The one line for a guest that does not exist: where labwright looked and how to check."""
        return f"{self.label}: no such guest; check the name"

    @abstractmethod
    def running(self) -> bool: ...

    @abstractmethod
    def support(self) -> Support: ...

    def copy_size(self) -> int | None:
        """Bytes a full copy of the guest moves (for a storage whose snapshot is a copy); None when unknown."""
        return None

    @abstractmethod
    def list(self) -> list[Snapshot]: ...

    @abstractmethod
    def create(self, name: str, description: str) -> None: ...

    @abstractmethod
    def delete(self, name: str) -> None: ...

    @abstractmethod
    def rollback(self, name: str) -> None:
        """Put the guest back to ``name``; the guest is stopped when this is called."""

    @abstractmethod
    def stop(self) -> None: ...

    @abstractmethod
    def start(self) -> None: ...

    @abstractmethod
    def native_command(self, action: str, name: str) -> str:
        """The host's own command for ``action`` (restore, delete) of snapshot ``name``, for messages."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""
