"""The embedded default inventory: the local LXD lab on this machine.

`labwright lab up` builds the containers of the `lab` group; pyinfra deploys into them through the
@lxd connector (no SSH needed), e.g.

    labwright lab up
    pyinfra -y inventories/local.py deploys/base.py
    labwright verify base --hosts=@lxd/lw-node1

LABWRIGHT_LAB_BACKEND=incus (or lxd) picks the daemon, e.g. `LABWRIGHT_LAB_BACKEND=incus scripts/bootstrap`; the
host is then @incus/lw-node1 and the bridge lwibr0 10.99.64.1/24 (its own, so an LXD lab on lwbr0 can stay beside
it). Unset: lab_backend 'auto' (docs/lab.md: LXD where installed, else Incus).
"""

import os

from labwright.lab.keys import lab_key_path

# An unknown value goes through as lab_backend and is refused there in one line.
_backend = os.environ.get("LABWRIGHT_LAB_BACKEND", "").strip() or "auto"
_incus = _backend == "incus"

lab = (
    [
        ("@incus/lw-node1" if _incus else "@lxd/lw-node1", {}),
    ],
    {
        # The lab: an isolated bridge with an explicit subnet (never `lxd init --auto`).
        "lab_name": "local",
        "lab_backend": _backend,
        "lab_subnet": "10.99.64.1/24" if _incus else "10.99.0.1/24",
        "lab_bridge": "lwibr0" if _incus else "lwbr0",
        "lab_pool": "labwright",
        "lab_profile": "labwright",
        "lab_cpu": "2",
        "lab_memory": "2GiB",
        # deploys/base.py
        "admin_user": "labadmin",
        "admin_ssh_public_key_file": str(lab_key_path().with_suffix(".pub")),
        "timezone": "Etc/UTC",
        "locale": "en_US.UTF-8",
        "unattended_upgrades": True,  # security updates on (the default); False turns them off on purpose
    },
)
