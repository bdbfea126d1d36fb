"""`labwright lab`: the local LXD or Incus lab that tests and the embedded default deploy into."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from labwright.cli import vocab
from labwright.errors import BadInput
from labwright.lab import lab as lab_ops
from labwright.lab.spec import load_lab_spec
from labwright.ui import Reporter, stdout, table

NAME = "lab"
HELP = "Build, inspect and remove the local LXD or Incus lab declared in an inventory's `lab` group."

app = typer.Typer(no_args_is_help=True, help=HELP)

InventoryOption = vocab.inventory_option("pyinfra inventory whose `lab` group declares the lab.")


@app.command()
def up(
    inventory: Path = InventoryOption,
    dry_run: bool = vocab.DryOption,
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only errors."),
    as_json: bool = vocab.JsonOption,
) -> None:
    """Install/start LXD or Incus if needed, preseed the bridge, build the image once, launch the containers.

    Example: labwright lab up -i inventories/local.py
    """
    spec = load_lab_spec(vocab.inventory(inventory, None))
    changes = lab_ops.up(spec, Reporter(quiet=quiet or as_json), dry_run=dry_run)
    if as_json:
        typer.echo(json.dumps({"lab": spec.name, "dry": dry_run, "changes": changes}, indent=2))
        return
    if not quiet and changes:
        verb = "would change" if dry_run else "changed"
        stdout.print(f"lab {spec.name}: {verb} {len(changes)} thing(s)")


@app.command()
def status(
    inventory: Path = InventoryOption,
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Show the lab's containers: state, address, image, age."""
    spec = load_lab_spec(vocab.inventory(inventory, None))
    _, client = lab_ops.lab_client(spec)
    server = client.server_info()  # GET /1.0: environment.server and server_version
    rows = lab_ops.status(spec, client)
    if as_json:
        typer.echo(json.dumps([{**row.__dict__, "server": server.name, "server_version": server.version}
                               for row in rows], indent=2))
        return
    stdout.print(table(f"lab {spec.name} (bridge {spec.bridge} {spec.subnet}, {server.describe()})",
                       ["container", "state", "address", "image", "age"],
                       [[r.name, r.state, r.address, r.image, r.age] for r in rows]))
    for row in rows:
        if row.note:
            stdout.print(f"{row.name}: {row.note}", markup=False)


@app.command()
def down(
    inventory: Path = InventoryOption,
    dry_run: bool = typer.Option(False, "--dry", help="Say what would be removed; remove nothing."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
    as_json: bool = vocab.JsonOption,
) -> None:
    """Remove what `lab up` made for this lab (containers, profile, pool, bridge, image) and nothing else.

    Asks first unless -y/--yes (with --json: give --dry or --yes, there is no question to answer).
    """
    vocab.dry_or_yes(dry_run, yes)
    if as_json and not (dry_run or yes):
        raise BadInput("lab down --json: give --dry (what would be removed) or --yes (remove it); --json does not ask")
    spec = load_lab_spec(vocab.inventory(inventory, None))
    if as_json:
        removed = lab_ops.down(spec, Reporter(quiet=True), dry_run=dry_run)
        typer.echo(json.dumps({"lab": spec.name, "dry": dry_run, "removed": removed}, indent=2))
        return
    if not dry_run and not yes:
        plan = lab_ops.down(spec, Reporter(quiet=True), dry_run=True)
        if not plan:
            stdout.print(f"lab {spec.name}: nothing to remove")
            return
        for line in plan:
            stdout.print(line)
        typer.confirm(f"remove these from lab {spec.name}?", abort=True)
    lab_ops.down(spec, Reporter(), dry_run=dry_run)
