"""BIOS backup: flashrom reads the chip twice, compares, copies the image off and verifies it.

See deploys/bios_backup.py (the pyinfra CLI shim, with usage) and docs/bios.md.
"""

from __future__ import annotations

from pathlib import Path

from pyinfra import host
from pyinfra.api.exceptions import DeployError
from pyinfra.operations import server

from labwright import aptlock
from labwright.bios.flashrom import check_programmer
from labwright.deploy_data import refuse_unknown_keys
from labwright.errors import LabwrightError
from labwright.facts.bios import FlashromPath
from labwright.guestlock import locked
from labwright.operations import bios
from labwright.schema.checks import managed_dir
from labwright.shell import path_problem


@locked("BIOS backup")
def deploy_bios_backup() -> None:
    """BIOS backup: flashrom reads the chip twice, compares, copies the image off and verifies it."""
    # every bios_* key known (a typo such as bios_programer fell back to the internal programmer: the real chip)
    refuse_unknown_keys(host.data.dict(), "bios", ("programmer", "out"), "docs/bios.md")
    programmer = str(host.data.get("bios_programmer") or "internal")
    try:
        check_programmer(programmer)
    except LabwrightError as exc:
        raise DeployError(f"bios_programmer: {exc}") from None
    out = host.data.get("bios_out") or "backups/bios"
    try:   # a directory of the controller's that the backups fill: never /etc, / or a kernel filesystem
        problem = path_problem(out, False) if isinstance(out, str) else f"{out!r} is not a path"
        if problem is not None:
            raise ValueError(problem)
        managed_dir(str(Path(out).resolve()))
    except ValueError as exc:
        raise DeployError(f"bios_out: {exc}; give a directory of its own, e.g. backups/bios or /srv/backups/bios") \
            from None

    if host.get_fact(FlashromPath) is None:
        # labwright.aptlock: waits for another apt (unattended-upgrades) instead of failing on its lock
        server.shell(name="Install flashrom", commands=[aptlock.update(), aptlock.install(["flashrom"])])

    bios.backup(name="BIOS backup: read the chip twice, compare, copy off, verify",
                programmer=programmer,
                out=out)
