"""`labwright cluster`: Proxmox/corosync cluster doctor and repair runbooks."""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path

import typer

from labwright.cli import vocab
from labwright.cluster.doctor import HEALTHY, Diagnosis, doctor, host_data, load_cluster, prevent
from labwright.cluster.ghosts import ghosts as run_ghosts
from labwright.cluster.rejoin import rejoin as run_rejoin
from labwright.cluster.runner import NodeRunner
from labwright.errors import BadInput
from labwright.ui import Reporter, stdout, table

NAME = "cluster"
HELP = "Proxmox/corosync cluster doctor and repair runbooks."

app = typer.Typer(no_args_is_help=True, help=HELP)

DEFAULT_INVENTORY = os.environ.get("LABWRIGHT_CLUSTER_INVENTORY") or None
InventoryOption = vocab.inventory_option("pyinfra inventory with a `cluster` (or `pve_nodes`) group "
                                         "[$LABWRIGHT_CLUSTER_INVENTORY, $LABWRIGHT_INVENTORY, inventories/local.py].",
                                         DEFAULT_INVENTORY)
YesOption = typer.Option(False, "--yes", "-y", help="Do it (without: print the plan, change nothing).")
DryOption = typer.Option(False, "--dry", help="Print the plan; change nothing (the default without --yes).")


#: corosync's config_version is a 64-bit unsigned counter (corosync totemconfig.c, totem.config_version).
CONFIG_VERSION_MAX = 2**64 - 1


def check_address(value: str, option: str) -> str:
    """An IP address or DNS host name (labwright.schema.checks.host_problem), or BadInput naming ``option``
    (checked before any node is contacted)."""
    from labwright.schema.checks import host_problem

    text = value.strip()
    if host_problem(text) is not None:
        raise BadInput(f"{option} {value!r}: not an IP address or host name; give the address of a quorate member, "
                       "e.g. 10.140.3.10")
    return text


def _runners(inventory: Path) -> list[NodeRunner]:
    return load_cluster(vocab.inventory(inventory, None))


def _print_diagnosis(diag: Diagnosis) -> None:
    rows = []
    for n in diag.nodes:
        version = "-" if n.config_version is None else str(n.config_version)
        if n.running_version is not None and n.running_version != n.config_version:
            version += f" (running {n.running_version})"
        colour = "green" if n.verdict == HEALTHY else "red"
        seen = "-" if n.members_seen is None else f"{n.members_seen} ({'quorate' if n.quorate else 'NOT quorate'})"
        rows.append([n.name, f"[{colour}]{n.verdict}[/]", n.service, version, "yes" if n.member else "no", seen])
    stdout.print(table(f"cluster {diag.cluster_name or '?'}", ["node", "verdict", "corosync", "config_version",
                                                                 "member", "membership it sees"], rows))
    state = "quorate" if diag.quorate else "[red]NOT quorate[/]"
    stdout.print(f"cluster: {state}; config_version {diag.config_version} (/etc/pve/corosync.conf: "
                 f"{diag.pve_conf_version}); members: {', '.join(diag.members) or 'none'}; "
                 f"votes {diag.total_votes}/{diag.expected_votes}")
    for n in diag.nodes:
        if n.verdict == HEALTHY and not n.reasons:
            continue
        stdout.print(f"\n[bold]{n.name}[/]: {n.verdict}")
        for r in n.reasons:
            stdout.print(f"  - {r}")
        if n.cluster_view and n.verdict != HEALTHY:
            cv = n.cluster_view
            stdout.print(f"  - the members' cmap: config_version {cv['config_version']}, status {cv['status']}, "
                         f"join_count {cv['join_count']}")
        for s in n.signs:
            stdout.print(f"  log: {s}", markup=False)
        if n.suggestion:
            stdout.print(f"  fix: {n.suggestion}", markup=False)


