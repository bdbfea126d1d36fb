"""Guests: build every guest an inventory declares, through the LXD/Proxmox APIs from this machine.

See deploys/guest.py (the pyinfra CLI shim, with usage) and docs/guests.md.
"""

from __future__ import annotations

import os

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.api.exceptions import DeployError

from labwright.deploy_data import refuse_unknown_keys
from labwright.errors import LabwrightError
from labwright.guests.model import load_guests, select_guests
from labwright.operations import guests


@deploy("Guests")
def deploy_guest() -> None:
    """Guests: build every guest an inventory declares, through the LXD/Incus/Proxmox APIs from this machine."""
    if host.name != "@local":
        raise DeployError(f"deploys/guest.py drives the LXD/Incus/Proxmox APIs from here: run it on @local, not "
                          f"{host.name}")

    refuse_unknown_keys(host.data.dict(), "guests", ["inventory"], "deploys/guest.py's docstring (docs/guests.md)")
    inventory = str(host.data.get("guests_inventory") or os.environ.get("LABWRIGHT_GUESTS_INVENTORY")
                    or "inventories/local.py")
    wanted = host.data.get("guests")
    names = [n.strip() for n in wanted.split(",") if n.strip()] if isinstance(wanted, str) else wanted

    try:
        specs = select_guests(load_guests(inventory), names, inventory)
    except LabwrightError as exc:  # a bad inventory or guest name: pyinfra prints a DeployError as one line
        raise DeployError(str(exc)) from None
    for spec in specs:
        guests.container(name=f"Guest {spec.name} ({spec.backend})", guest=spec)
