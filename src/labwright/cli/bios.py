"""`labwright bios`: flashrom BIOS backups (read twice, compare, copy off, verify) and a guarded restore.

The commands parse arguments and print; the work is in labwright.bios.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.markup import escape

from labwright.bios import backup as backup_module
from labwright.bios import flashrom
from labwright.bios.ifd import Descriptor
from labwright.bios.target import Target
from labwright.cli import vocab
from labwright.hosts.host_data import parse_host_data
from labwright.ui import Reporter, stdout, table

NAME = "bios"
HELP = "flashrom BIOS backups."

app = typer.Typer(no_args_is_help=True, help=HELP)

HostArgument = typer.Argument(..., metavar="HOST", help="pyinfra target: @local, @lxd/NAME, @incus/NAME or an SSH "
                                                         "hostname.")
ProgrammerOption = typer.Option("internal", "--programmer", "-p",
                                help="flashrom programmer, e.g. internal, ch341a_spi or "
                                     "dummy:emulate=W25Q128FV,image=/root/chip.bin")


PlatformOption = typer.Option(None, "--platform", help="The board's platform as ifdtool -p names it (adl, tgl, "
                                                         "mtl, sklkbl, wbg, ...), for a flash descriptor that "
                                                         "cannot say its version (IFD v2 chipsets).")
DataOption = typer.Option(None, "--data", help="Host data for the connector, KEY=VALUE (repeat), e.g. ssh_user=root "
                                               "or ssh_port=2222, as pyinfra's --data.")


def _say(text: str) -> None:
    stdout.print(text, markup=False, emoji=False, soft_wrap=True)


def _regions(descriptor: Descriptor, warnings: list[str]) -> None:
    by_region: dict[str, tuple[list[str], list[str]]] = {}
    for master in descriptor.masters:
        for name in master.read:
            by_region.setdefault(name, ([], []))[0].append(master.name)
        for name in master.write:
            by_region.setdefault(name, ([], []))[1].append(master.name)
    rows = []
    for region in descriptor.regions:
        read, write = by_region.get(region.name, ([], []))
        rows.append([f"{region.index} {region.name}", region.span(), f"{region.size // 1024} KiB" if region.used else
                     "-", ", ".join(read) or "-", ", ".join(write) or "-"])
    how = f"platform {descriptor.platform}" if descriptor.platform else "told from the descriptor"
    stdout.print(table(f"Intel Flash Descriptor (IFD v{descriptor.revision}, {how})",
                       ["region", "range", "size", "read by", "written by"], rows))
    if descriptor.gbe_mac:
        _say(f"GbE MAC address: {descriptor.gbe_mac}")
    for warning in warnings:
        stdout.print(f"[yellow]warning:[/] {escape(warning)}", emoji=False, soft_wrap=True)


@app.command()
def backup(
    host: str = HostArgument,
    programmer: str = ProgrammerOption,
    out: Path = typer.Option(Path("backups/bios"), "--out", "-o", help="Directory on this machine for the image "
                                                                        "and its manifest."),
    as_json: bool = typer.Option(False, "--json", help="Print the manifest as JSON (schema labwright.bios-backup/1)."),
    data: list[str] | None = DataOption,
    platform: str | None = PlatformOption,
) -> None:
    """Read the whole chip twice, compare sha256, copy the image and a manifest off the host, verify the copy.

    Exit 0 written (or already backed up), 1 a failed step (reads differ, no flashrom, no /dev/mem), 2 bad input.

    Example: labwright bios backup @lxd/node1 --programmer internal --out backups/bios
    """
    # Every input is checked before the host is contacted: a bad one costs no connection and writes nothing.
    flashrom.check_programmer(programmer)
    backup_module.check_out_dir(out)
    host_data = parse_host_data(host, data)
    with Target.connect(host, host_data) as target:
        result = backup_module.backup(target, programmer, out, Reporter(), platform)
    if as_json:
        typer.echo(json.dumps({"image": str(result.image), "manifest_file": str(result.manifest_file),
                               "new": result.new, "manifest": result.manifest}, indent=2))
        return
    m = result.manifest
    chip = m["chip"]
    _say(f"chip {chip['vendor']} {chip['name']} ({chip['size']} bytes, {chip['bus']}), flashrom "
                 f"{m['flashrom_version']}")
    _say(f"sha256 {m['sha256']} (two reads agree; the copy here matches the host's)")
    if result.descriptor:
        _regions(result.descriptor, m.get("warnings", []))
    else:
        for warning in m.get("warnings", []):
            stdout.print(f"[yellow]warning:[/] {escape(warning)}", emoji=False, soft_wrap=True)
    for note in result.notes:
        _say(note)
    if result.new:
        _say(f"backup written: {result.image} and {result.manifest_file}")


@app.command()
def restore(
    host: str = HostArgument,
    image: Path = typer.Argument(..., metavar="IMAGE", help="A whole-chip image (from `labwright bios backup`)."),
    programmer: str = ProgrammerOption,
    yes: bool = typer.Option(False, "--yes", "-y", help="Really write the chip; without it only the plan is printed."),
    dry: bool = typer.Option(False, "--dry", help="Print the plan; write nothing (the default without --yes)."),
    as_json: bool = typer.Option(False, "--json", help="Print the plan and the outcome as JSON."),
    data: list[str] | None = DataOption,
    platform: str | None = PlatformOption,
) -> None:
    """Write IMAGE to the host's flash chip with flashrom's verify, after checking the image's descriptor and size.

    Without --yes nothing is written (dry run). Refuses an image without an Intel Flash Descriptor, one whose size is
    not the chip's, or one that no longer matches its manifest's sha256.

    Example: labwright bios restore @lxd/node1 backups/bios/lxd-node1-W25Q128.V-0123456789ab.bin --yes
    """
    vocab.dry_or_yes(dry, yes)
    flashrom.check_programmer(programmer)
    backup_module.check_restore_image(image, platform)  # a bad image is refused before any host is contacted
    host_data = parse_host_data(host, data)
    with Target.connect(host, host_data) as target:
        plan, outcome = backup_module.restore(target, image, programmer, yes, Reporter(), platform)
    if as_json:
        typer.echo(json.dumps({"image": str(plan.image), "sha256": plan.sha256, "size": plan.size,
                               "chip_size": plan.chip_size, "chip_sha256": plan.chip_sha256, "chip_mac": plan.chip_mac,
                               "descriptor": plan.descriptor.to_json(), "warnings": plan.warnings(),
                               "outcome": outcome}, indent=2))
        return
    _say(f"image {plan.image}: {plan.size} bytes, sha256 {plan.sha256}")
    _say(f"chip on {host}: {plan.chip_size} bytes, currently sha256 {plan.chip_sha256}")
    _regions(plan.descriptor, plan.warnings())
    if plan.chip_mac:
        _say(f"the chip's GbE MAC now: {plan.chip_mac}")
    if outcome == "unchanged":
        _say("unchanged: the chip already holds this image; nothing written")
    elif outcome == "dry run":
        _say("dry run: nothing written; run again with --yes to erase, write and verify the chip")
    else:
        _say(f"written and verified ({outcome})")
