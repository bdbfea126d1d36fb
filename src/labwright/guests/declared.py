"""A guest declared in a pyinfra host's data, made real when the connector finds it missing.

``pyinfra inventories/lab.py deploys/tabbyapi.py`` on a host ``@lxd/llm1`` or ``@pct/pve1/201`` whose data has a
``guest`` dict: when the container does not exist yet (or is stopped while declared ``start: true``), the connector
creates it through the LXD API or the Proxmox API, exactly as ``labwright guest apply`` would, then connects, and the
deploy runs into it in the same run. This is the shape of pyinfra's own ``@docker`` connector, which starts its
container in ``connect()`` (pyinfra 3.x ``pyinfra/connectors/docker.py``, ``DockerConnector.connect``).

Two differences from ``@docker``, both for a homelab operator's safety:
- ``--dry`` creates nothing: the connection fails with one line saying what a real run would create;
- everything is validated first (``backend.plan``: the node is in the cluster, the template or image exists, the
  vmid is not another guest's); a refusal names the field and changes nothing.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from labwright.errors import BadInput, OperationFailed
from labwright.guests.base import backend_for
from labwright.guests.model import GuestSpec, Plan, spec_from_data
from labwright.hostnames import PctName, parse_host_name

if TYPE_CHECKING:
    from pyinfra.api.host import Host
    from pyinfra.api.inventory import Inventory


def node_of(host_name: str, guest: Mapping[str, Any]) -> str | None:
    """The Proxmox node a guest lives on: its ``node`` field, else the NODE of ``@pct/NODE/VMID``."""
    node = guest.get("node")
    if node:
        return str(node)
    parsed = parse_host_name(host_name)
    return parsed.node if isinstance(parsed, PctName) else None


def spec_for_host(host: Host, inventory: Inventory | None = None) -> GuestSpec | None:
    """The ``guest`` declaration of a pyinfra host as a validated spec (None when it declares none).

    The node's own data (``proxmox_api_url``, ``ssh_hostname``, ``proxmox_ca_file``...) comes from the inventory host
    named like the node, as ``labwright guest plan INVENTORY`` reads it, else from the guest host's own data."""
    data = host.data.dict()
    guest = data.get("guest")
    if not guest:
        return None
    if not isinstance(guest, Mapping):
        raise BadInput(f"host {host.name}: `guest` must be a dict, got {type(guest).__name__}")
    node = node_of(host.name, guest)
    host_data = {key: value for key, value in data.items() if key != "guest"}
    # The node's settings live on the inventory host named like the node; an inventory without node hosts (only
    # guests: a deploy should not run on the nodes themselves) may give them in the guest host's own data.
    node_data: dict[str, Any] = host_data
    if node and inventory is not None:
        node_host = inventory.get_host(node, None)
        if node_host is not None:
            node_data = node_host.data.dict()
    return spec_from_data(host.name, guest, source=f"host {host.name}", host_data=host_data, node_data=node_data)


def pyinfra_dry_run() -> bool:
    """Whether the pyinfra CLI running us was given ``--dry`` (a connector's or a deploy's question alike).

    pyinfra keeps the flag in its click command's parameters and passes it to nothing a connector or a deploy can see
    (pyinfra_cli/cli.py 3.10: ``if dry: ... _exit()`` after the connect stage), and both run in gevent greenlets
    where click's context stack is empty, so the pyinfra CLI's own argv is parsed again by its own click command
    (``--dry`` as a word after ``exec --`` is no dry run). False outside pyinfra's CLI (a deploy called from Python)."""
    main = sys.modules.get("pyinfra_cli.cli")  # imported by the pyinfra command (and `python -m pyinfra`) only
    if main is None:
        return False
    try:
        import click

        context = click.get_current_context(silent=True)
    except ImportError:  # pragma: no cover - pyinfra depends on click
        context = None
    while context is not None:
        if context.params.get("dry"):
            return True
        context = context.parent
    try:
        parsed = main.cli.make_context("pyinfra", list(sys.argv[1:]), resilient_parsing=True)
    except Exception:  # an argument list pyinfra's parser refuses: pyinfra itself would have stopped first
        args = sys.argv[1:]
        return "--dry" in args[: args.index("--")] if "--" in args else "--dry" in args
    return bool(parsed.params.get("dry"))


def describe(plan: Plan) -> str:
    changes = "; ".join(change.describe() for change in plan.changes[:6])
    more = f"; +{len(plan.changes) - 6} more" if len(plan.changes) > 6 else ""
    return f"{changes}{more}"


def ensure_declared(spec: GuestSpec, log: Callable[[str], None], dry: bool = False) -> Plan:
    """Make the declared guest exist (and run, when declared so). Validates everything first; with ``dry`` only
    plans and raises ``BadInput`` naming what a real run would do. Returns the plan that was carried out."""
    backend = backend_for(spec)
    try:
        plan = backend.plan(spec)  # reads only; refuses an unknown node, template or image, a vmid in use
        if not plan.changes:
            return plan
        if dry:
            raise BadInput(f"{spec.where}: the declared guest would be {plan.action}d ({describe(plan)}); --dry "
                           "changes nothing, so there is nothing to deploy into yet: run without --dry")
        started = time.monotonic()
        log(f"{spec.where}: {plan.action} the declared guest ({spec.backend}): {describe(plan)}")
        backend.apply(spec)
        log(f"{spec.where}: guest {plan.action}d in {time.monotonic() - started:.1f}s")
        return plan
    finally:
        backend.close()


def wait_until(check: Callable[[], bool], timeout: float, what: str, interval: float = 0.25) -> None:
    """Poll ``check`` until it is true; past ``timeout`` fail naming ``what`` was waited for."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise OperationFailed(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)
