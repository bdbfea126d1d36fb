"""Base deploy: timezone, locale, unattended upgrades, an admin user with the lab key, sshd hardening.

    pyinfra -y inventories/local.py deploys/base.py
    pyinfra -y @lxd/lw-node1 deploys/base.py --data unattended_upgrades=false
    labwright verify base --hosts=@lxd/lw-node1

Host data (defaults in labwright.base.deploy_data.DEFAULTS, documented in docs/base.md): admin_user,
admin_ssh_public_key_file, timezone, locale, unattended_upgrades, sshd_extra_config.

Every step compares against facts first, so a second run changes nothing and, because apt only
runs when a package is missing, it needs no network and finishes in seconds.
"""

from labwright.deploys.base import deploy_base

deploy_base()
