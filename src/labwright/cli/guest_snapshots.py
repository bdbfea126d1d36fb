"""`labwright guest snapshot|snapshots|restore`: guest snapshots (see labwright.snapshots).

``register(app)`` adds the three commands to the ``guest`` group; the commands only parse arguments and print.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from typing import Any

import typer

from labwright import guestlock, snapshots
from labwright.cli import vocab
from labwright.errors import BadInput, OperationFailed
from labwright.hostnames import lxd_guest
from labwright.snapshots.model import DEFAULT_KEEP
from labwright.ui import stdout, table

GuestArgument = typer.Argument(..., metavar="GUEST", help="The guest: NAME or REMOTE:NAME (as lxc names it), "
                                                          "@lxd/NAME, @lxd/REMOTE:NAME, @incus/NAME or @pct/NODE/VMID.")


def host_name(guest: str) -> str:
    """The guest as the snapshot backends take it: the inventory's host name (``lxc``'s NAME is @lxd/NAME)."""
    return guest if guest.startswith("@") else lxd_guest(guest).host
JsonOption = typer.Option(False, "--json", help="Print JSON instead of text.")
DryOption = typer.Option(False, "--dry", help="Say what would be done; change nothing.")
DataOption = typer.Option(None, "--data", help="Host data of the Proxmox node, KEY=VALUE (repeat), e.g. "
                                               "proxmox_api_url=https://pve1.lan:8006 or proxmox_ca_file=PATH.")


def node_data(items: list[str] | None) -> dict[str, Any]:
    """``--data KEY=VALUE`` items as the Proxmox node's host data (labwright.guests.node_data: a key neither the node
    nor its SSH connection reads is refused naming the closest; ``true``/``false`` as booleans, as pyinfra's --data
    does), checked before anything is contacted."""
    if not items:
        return {}
    from labwright.guests.node_data import parse_node_items
    from labwright.hosts.host_data import connector_keys

    return parse_node_items(items, connector_keys("pct"))  # the pct connector's keys (pct_*, ssh_*): the run lock


def _echo_json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2, default=str))


def snapshot(
    guest: str = GuestArgument,
    name: str | None = typer.Option(None, "--name", help="Your own name for it (kept until you delete it); default: "
                                                         "labwright-manual-<UTC time>, pruned to the last --keep."),
    keep: int = typer.Option(DEFAULT_KEEP, "--keep", help="How many labwright snapshots to keep (yours are never "
                                                          "pruned)."),
    dry: bool = DryOption,
    data: list[str] | None = DataOption,
    as_json: bool = JsonOption,
) -> None:
    """Take a snapshot of a guest now.

    Example: labwright guest snapshot @lxd/llm1 --name before-upgrade
    """
    result = snapshots.take(host_name(guest), "manual", keep=keep, name=name, dry=dry, node_data=node_data(data))
    if as_json:
        _echo_json(result.to_dict())
        return
    verb = "would take" if dry else "took"
    timing = "" if dry else f" in {result.seconds:.1f} s"
    stdout.print(f"{result.guest}: {verb} snapshot {result.name}{timing} on {result.storage}, {result.how}",
                 markup=False)
    for old in result.pruned:
        stdout.print(f"  {'would prune' if dry else 'pruned'} {old} (labwright keeps its last {keep})", markup=False)
    for warning in result.warnings:
        stdout.print(f"  warning: {warning}", markup=False)


def snapshots_command(
    guest: str = GuestArgument,
    data: list[str] | None = DataOption,
    as_json: bool = JsonOption,
) -> None:
    """List a guest's snapshots, oldest first; labwright's own are marked.

    Example: labwright guest snapshots @pct/pve1/101
    """
    found = snapshots.list_snapshots(host_name(guest), node_data=node_data(data))
    if as_json:
        _echo_json([s.to_dict() for s in found])
        return
    if not found:
        stdout.print(f"{guest}: no snapshots", markup=False)
        return
    rows = [[s.name, f"{s.created:%Y-%m-%d %H:%M:%S} UTC" if s.created else "?",
             f"labwright ({s.step})" if s.ours else "yours"] for s in found]
    stdout.print(table(f"snapshots of {guest}", ["name", "taken", "by"], rows))


def restore(
    guest: str = GuestArgument,
    snapshot_name: str | None = typer.Argument(None, metavar="SNAPSHOT", help="Which one; default: labwright's "
                                                                                 "latest."),
    force: bool = typer.Option(False, "--force", help="Restore a running guest: stop it, restore, start it again."),
    dry: bool = DryOption,
    yes: bool = typer.Option(False, "--yes", "-y", help="Restore (without: say what would happen, change nothing)."),
    data: list[str] | None = DataOption,
    lock_wait: float = vocab.LockWaitOption,
    no_lock: bool = typer.Option(False, "--no-lock", help="Restore a running guest without taking its run lock "
                                 "(without waiting for another labwright run on it): for a Proxmox container whose "
                                 "node cannot be reached over SSH from here."),
    as_json: bool = JsonOption,
) -> None:
    """Put a guest back to a snapshot (everything since it was taken is lost); a dry run unless --yes. A running
    guest needs --force, and is restored only once no other labwright run holds it (the guest's run lock; a Proxmox
    container's is reached over the node's SSH: --data ssh_hostname=..., or --no-lock).

    Example: labwright guest restore @lxd/llm1 --force -y
    """
    if dry and yes:
        raise BadInput("--dry and --yes contradict each other: --dry changes nothing, --yes acts; give one of them")
    vocab.check_lock_wait(lock_wait)
    host_data = node_data(data)
    ssh_data: dict[str, Any] = {}
    if yes and not no_lock and host_name(guest).startswith("@pct/"):
        from labwright.hosts.host_data import connector_data

        ssh_data = connector_data(host_name(guest), host_data)  # checked before anything is contacted
    plan = snapshots.restore(host_name(guest), snapshot_name, force=force, dry=True, node_data=host_data)
    for note in [] if as_json else plan.notes:
        stdout.print(note, markup=False)
    if not yes:
        if as_json:
            _echo_json(plan.to_dict())
        else:
            stdout.print(f"{plan.guest}: would restore {plan.name} ({', '.join(plan.steps)})", markup=False)
            if not dry:
                stdout.print("dry run: nothing changed; run again with -y/--yes to restore", markup=False)
        return
    with _run_lock(host_name(guest), plan, lock_wait, ssh_data, no_lock):
        result = snapshots.restore(host_name(guest), plan.name, force=force, node_data=host_data)
    if as_json:
        _echo_json(result.to_dict())
        return
    stdout.print(f"{result.guest}: restored {result.name} in {result.seconds:.1f} s"
                 + (" (stopped, restored, started again)" if result.restarted else ""), markup=False)


@contextlib.contextmanager
def _run_lock(guest: str, plan: snapshots.RestoreResult, wait: float, ssh_data: dict[str, Any], no_lock: bool
              ) -> Iterator[None]:
    """A running guest's run lock (labwright.guestlock) while it is restored: a deploy or stack switch in it finishes
    first (or the restore is refused naming it). The restore stops the guest, so the lock (in its /run) goes with it;
    a stopped guest runs nothing to wait for. An LXD guest's is reached through the LXD API; a Proxmox container's
    through the node's SSH and ``pct exec``, as pyinfra's @pct connector reaches it (``--data ssh_hostname=...``), which
    the API-driven restore needs for nothing else (``ssh_data``: the connector's keys of --data, typed). A Proxmox VM
    has no way in through its node: not taken."""
    if not plan.restarted or no_lock or plan.kind == "vm" or not guest.startswith(("@lxd/", "@incus/", "@pct/")):
        yield
        return
    say = lambda line: print(line, file=sys.stderr)  # noqa: E731
    if not guest.startswith("@pct/"):
        from labwright.hosts.lxd import LxdHost

        with guestlock.held(LxdHost(guest), "labwright guest restore", wait=wait, say=say):
            yield
        return
    from labwright.hosts.connector import ConnectorHost

    try:
        host = ConnectorHost.connect(guest, ssh_data)
    except BadInput as exc:
        raise BadInput(f"{guest} is running and its run lock is reached over the node's SSH, which failed "
                       f"({str(exc).removeprefix(f'HOST {guest}: ')}): give the node's SSH with --data "
                       "ssh_hostname=NODE_ADDRESS (and ssh_key=..., as for pyinfra's @pct connector), or pass "
                       "--no-lock to restore without waiting for another labwright run on it") from None
    with host:
        owner = guestlock.owner_record("labwright guest restore")
        try:
            guestlock.acquire(host, guest, owner, wait=wait, say=say)
        except guestlock.GuestBusy:
            raise
        except OperationFailed as exc:
            if "no python3" not in str(exc):
                raise
            # no python3 in the container: no labwright run can hold its lock either
            print(f"labwright: note: {guest}: restored without its run lock ({exc})", file=sys.stderr)
            yield
            return
        try:
            yield
        finally:
            with contextlib.suppress(Exception):
                guestlock.release_remote(host, guest, owner["token"])


def register(app: typer.Typer) -> None:
    """Add ``snapshot``, ``snapshots`` and ``restore`` to ``app`` (the ``guest`` group); a second call adds nothing."""
    names = {c.name for c in app.registered_commands}
    if "snapshot" in names:
        return
    app.command(name="snapshot")(snapshot)
    app.command(name="snapshots")(snapshots_command)
    app.command(name="restore")(restore)
