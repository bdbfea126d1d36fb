"""Guest snapshots before risky steps: take one, keep the last N, put one back.

.. code:: python

    from labwright import snapshots

    name = snapshots.before("@lxd/llm1", "stack-switch")   # labwright-stack-switch-20261124T062441Z
    snapshots.restore("@lxd/llm1", force=True)              # the latest labwright snapshot, guest restarted

Guests are named as pyinfra hosts are: ``@lxd/NAME``, ``@lxd/REMOTE:NAME``, ``@incus/...`` (LXD API) and
``@pct/NODE/VMID`` (Proxmox VE API; the node's host data such as ``proxmox_api_url`` passed as ``node_data``).
labwright prunes only its own snapshots (``labwright-*``), never one a user took under another name.

A snapshot before a risky step (:func:`before`) is taken only where it is cheap: copy-on-write storage (btrfs, zfs,
LVM, Ceph; every storage Proxmox snapshots on), or a stopped guest. On LXD's/Incus's ``dir`` pool a snapshot of a
running guest is a full copy with the guest frozen until it ends (``Support.freezes_running``), so it is skipped with
one line saying why and what stands in for it, unless the step requires it (``snapshot_required: true``): then the
size of the copy and the downtime it is expected to cost are said before it is taken, and the time it took after.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from labwright.atomic import write_text_atomic
from labwright.errors import BadInput, LabwrightError, OperationFailed
from labwright.hostnames import LxdName, PctName, parse_host_name
from labwright.paths import cache_path
from labwright.snapshots.model import (
    DEFAULT_KEEP,
    MAX_KEEP,
    PREFIX,
    Snapshot,
    SnapshotBackend,
    Support,
    check_user_name,
    free_name,
    latest_ours,
    sort_key,
    step_slug,
    to_prune,
)
from labwright.textio import loads_json

__all__ = ["DEFAULT_KEEP", "PREFIX", "Before", "RestoreResult", "Snapshot", "SnapshotBackend", "SnapshotsUnsupported",
           "Support", "TakeResult", "backend_for", "before", "guest_name", "list_snapshots", "restore", "take"]

Guest = str | SnapshotBackend


def guest_name(host: str) -> LxdName | PctName:
    """The container a guest name points at; anything else is refused with the forms that work."""
    parsed = parse_host_name(host)
    if parsed is None:
        raise BadInput(f"guest {host!r}: snapshots need a container name, @lxd/NAME (or @incus/NAME, "
                       "@lxd/REMOTE:NAME) or @pct/NODE/VMID, e.g. @lxd/llm1")
    return parsed


def backend_for(host: str, node_data: Mapping[str, Any] | None = None, **options: Any) -> SnapshotBackend:
    """The snapshot backend of a guest host name. ``options``: ``client`` (an LxdClient) for LXD; ``api``,
    ``credentials``, ``task_timeout``, ``poll_interval`` for Proxmox."""
    parsed = guest_name(host)
    if isinstance(parsed, LxdName):
        from labwright.snapshots.lxd import LxdSnapshots

        return LxdSnapshots(parsed, client=options.get("client"))
    from labwright.snapshots.proxmox import PveSnapshots

    allowed = {k: v for k, v in options.items() if k in ("api", "credentials", "task_timeout", "poll_interval")}
    return PveSnapshots(parsed, node_data, **allowed)


class _Opened:
    """A backend opened from a name is closed after use; one handed in stays the caller's."""

    def __init__(self, guest: Guest, node_data: Mapping[str, Any] | None, options: Mapping[str, Any]):
        self.owned = isinstance(guest, str)
        self.backend = backend_for(guest, node_data, **options) if isinstance(guest, str) else guest

    def __enter__(self) -> SnapshotBackend:
        return self.backend

    def __exit__(self, *exc: object) -> None:
        if self.owned:
            self.backend.close()


