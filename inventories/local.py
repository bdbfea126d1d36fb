"""The embedded default inventory: the local LXD lab on this machine.

`labwright lab up` builds the containers of the `lab` group; pyinfra deploys into them through the
@lxd connector (no SSH needed), e.g.

    labwright lab up
    pyinfra -y inventories/local.py deploys/base.py
    labwright verify base --hosts=@lxd/lw-node1
"""

from labwright.lab.keys import lab_key_path

lab = (
    [
        ("@lxd/lw-node1", {}),
    ],
    {
        # The lab: an isolated bridge with an explicit subnet (never `lxd init --auto`).
        "lab_name": "local",
        "lab_subnet": "10.99.0.1/24",
        "lab_bridge": "lwbr0",
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
