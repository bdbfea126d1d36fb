"""The snapshot a pyinfra operation takes before its risky change, as one command it yields.

.. code:: python

    from labwright.snapshots.deploy import snapshot_command

    @operation(is_idempotent=False)
    def switch(...):
        ...                                   # facts read; nothing to do -> host.noop(...); return
        yield from snapshot_command(host, "stack-switch")
        yield ...                             # the change

A deploy whose change is a chain of operations (package installs, desktop changes) calls the ``snapshot``
operation first, inside the branch that has decided to change something:

.. code:: python

    from labwright.snapshots.deploy import snapshot

    if missing:
        snapshot(name="Snapshot before the desktop packages", step="desktop")
        apt.packages(...)

The command runs when pyinfra executes (in order, after the facts said a change is due), never while it prepares
and never under ``--dry``. Host data: ``snapshot_before`` (default true; false turns it off), ``snapshot_keep``
(default 3), ``snapshot_required`` (default false: a guest whose storage cannot snapshot gets a warning and the
step goes on, and a running guest on a ``dir`` pool, where a snapshot is a full copy with the guest frozen, gets
none and a line saying why; true: storage that cannot snapshot fails the step before it changes anything, and the
``dir`` copy is taken with its size and expected downtime said first). See labwright.snapshots.before.
Hosts that are not containers (``@local``, SSH hosts) yield nothing.
For ``@pct/NODE/VMID`` the node's API settings (``proxmox_api_url``, ``proxmox_ca_file``, ...) come from the host's
data.

A Proxmox VM (``kind: vm``) is deployed to over SSH, under a host name of its own; the snapshot goes to the VM through
the API all the same when the host's data names it (:func:`snapshot_guest`): ``proxmox_vm: "NODE/VMID"``, or the
host's ``guest`` declaration with ``kind: "vm"``, ``node`` and ``vmid`` (what ``labwright guest apply`` made it
from). The node's API settings then come from the inventory host named like the node, else from the host's own
``proxmox_*`` data (never its ``ssh_hostname``: that is the VM's address).

One snapshot per host per run: the first risky step of a pyinfra run takes it, and later risky steps of the same run
(a package install, then a stack switch, then a tabbyAPI ref change) find it taken and say so, so restoring it undoes
the whole run and one run never prunes the snapshots of earlier runs by itself. A deploy that snapshots checks the
``snapshot_*`` data while pyinfra prepares (:func:`check_snapshot_data`): a bad value or an unknown ``snapshot_*`` key
is one line naming it (with the nearest key), before anything runs.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Iterator, Mapping
from typing import Any

from pyinfra import host as current_host
from pyinfra.api import FunctionCommand, StringCommand, operation
from pyinfra.api.exceptions import DeployError, OperationError

from labwright.deploy_data import FALSE, TRUE, unknown_key_error
from labwright.errors import BadInput, LabwrightError
from labwright.hostnames import PctName, parse_host_name, parse_pct_target
from labwright.snapshots.model import DEFAULT_KEEP, MAX_KEEP

logger = logging.getLogger("pyinfra")


SNAPSHOT_KEYS = ("before", "keep", "required")
VM_KEY = "proxmox_vm"
# The snapshot each host got in a pyinfra run (its State): later risky steps of the same run reuse it.
_TAKEN: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()


def _flag(key: str, value: Any, default: bool) -> bool:
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in TRUE or text in FALSE:
        return text in TRUE
    raise BadInput(f"snapshot_{key}: {value!r} is not true or false, e.g. snapshot_{key}=false")


def snapshot_settings(data: Mapping[str, Any]) -> tuple[bool, int, bool]:
    """``(before, keep, required)`` from host data; an unknown ``snapshot_*`` key or a bad value is one BadInput line
    naming the key (the nearest known key for a typo)."""
    error = unknown_key_error(data, "snapshot", SNAPSHOT_KEYS, "docs/snapshots.md")
    if error is not None:
        raise error
    before = _flag("before", data.get("snapshot_before"), True)
    raw = data.get("snapshot_keep")
    try:
        if isinstance(raw, bool):
            raise ValueError
        keep = DEFAULT_KEEP if raw is None or raw == "" else int(str(raw).strip())
    except ValueError:
        raise BadInput(f"snapshot_keep: {raw!r} is not a whole number of snapshots to keep, e.g. snapshot_keep=3"
                       ) from None
    if not 1 <= keep <= MAX_KEEP:
        raise BadInput(f"snapshot_keep: {keep}: keep 1 to {MAX_KEEP} snapshots, e.g. snapshot_keep=3")
    return before, keep, _flag("required", data.get("snapshot_required"), False)


def _data(host: Any) -> Mapping[str, Any]:
    return host.data.dict() if hasattr(host.data, "dict") else dict(host.data)


def _vm_name(host_name: str, data: Mapping[str, Any]) -> PctName | None:
    """The Proxmox VM a host that is not a container deploys into: ``proxmox_vm: "NODE/VMID"``, else a ``guest``
    declaration with ``kind: "vm"`` (its ``node`` and ``vmid``); None when the data names none."""
    raw = data.get(VM_KEY)
    if raw is not None and raw != "":
        text = str(raw).strip().removeprefix("@pct/")
        try:
            return parse_pct_target(text)
        except BadInput:
            raise BadInput(f"host {host_name}: {VM_KEY}: {raw!r} is not NODE/VMID, the node and id of the VM "
                           f"this host is, e.g. {VM_KEY}=pve1/120") from None
    guest = data.get("guest")
    if not isinstance(guest, Mapping) or str(guest.get("kind", "")).lower() != "vm":
        return None
    node, vmid = guest.get("node"), guest.get("vmid")
    if node in (None, "") or vmid in (None, ""):
        missing = " and ".join(k for k, v in (("node", node), ("vmid", vmid)) if v in (None, ""))
        raise BadInput(f"host {host_name}: its guest is a VM (kind: vm) without {missing}, so labwright cannot "
                       f"snapshot it before a risky step; give guest {missing}, or {VM_KEY}: NODE/VMID, or set "
                       "snapshot_before: false")
    try:
        return parse_pct_target(f"{node}/{vmid}")
    except BadInput as exc:
        raise BadInput(f"host {host_name}: guest node/vmid: {exc}") from None


def snapshot_guest(host: Any) -> tuple[str, dict[str, Any]] | None:
    """``(guest name, node data)`` of what a risky step on ``host`` snapshots: the host itself when it is a
    container (``@lxd/...``, ``@pct/NODE/VMID``), the Proxmox VM its data names (``proxmox_vm`` or a ``kind: vm``
    guest) as ``@pct/NODE/VMID``, else None (``@local``, an SSH host that is no VM of a node)."""
    data = _data(host)
    if parse_host_name(host.name) is not None:
        return host.name, {k: v for k, v in data.items() if k.startswith("proxmox_") or k == "ssh_hostname"}
    vm = _vm_name(host.name, data)
    if vm is None:
        return None
    node_data = {k: v for k, v in data.items() if k.startswith("proxmox_") and k != VM_KEY}
    inventory = getattr(host, "inventory", None)
    node_host = inventory.get_host(vm.node, None) if inventory is not None else None
    if node_host is not None:
        node_data = {k: v for k, v in _data(node_host).items()
                     if (k.startswith("proxmox_") and k != VM_KEY) or k == "ssh_hostname"}
    return vm.host, node_data


def check_snapshot_data(host: Any = None) -> None:
    """For a deploy, while pyinfra prepares: refuse bad ``snapshot_*`` data (and a bad ``proxmox_vm``) as a
    DeployError (one line, nothing run)."""
    host = host or current_host
    try:
        before, _, _ = snapshot_settings(_data(host))
        if before:
            snapshot_guest(host)
    except BadInput as exc:
        raise DeployError(f"{exc} (nothing was changed)") from None


def _take(state: Any, host: Any, host_name: str, step: str, keep: int, required: bool,
          node_data: dict[str, Any], only_if: str | None = None, instead: str = "") -> None:
    from labwright import snapshots

    if only_if is not None and host is not None:
        due, _ = host.run_shell_command(StringCommand(only_if))
        if not due:
            logger.info(f"{host_name}: no snapshot before {step}: nothing changes")
            return
    taken = _TAKEN.setdefault(state, {}) if state is not None else {}
    if host_name in taken:
        earlier = taken[host_name]
        logger.info(f"{host_name}: no new snapshot before {step}: "
                    + (f"{earlier.name} was taken earlier in this run" if earlier.name else
                       f"none was taken earlier in this run ({earlier.skipped})"))
        return
    try:
        result = snapshots.before(host_name, step, keep=keep, required=required, node_data=node_data,
                                  instead=instead, say=logger.warning)
    except LabwrightError as exc:
        raise OperationError(f"snapshot before {step}: {exc}") from exc
    taken[host_name] = result
    for note in result.notes:
        logger.warning(note)
    if result.name is None:
        logger.warning(f"{host_name}: no snapshot before {step}: {result.skipped}")
    else:
        logger.info(f"{host_name}: snapshot {result.name} taken before {step} in {result.seconds:.1f} s (restore: "
                    f"labwright guest restore {host_name} {result.name} --force)")


def _refuse_unsupported(state: Any, host: Any, guest: str, node_data: dict[str, Any]) -> None:
    from labwright import snapshots

    try:
        with snapshots._Opened(guest, node_data, {}) as backend:
            if backend.exists():
                snapshots._require_support(backend)
    except LabwrightError as exc:
        raise OperationError(f"snapshot_required: {exc}") from exc


def required_check_command(host: Any) -> Iterator[FunctionCommand]:
    """For a step whose snapshot comes after work of its own (the stack switch builds the new stack first): with
    ``snapshot_required: true``, a command that refuses storage that cannot snapshot (naming the pool or Proxmox
    storage and its driver) before that work starts. Nothing otherwise."""
    data = _data(host)
    try:
        before, _, required = snapshot_settings(data)
        target = snapshot_guest(host) if before and required else None
    except BadInput as exc:
        raise OperationError(str(exc)) from None
    if target is not None:
        yield FunctionCommand(_refuse_unsupported, target, {})


def snapshot_command(host: Any, step: str, only_if: str | None = None,
                     instead: str = "") -> Iterator[FunctionCommand]:
    """Yield the command that snapshots ``host`` before ``step`` (nothing for a host that is neither a container nor
    a Proxmox VM its data names (:func:`snapshot_guest`), or has ``snapshot_before: false``). ``only_if``: a shell
    command run on the host when the snapshot is due; it is taken only when that exits 0 (an operation whose
    earlier command found out whether the change is real). ``instead``: what the step has in place of a snapshot
    where one would freeze the running guest for a full copy (labwright.snapshots.before)."""
    data = _data(host)
    try:
        before, keep, required = snapshot_settings(data)
    except BadInput as exc:
        raise OperationError(str(exc)) from None
    if not before:
        return
    try:
        target = snapshot_guest(host)
    except BadInput as exc:
        raise OperationError(str(exc)) from None
    if target is None:
        return
    guest, node_data = target
    kwargs: dict[str, Any] = {} if only_if is None else {"only_if": only_if}
    if instead:
        kwargs["instead"] = instead
    yield FunctionCommand(_take, (guest, step, keep, required, node_data), kwargs)


@operation(is_idempotent=False)
def snapshot(step: str):
    """
    Snapshot this host (a container) before ``step``; keep labwright's last ``snapshot_keep``.

    + step: what comes next, in the snapshot's name (``labwright-<step>-<UTC time>``)

    Nothing for a host that is not a container or has ``snapshot_before: false``; see the module's docstring.

    **Example:**

    .. code:: python

        snapshot(name="Snapshot before the desktop packages", step="desktop")
    """
    commands = list(snapshot_command(current_host, step))
    if not commands:
        current_host.noop(f"no snapshot before {step}: snapshot_before is false, or the host is neither a container "
                          "nor a Proxmox VM its data names")
    yield from commands


@operation(is_idempotent=False)
def shell(step: str, commands: list[str]):
    """
    Snapshot this host before ``step`` (as ``snapshot``), then run ``commands``: one operation, so a deploy's
    change count and order stay as they were without the snapshot.

    + step: what the commands do, in the snapshot's name
    + commands: shell commands, run in order after the snapshot

    **Example:**

    .. code:: python

        shell(name="Install git", step="packages", commands=["apt-get install -y git"])
    """
    yield from snapshot_command(current_host, step)
    yield from commands