@dataclass
class TakeResult:
    guest: str
    name: str
    storage: str
    how: str
    dry: bool
    pruned: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class RestoreResult:
    guest: str
    name: str
    was_running: bool
    restarted: bool
    dry: bool
    seconds: float = 0.0
    steps: list[str] = field(default_factory=list)
    #: ``container`` or ``vm`` (a Proxmox VE qemu guest: no way into it through its node).
    kind: str = "container"
    #: What was passed over on the way, e.g. a newer snapshot that is incomplete.
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class SnapshotsUnsupported(OperationFailed):
    """The guest's storage cannot take snapshots (said before anything was asked of it)."""


def _require_support(backend: SnapshotBackend) -> Support:
    support = backend.support()
    if not support.supported:
        raise SnapshotsUnsupported(f"{backend.label}: snapshots are not possible here: {support.reason}; nothing was "
                              "changed. Move the guest's disks to storage that can snapshot, or run the step without "
                              "a snapshot")
    return support


def take(guest: Guest, step: str = "manual", keep: int = DEFAULT_KEEP, name: str | None = None, dry: bool = False,
         description: str = "", now: datetime | None = None, node_data: Mapping[str, Any] | None = None,
         **options: Any) -> TakeResult:
    """Snapshot ``guest`` before ``step``; return what was done. Without ``name`` the snapshot is labwright's
    (``labwright-<step>-<UTC time>``) and labwright's snapshots beyond the newest ``keep`` are deleted after it;
    with ``name`` it is the user's, never pruned. A name that exists is refused (BadInput), nothing changed."""
    if not 1 <= keep <= MAX_KEEP:
        raise BadInput(f"--keep {keep}: keep 1 to {MAX_KEEP} snapshots (at least the one being taken; default "
                       f"{DEFAULT_KEEP})")
    slug = step_slug(step)
    if name is not None:  # refused before anything is opened or asked
        check_user_name(name, guest_name(guest).host if isinstance(guest, str) else guest.label)
    with _Opened(guest, node_data, options) as backend:
        if not backend.exists():
            raise BadInput(backend.missing())
        existing = backend.list()
        taken = {s.name for s in existing}
        if name is not None and name in taken:
            old = next(s for s in existing if s.name == name)
            when = f" (taken {old.created:%Y-%m-%d %H:%M} UTC)" if old.created else ""
            raise BadInput(f"{backend.label}: snapshot {name!r} exists already{when}; pick another --name, or delete "
                           f"it first with `{backend.native_command('delete', name)}`")
        support = _require_support(backend)
        chosen = name or free_name(slug, now or datetime.now(UTC), taken)
        description = description or f"labwright: before {step}"
        ours = name is None
        planned = [*existing, Snapshot(chosen, now or datetime.now(UTC), slug if ours else None)]
        prune = to_prune(planned, keep) if ours else []
        result = TakeResult(backend.label, chosen, support.storage, support.how, dry, [s.name for s in prune],
                            [s.name for s in sorted(planned, key=sort_key) if s.ours and s not in prune])
        if dry:
            return result
        started = time.monotonic()
        backend.create(chosen, description)
        for old_snapshot in prune:
            try:
                backend.delete(old_snapshot.name)
            except LabwrightError as exc:
                result.warnings.append(f"pruning {old_snapshot.name} failed: {exc} (delete it with "
                                       f"`{backend.native_command('delete', old_snapshot.name)}`)")
                result.pruned.remove(old_snapshot.name)
        result.seconds = time.monotonic() - started
        result.warnings[:0] = list(getattr(backend, "notes", []))
        return result


@dataclass
class Before:
    """What the snapshot before a risky step came to: ``name`` when one was taken, else ``skipped`` (one line:
    why none was, and what stands in for it). ``said_first``: what was said before it was taken (the downtime a
    copy costs); ``notes``: what the backend found on the way (a guest it thawed)."""

    guest: str
    name: str | None = None
    skipped: str = ""
    said_first: str = ""
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


