"""BIOS backup: flashrom reads the chip twice, compares, copies the image off and verifies it.

See deploys/bios_backup.py (the pyinfra CLI shim, with usage) and docs/bios.md.
"""

from __future__ import annotations

from pyinfra import host
from pyinfra.api.exceptions import DeployError
from pyinfra.operations import server

from labwright import aptlock
from labwright.bios.flashrom import check_programmer
from labwright.errors import LabwrightError
from labwright.facts.bios import FlashromPath
from labwright.guestlock import locked
from labwright.operations import bios


@locked("BIOS backup")
def deploy_bios_backup() -> None:
    """BIOS backup: flashrom reads the chip twice, compares, copies the image off and verifies it."""
    programmer = str(host.data.get("bios_programmer") or "internal")
    try:
        check_programmer(programmer)
    except LabwrightError as exc:
        raise DeployError(f"bios_programmer: {exc}") from None

    if host.get_fact(FlashromPath) is None:
        # labwright.aptlock: waits for another apt (unattended-upgrades) instead of failing on its lock
        server.shell(name="Install flashrom", commands=[aptlock.update(), aptlock.install(["flashrom"])])

    bios.backup(name="BIOS backup: read the chip twice, compare, copy off, verify",
                programmer=programmer,
                out=str(host.data.get("bios_out") or "backups/bios"))