@app.command("doctor", cls=vocab.HiddenArgumentsCommand)
def doctor_cmd(
    inventory: Path = InventoryOption,
    old_inventory: Path | None = vocab.InventoryPositional,
    as_json: bool = typer.Option(False, "--json", help="Print the diagnosis as JSON."),
    prevent_node: str = typer.Option(None, "--prevent", metavar="NODE",
                                     help="Before powering on a long-offline NODE: compare its last known "
                                          "config_version with the cluster's."),
    last_version: int = typer.Option(None, "--last-version", help="NODE's last known config_version [inventory "
                                     "host data corosync_config_version, else its corosync.conf if reachable]."),
) -> None:
    """Per node: corosync state, config_version vs the cluster's, membership, quorum, log signs; a verdict.

    Exit 0: every node healthy (with --prevent: safe to power on); 1: a problem was found.

    Example: labwright cluster doctor -i inventories/cluster.py
    """
    inventory = vocab.inventory(inventory, old_inventory)
    if last_version is not None:
        if prevent_node is None:
            raise BadInput(f"--last-version {last_version} only means something with --prevent NODE; add --prevent "
                           "NODE or drop --last-version")
        if not 0 <= last_version <= CONFIG_VERSION_MAX:
            raise BadInput(f"--last-version {last_version}: not a corosync config_version (0 to 2^64-1); give the "
                           "number from the node's /etc/corosync/corosync.conf")
    runners = _runners(inventory)
    if prevent_node is not None:
        if prevent_node not in [r.name for r in runners]:
            raise BadInput(f"--prevent {prevent_node}: no such node in {inventory} "
                           f"(nodes: {', '.join(r.name for r in runners)})")
        last = last_version if last_version is not None else \
            host_data(inventory, prevent_node).get("corosync_config_version")
        # A known last version: leave the (offline) node alone; else read its corosync.conf if it answers.
        diag = doctor([r for r in runners if r.name != prevent_node] if last is not None else runners)
        if last is None:
            f = diag.facts.get(prevent_node)
            last = f.conf_version if f else None
        if last is None:
            raise BadInput(f"--prevent {prevent_node}: its last config_version is unknown; pass --last-version N "
                           "(from your records or its disk's /etc/corosync/corosync.conf)")
        p = prevent(diag, prevent_node, int(last))
        if as_json:
            typer.echo(json.dumps(asdict(p)))
        else:
            stdout.print(p.advice, markup=False)
        raise typer.Exit(0 if p.safe else 1)
    diag = doctor(runners)
    if as_json:
        typer.echo(json.dumps(diag.as_json()))
    else:
        _print_diagnosis(diag)
    raise typer.Exit(0 if diag.healthy else 1)


@app.command("rejoin")
def rejoin_cmd(
    node: str = typer.Argument(..., help="The stale node (its inventory/corosync name)."),
    lead: str = typer.Option(..., "--lead", help="Address of a quorate member for `pvecm add`."),
    inventory: Path = InventoryOption,
    yes: bool = YesOption,
    dry: bool = DryOption,
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Rejoin a node whose corosync config is stale (dry run unless --yes).

    Stops corosync on NODE, runs `pvecm add LEAD --use_ssh --force` from /tmp, waits for quorum and verifies
    membership and config_version. Refuses unless the doctor says stale config and the cluster is quorate.

    Example: labwright cluster rejoin pve7 --lead 10.140.3.10 -i inventories/cluster.py --yes
    """
    vocab.dry_or_yes(dry, yes)
    lead = check_address(lead, "--lead")
    result = run_rejoin(_runners(inventory), node, lead, yes, Reporter(quiet=as_json))
    if as_json:
        typer.echo(json.dumps(result.as_json()))
        return
    if result.dry_run and result.steps:
        stdout.print("plan (dry run):")
        for i, s in enumerate(result.steps, 1):
            stdout.print(f"  {i}. {s}", markup=False)
    elif result.steps:
        stdout.print("done:")
        for s in result.steps:
            stdout.print(f"  - {s}", markup=False)
    stdout.print(result.message, markup=False)


@app.command("ghosts", cls=vocab.HiddenArgumentsCommand)
def ghosts_cmd(
    inventory: Path = InventoryOption,
    old_inventory: Path | None = vocab.InventoryPositional,
    remove: str = typer.Option(None, "--remove", metavar="NAME", help="Remove this ghost node's directory."),
    yes: bool = typer.Option(False, "--yes", "-y", help="With --remove: do it (without: show what would go)."),
    dry: bool = typer.Option(False, "--dry", help="With --remove: show what would go (the default without --yes)."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """List ghost nodes and the guest configs and disks left in them; --remove NAME --yes removes one.

    A ghost is a /etc/pve/nodes directory with no corosync membership and no nodelist entry. Removal tries
    `pvecm delnode` first and removes the directory only when pvecm says the node is unknown.

    Example: labwright cluster ghosts -i inventories/cluster.py --remove pve9 --yes
    """
    vocab.dry_or_yes(dry, yes)
    inventory = vocab.inventory(inventory, old_inventory)
    rep = run_ghosts(_runners(inventory), remove, yes, Reporter(quiet=as_json))
    if as_json:
        typer.echo(json.dumps(rep.as_json()))
        return
    rows = []
    for g in rep.ghosts:
        guests = ", ".join(f"{x.kind}/{x.vmid}" + (f" ({x.name})" if x.name else "") for x in g.guests) or "none"
        disks = ", ".join(d.volume for x in g.guests for d in x.disks) or "-"
        rows.append([g.name, guests, disks])
    stdout.print(table(f"ghost nodes (checked on {rep.checked_on}; node dirs: {', '.join(rep.node_dirs)})",
                       ["ghost", "guest configs", "disks"], rows))
    for g in rep.ghosts:
        if g.lost_disks:
            stdout.print(f"{g.name}: {', '.join(g.lost_disks)} lived on {g.name}'s local storage: if {g.name} is "
                         "gone these disks are unrecoverable", markup=False)
    stdout.print(rep.message, markup=False)