#: Measured copy rates of freezing snapshots, per daemon and pool: the next copy's downtime is foretold from them.
RATES_FILE = "snapshot-copy-rates.json"


def _rates() -> dict[str, float]:
    path = cache_path(RATES_FILE)
    try:
        data = loads_json(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError):
        return {}  # a cache: a broken one is replaced by the next measurement
    if not isinstance(data, dict):
        return {}
    return {str(k): float(v) for k, v in data.items() if isinstance(v, int | float) and 1e3 < v < 1e12}


def _record_rate(key: str, size: int | None, seconds: float) -> None:
    if not size or seconds <= 0.05:
        return
    rates = _rates()
    rates[key] = size / seconds
    try:
        path = cache_path(RATES_FILE)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(rates, indent=1, sort_keys=True) + "\n")
    except OSError:
        pass  # the foretelling only gets less exact


def _gb(size: int) -> str:
    return f"{size / 1e9:.2f} GB" if size >= 1e9 else f"{size / 1e6:.0f} MB"


def copy_notice(label: str, support: Support, size: int | None, rate: float | None) -> str:
    """The line said before a freezing copy is taken: its size and the downtime to expect."""
    what = f"a full copy of {_gb(size)}" if size else "a full copy of its root filesystem"
    if size and rate:
        when = f"about {size / rate:.0f} s (the last copy on this pool ran at {rate / 1e6:.0f} MB/s)"
    else:
        when = "for as long as the copy takes (no copy on this pool measured yet; 27-86 s for a 900 MB stack on the " \
               "2-core lab)"
    return (f"{label}: snapshot on {support.storage} is {what} with the guest frozen: its services stop answering "
            f"{when} (snapshot_required: true)")


def before(host: str, step: str, keep: int = DEFAULT_KEEP, required: bool = True,
           node_data: Mapping[str, Any] | None = None, instead: str = "",
           say: Callable[[str], None] | None = None, **options: Any) -> Before:
    """The one call a risky step makes first: snapshot ``host`` (a guest name) where that is cheap, and prune.

    A host that is not a container (``@local``, an SSH host) gets none: there is nothing to snapshot. Storage that
    cannot snapshot: ``required`` raises SnapshotsUnsupported, else none. A running guest on storage whose snapshot
    freezes it for a full copy (LXD's ``dir``): none unless ``required``, the line saying why and ``instead`` (what
    the step has in place of a snapshot, e.g. the stack switch's previous venv); with ``required`` the copy's size
    and expected downtime go to ``say`` first."""
    if parse_host_name(host) is None:
        return Before(host, skipped="not a container: nothing to snapshot")
    say = say or (lambda line: None)
    instead = " ".join(instead.split())  # the skip is one line whatever the caller's text
    with _Opened(host, node_data, options) as backend:
        if not backend.exists():
            raise BadInput(backend.missing())
        support = backend.support()
        if not support.supported:
            if required:
                _require_support(backend)
            return Before(backend.label, skipped=f"its storage cannot snapshot ({support.reason}); set "
                          "snapshot_required: true to stop here instead")
        if support.freezes_running and backend.running():
            if not required:
                return Before(backend.label, skipped=(
                    f"a snapshot on {support.storage} copies the whole running guest with it frozen until the copy "
                    "ends (its services stop answering); "
                    + (instead or "this step has no other way back") + ". Set snapshot_required: true to take the "
                    "copy anyway, or keep guests on a copy-on-write pool (btrfs, zfs, lvm) where it is instant"))
            size = backend.copy_size()
            key = f"{getattr(getattr(backend, 'client', None), 'endpoint', None)!s}|{support.storage}"
            said = copy_notice(backend.label, support, size, _rates().get(key))
            say(said)
            result = take(backend, step, keep=keep)
            _record_rate(key, size, result.seconds)
        else:
            said = ""
            result = take(backend, step, keep=keep)
        return Before(backend.label, result.name, said_first=said, seconds=result.seconds,
                      notes=list(result.warnings))


