"""`labwright desktop`: check an xrdp + MATE + Firefox guest made by deploys/desktop.py.

The checks (labwright.desktop.checks) run through the LXD API's exec (:class:`labwright.hosts.lxd.LxdHost`), so
the guest needs no SSH; each failure names field note 003's cause and fix.
"""

from __future__ import annotations

import json

import typer

from labwright.desktop.checks import Check, read_record, run_checks
from labwright.desktop.recipe import DOWNGRADE_KEYS
from labwright.errors import BadInput, LxdError
from labwright.hostnames import BadHostName, LxdName, lxd_guest
from labwright.hosts.lxd import LxdHost
from labwright.lxd.client import LxdClient
from labwright.lxd.remotes import resolve_endpoint
from labwright.schema.checks import USER_NAME
from labwright.ui import stdout, table

NAME = "desktop"
HELP = ("Desktop guests (xrdp + MATE + Firefox): check one against the troubleshooting table of field note 003 "
        "(docs/field-notes.md).")

app = typer.Typer(no_args_is_help=True, help=HELP)


def check_arguments(user: str | None, port: int | None) -> None:
    """Refuse what no desktop guest can have, before the daemon is asked anything."""
    if port is not None and not 1 <= port <= 65535:
        raise BadInput(f"--port {port}: not a TCP port; give 1-65535 (xrdp listens on 3389)")
    if user is not None and not USER_NAME.match(user):  # schema.checks: the one user-name pattern
        raise BadInput(f"--user {user!r}: not a Linux user name; use lower-case letters, digits, _ and -, "
                       "starting with a letter or _ (at most 32)")


def _host(guest: str) -> tuple[LxdHost, LxdName]:
    try:
        parsed = lxd_guest(guest)
    except BadHostName as exc:
        raise BadInput(f"{exc} (see `{'incus' if guest.startswith('@incus/') else 'lxc'} list`)") from None
    endpoint, project = resolve_endpoint(parsed.remote, flavour=parsed.flavour)
    # The daemon failing mid-check raises (LxdError: one line naming the guest), not a row of failed checks.
    return LxdHost(parsed.instance, LxdClient(endpoint, project=project), raise_errors=True), parsed


def _lxd_config_check(instance: dict, daemon: str = "LXD", tool: str = "lxc") -> Check:
    config = instance.get("expanded_config") or {}
    loose = sorted(k for k in config if (k in DOWNGRADE_KEYS or k.startswith("raw."))
                   and not (k == "security.privileged" and config[k] == "false"))
    return Check(f"{daemon} config: unprivileged, confined", not loose,
                 f"overrides: {', '.join(f'{k}={config[k]}' for k in loose)}" if loose else "no privilege or raw "
                 "AppArmor/seccomp/LXC override", "the instance is privileged or its confinement was loosened",
                 f"{tool} config unset {instance.get('name', 'GUEST')} KEY for each of them, then restart the guest")


@app.command()
def check(
    guest: str = typer.Argument(..., metavar="GUEST",
                               help="LXD/Incus instance (NAME, REMOTE:NAME or @incus/NAME)."),
    user: str | None = typer.Option(None, "--user", help="Desktop user (default: what the deploy recorded)."),
    port: int | None = typer.Option(None, "--port", help="xrdp port (default: recorded, else 3389)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Check a desktop guest: listeners, TLS, Xorg backend, MATE session, caja, launcher, Firefox origin, no
    Chrome, unprivileged. Exit 1 when a check fails; each failure names the cause and the fix.

    Example: labwright desktop check desk1
    """
    check_arguments(user, port)
    host, parsed = _host(guest)
    name = host.name
    try:
        instance = host.client.instance_or_none(name)
        if instance is None:
            raise BadInput(f"guest {guest}: no such {parsed.daemon} instance (see `{parsed.tool} list`)")
        if instance.get("status") != "Running":
            raise BadInput(f"guest {guest} is {instance.get('status')}; start it first (`{parsed.tool} start "
                           f"{name}`)")
        want = read_record(host, {"user": user, "port": port})
        results = [_lxd_config_check(instance, parsed.daemon, parsed.tool), *run_checks(host, want)]
    except LxdError as exc:
        raise LxdError(f"guest {guest}: {exc}") from exc
    finally:
        host.close()
    failed = [r for r in results if not r.ok]
    if as_json:
        typer.echo(json.dumps({"guest": guest, "user": want.user, "ok": not failed,
                               "checks": [r.to_dict() for r in results]}, indent=2))
    else:
        rows = [["ok" if r.ok else "[red]FAIL[/]", r.name, r.detail if r.ok else
                 f"{r.detail}\n[bold]cause:[/] {r.cause}\n[bold]fix:[/] {r.fix}"] for r in results]
        stdout.print(table(f"desktop guest {guest} (user {want.user})", ["", "check", "detail"], rows))
        stdout.print(f"{len(results) - len(failed)}/{len(results)} checks passed")
    if failed:
        raise typer.Exit(1)
