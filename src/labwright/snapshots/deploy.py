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
step goes on; true: the step fails there). Hosts that are not containers (``@local``, SSH hosts) yield nothing.
For ``@pct/NODE/VMID`` the node's API settings (``proxmox_api_url``, ``proxmox_ca_file``, ...) come from the host's
data.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from pyinfra import host as current_host
from pyinfra.api import FunctionCommand, operation
from pyinfra.api.exceptions import OperationError

from labwright.errors import LabwrightError
from labwright.hostnames import parse_host_name
from labwright.snapshots.model import DEFAULT_KEEP, MAX_KEEP

logger = logging.getLogger("pyinfra")


def _flag(value: Any, default: bool) -> bool:
    if value is None:
        return default
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def _take(host_name: str, step: str, keep: int, required: bool, node_data: dict[str, Any]) -> None:
    from labwright import snapshots

    try:
        name = snapshots.before(host_name, step, keep=keep, required=required, node_data=node_data)
    except LabwrightError as exc:
        raise OperationError(f"snapshot before {step}: {exc}") from exc
    if name is None:
        logger.warning(f"{host_name}: no snapshot before {step}: its storage cannot snapshot (set "
                       "snapshot_required: true to stop here instead)")
    else:
        logger.info(f"{host_name}: snapshot {name} taken before {step} (restore: labwright guest restore "
                    f"{host_name} {name} --force)")


def snapshot_command(host: Any, step: str) -> Iterator[FunctionCommand]:
    """Yield the command that snapshots ``host`` before ``step`` (nothing for a host that is not a container or
    has ``snapshot_before: false``)."""
    data = host.data.dict() if hasattr(host.data, "dict") else dict(host.data)
    if not _flag(data.get("snapshot_before"), True) or parse_host_name(host.name) is None:
        return
    try:
        raw = data.get("snapshot_keep")
        keep = DEFAULT_KEEP if raw is None or raw == "" else int(raw)
    except (TypeError, ValueError):
        raise OperationError(f"snapshot_keep {data.get('snapshot_keep')!r}: a whole number of snapshots to keep, "
                             "e.g. snapshot_keep=3") from None
    if not 1 <= keep <= MAX_KEEP:
        raise OperationError(f"snapshot_keep {keep}: keep 1 to {MAX_KEEP} snapshots, e.g. snapshot_keep=3")
    node_data = {k: v for k, v in data.items() if k.startswith("proxmox_") or k == "ssh_hostname"}
    yield FunctionCommand(_take, (host.name, step, keep, _flag(data.get("snapshot_required"), False), node_data), {})


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
    yield from snapshot_command(current_host, step)