def list_snapshots(guest: Guest, node_data: Mapping[str, Any] | None = None, **options: Any) -> list[Snapshot]:
    """The guest's snapshots, oldest first (labwright's by the time in their name)."""
    with _Opened(guest, node_data, options) as backend:
        if not backend.exists():
            raise BadInput(backend.missing())
        return sorted(backend.list(), key=sort_key)


def restore(guest: Guest, name: str | None = None, force: bool = False, dry: bool = False,
            node_data: Mapping[str, Any] | None = None, **options: Any) -> RestoreResult:
    """Put snapshot ``name`` (default: labwright's latest) back. A running guest is refused unless ``force``;
    with ``force`` it is stopped, restored and started again. Refusals change nothing."""
    with _Opened(guest, node_data, options) as backend:
        if not backend.exists():
            raise BadInput(backend.missing())
        snapshots = sorted(backend.list(), key=sort_key)
        if name is None:
            chosen = latest_ours(snapshots)  # an incomplete snapshot never: it cannot be rolled back
            if chosen is None:
                others = ", ".join(s.name for s in snapshots if not s.incomplete)
                raise BadInput(f"{backend.label}: no labwright snapshot to restore"
                               + (f"; name one of its snapshots: {others}" if others else
                                  f"; take one first with `labwright guest snapshot {backend.label}`"))
            name = chosen.name
        elif name not in {s.name for s in snapshots}:
            known = ", ".join(s.name for s in snapshots) or "none"
            raise BadInput(f"{backend.label}: no snapshot {name!r} (snapshots: {known}); list them with "
                           f"`labwright guest snapshots {backend.label}`")
        chosen_snapshot = next(s for s in snapshots if s.name == name)
        if chosen_snapshot.incomplete:  # refused before the guest is stopped: PVE would refuse the rollback
            others = ", ".join(s.name for s in snapshots if not s.incomplete) or "none"
            raise BadInput(f"{backend.label}: snapshot {name} is incomplete (snapstate = {chosen_snapshot.incomplete}:"
                           f" its {'creation' if chosen_snapshot.incomplete == 'prepare' else 'deletion'} did not "
                           f"finish) and cannot be restored; nothing was changed. Restore another ({others}), or "
                           f"remove it with `{backend.native_command('delete', name)} --force`")
        running = backend.running()
        if running and not force:
            raise BadInput(f"{backend.label} is running; restoring {name} discards everything since it was taken: "
                           "stop the guest first, or pass --force to stop it, restore and start it again")
        steps = (["stop"] if running else []) + ["restore"] + (["start"] if running else [])
        kind = "vm" if getattr(backend, "kind", "") == "qemu" else "container"
        result = RestoreResult(backend.label, name, running, running, dry, steps=steps, kind=kind)
        passed = [s for s in snapshots if s.ours and s.incomplete and sort_key(s) > sort_key(chosen_snapshot)]
        result.notes = [f"{backend.label}: passed over {s.name}, newer but incomplete (snapstate = {s.incomplete}); "
                        f"remove it with `{backend.native_command('delete', s.name)} --force`" for s in passed]
        if dry:
            return result
        started = time.monotonic()
        if running:
            backend.stop()
        try:
            backend.rollback(name)
        except LabwrightError as exc:
            state = "stopped by labwright" if running else "stopped"
            raise OperationFailed(f"{backend.label}: restoring {name} failed: {exc}; the guest is {state}; retry "
                                  f"with `{backend.native_command('restore', name)}`"
                                  + (f" then `{backend.native_command('start', name)}`" if running else "")) from exc
        if running:
            try:
                backend.start()
            except LabwrightError as exc:
                raise OperationFailed(f"{backend.label}: restored {name} but starting it again failed: {exc}; the "
                                      f"guest is stopped: start it with `{backend.native_command('start', name)}`"
                                      ) from exc
        result.seconds = time.monotonic() - started
        return result
