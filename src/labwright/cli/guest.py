"""`labwright guest`: declarative LXC guests on Proxmox VE and LXD/Incus, with NVIDIA passthrough.

The commands only parse arguments and print; the work is in labwright.guests (one backend per endpoint).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from labwright.cli import guest_snapshots, vocab
from labwright.errors import BadInput
from labwright.guests.base import BackendPool
from labwright.guests.model import Change, GuestSpec, load_guests, select_guests
from labwright.ui import stdout, table

NAME = "guest"
HELP = "Declarative LXC guests on Proxmox VE and LXD/Incus with NVIDIA passthrough."

app = typer.Typer(no_args_is_help=True, help=HELP)

InventoryArgument = vocab.inventory_option("pyinfra inventory whose hosts carry `guest` data.")
OldInventory = vocab.InventoryPositional
GuestOption = typer.Option(None, "--guest", "-g", help="Only this guest (repeat for several); default: all.")
JsonOption = typer.Option(False, "--json", help="Print JSON instead of text.")


def _guests(inventory: Path, names: list[str] | None) -> list[GuestSpec]:
    inventory = vocab.inventory(inventory, None)
    specs = select_guests(load_guests(inventory), names, str(inventory))
    if not specs:
        raise BadInput(f"inventory {inventory}: no host has `guest` data, so there is nothing to do; declare one "
                       "(a host with guest={\"backend\": \"lxd\", ...}, docs/guests.md) or pass the inventory that "
                       "has them")
    return specs


def _label(spec: GuestSpec) -> str:
    """``guest NAME (lxd local)``, ``(incus local)`` for an ``@incus/`` host (the same backend, Incus's daemon),
    ``(proxmox pve1/101)``."""
    where = f"{spec.node}/{spec.vmid}" if spec.backend == "proxmox" else (spec.node or "local")
    daemon = "incus" if spec.backend == "lxd" and spec.host.startswith("@incus/") else spec.backend
    return f"guest {spec.name} ({daemon} {'VM ' if spec.is_vm else ''}{where})"


def _print_changes(changes: list[Change], indent: str = "  ") -> None:
    for change in changes:
        stdout.print(indent + change.describe(), markup=False)


@app.command(cls=vocab.HiddenArgumentsCommand)
def plan(
    inventory: Path = InventoryArgument,
    old_inventory: Path | None = OldInventory,
    guest: list[str] | None = GuestOption,
    as_json: bool = JsonOption,
) -> None:
    """Print what `apply` would change (and for Proxmox the exact config lines); touch nothing (= `apply --dry`).

    Example: labwright guest plan -i inventories/lab.py --guest llm1
    """
    _plan(vocab.inventory(inventory, old_inventory), guest, as_json)


def _plan(inventory: Path, guest: list[str] | None, as_json: bool) -> None:
    results = []
    with BackendPool() as pool:
        for spec in _guests(inventory, guest):
            result = pool.get(spec).plan(spec)
            results.append(result)
            if as_json:
                continue
            stdout.print(f"{_label(spec)}: {'no change' if result.action == 'none' else result.action}", markup=False)
            _print_changes(result.changes)
            if result.config_lines:
                conf = f"qemu-server/{spec.vmid}.conf" if spec.is_vm else f"lxc/{spec.vmid}.conf"
                stdout.print(f"  config lines for /etc/pve/{conf}:", markup=False)
                for line in result.config_lines:
                    stdout.print(f"    {line}", markup=False)
            for note in result.notes:
                stdout.print(f"  note: {note}", markup=False)
            for warning in result.warnings:
                stdout.print(f"  warning: {warning}", markup=False)
    if as_json:
        typer.echo(json.dumps([r.to_dict() for r in results], indent=2, default=str))


def _run_each(inventory: Path, names: list[str] | None, as_json: bool, verb: str,
              action: Callable[[Any, GuestSpec], list[Change]]) -> None:
    """Run ``action`` on every selected guest; print what changed and a count."""
    report: list[dict[str, Any]] = []
    changed = 0
    with BackendPool() as pool:
        specs = _guests(inventory, names)
        for spec in specs:
            changes = action(pool.get(spec), spec)
            changed += bool(changes)
            report.append({"guest": spec.name, "backend": spec.backend, "changes": [c.to_dict() for c in changes]})
            if not as_json:
                stdout.print(f"{_label(spec)}: {f'{verb}' if changes else 'unchanged'}", markup=False)
                _print_changes(changes)
    if as_json:
        typer.echo(json.dumps(report, indent=2, default=str))
    elif specs:
        stdout.print(f"{changed} guest(s) {verb}, {len(specs) - changed} unchanged")


def _each_guest_command(name: str, done: str, action: Callable[[Any, GuestSpec], list[Change]],
                        dry_run: Callable[[Path, list[str] | None, bool], object], help_text: str) -> None:
    """Register ``guest NAME`` (the inventory, --guest, --dry, --json): ``action`` on each guest, printing what changed
    and how many were ``done`` (:func:`_run_each`); with --dry ``dry_run(inventory, guests, as_json)`` instead."""

    def command(
        inventory: Path = InventoryArgument,
        old_inventory: Path | None = OldInventory,
        guest: list[str] | None = GuestOption,
        dry: bool = vocab.DryOption,
        as_json: bool = JsonOption,
    ) -> None:
        inventory = vocab.inventory(inventory, old_inventory)
        if dry:
            dry_run(inventory, guest, as_json)
            return
        _run_each(inventory, guest, as_json, done, action)

    app.command(name, cls=vocab.HiddenArgumentsCommand, help=help_text)(command)


_each_guest_command("apply", "changed", lambda backend, spec: backend.apply(spec), _plan, """\
Make each guest match the inventory and print exactly what changed; a second run changes nothing.

--dry prints what it would change (the same as `guest plan`).

Example: labwright guest apply -i inventories/lab.py""")


@app.command(cls=vocab.HiddenArgumentsCommand)
def show(
    inventory: Path = InventoryArgument,
    old_inventory: Path | None = OldInventory,
    guest: list[str] | None = GuestOption,
    as_json: bool = JsonOption,
) -> None:
    """Show each guest as the host has it: state, addresses, and drift from the inventory."""
    inventory = vocab.inventory(inventory, old_inventory)
    with BackendPool() as pool:
        infos = [pool.get(spec).show(spec) for spec in _guests(inventory, guest)]
    if as_json:
        typer.echo(json.dumps(infos, indent=2, default=str))
        return
    rows = []
    for info in infos:
        in_sync = info.get("in_sync")
        sync = "-" if not info.get("exists") else ("?" if in_sync is None else ("yes" if in_sync else "no"))
        backend = str(info["backend"]) + (f" ({info['server']} {info['server_version']})" if info.get("server") else "")
        rows.append([str(info["name"]), backend, str(info.get("node") or ""), str(info["status"]),
                     ", ".join(info.get("addresses") or []), sync])
    stdout.print(table(f"guests in {inventory}", ["guest", "backend", "node", "status", "addresses", "in sync"],
                       rows))
    for info in infos:
        for line in info.get("drift") or []:
            stdout.print(f"{info['name']}: {line}", markup=False)
        if info.get("problem"):
            stdout.print(f"{info['name']}: {info['problem']}", markup=False)
        for warning in info.get("warnings") or []:
            stdout.print(f"{info['name']}: warning: {warning}", markup=False)


_each_guest_command("start", "started", lambda backend, spec: backend.start(spec),
                    lambda inventory, names, as_json: _would(inventory, names, as_json, "start"),
                    "Start the guests (GPU guests get the host's /dev/nvidia-uvm created first); --dry names them "
                    "only.")
_each_guest_command("stop", "stopped", lambda backend, spec: backend.stop(spec),
                    lambda inventory, names, as_json: _would(inventory, names, as_json, "stop"),
                    "Stop the guests; --dry names them only.")


def _would(inventory: Path, names: list[str] | None, as_json: bool, verb: str) -> list[GuestSpec]:
    """--dry (and destroy without --yes): the guests the command would act on, changing nothing. For destroy only
    the ones that exist."""
    with BackendPool() as pool:
        specs = _guests(inventory, names)
        if verb == "destroy":
            specs = [spec for spec in specs if pool.get(spec).exists(spec)]
    if as_json:
        typer.echo(json.dumps([{"guest": spec.name, "backend": spec.backend, "dry": True, "would": verb,
                                "changes": []} for spec in specs], indent=2))
    else:
        for spec in specs:
            stdout.print(f"would {verb} {_label(spec)}", markup=False)
    return specs


@app.command(cls=vocab.HiddenArgumentsCommand)
def destroy(
    inventory: Path = InventoryArgument,
    old_inventory: Path | None = OldInventory,
    guest: list[str] | None = GuestOption,
    yes: bool = typer.Option(False, "--yes", "-y", help="Destroy them (without: say what would go, change nothing)."),
    dry: bool = typer.Option(False, "--dry", help="Say what would go; change nothing (the default without --yes)."),
    as_json: bool = JsonOption,
) -> None:
    """Delete the guests labwright made and their disks; a dry run unless --yes. Instances it did not make are
    refused.

    Example: labwright guest destroy -i inventories/lab.py --guest llm1 --yes
    """
    vocab.dry_or_yes(dry, yes)
    inventory = vocab.inventory(inventory, old_inventory)
    if not yes:
        present = _would(inventory, guest, as_json, "destroy")
        if not as_json:
            stdout.print("no guest to destroy" if not present else
                         f"dry run: nothing destroyed; run again with --yes to destroy these {len(present)} guest(s) "
                         "and their disks")
        return
    _run_each(inventory, guest, as_json, "destroyed", lambda backend, spec: backend.destroy(spec))


guest_snapshots.register(app)  # guest snapshot / snapshots / restore (labwright.snapshots)
