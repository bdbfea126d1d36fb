"""Build every guest of an inventory: each host whose data has `guest` becomes that container.

The guests are made through the LXD/Proxmox APIs from this machine, so the deploy runs on @local:

    pyinfra -y @local deploys/guest.py --data guests_inventory=inventories/lab.py
    pyinfra -y @local deploys/guest.py --data guests_inventory=inventories/lab.py --data guests=llm1,desk1
    pyinfra @local deploys/guest.py --data guests_inventory=inventories/lab.py --dry   # the plan only

Host data: guests_inventory (default inventories/local.py, or $LABWRIGHT_GUESTS_INVENTORY), guests (names,
comma-separated or a list; default all). Same result as `labwright guest apply INVENTORY`.
"""

from __future__ import annotations

import os

from pyinfra import host
from pyinfra.api.exceptions import DeployError

from labwright.guests.model import load_guests, select_guests
from labwright.operations import guests

if host.name != "@local":
    raise DeployError(f"deploys/guest.py drives the LXD/Proxmox APIs from here: run it on @local, not {host.name}")

inventory = str(host.data.get("guests_inventory") or os.environ.get("LABWRIGHT_GUESTS_INVENTORY")
                or "inventories/local.py")
wanted = host.data.get("guests")
names = [n.strip() for n in wanted.split(",") if n.strip()] if isinstance(wanted, str) else wanted

for spec in select_guests(load_guests(inventory), names, inventory):
    guests.container(name=f"Guest {spec.name} ({spec.backend})", guest=spec)
