"""Build every guest of an inventory: each host whose data has `guest` becomes that container.

The guests are made through the LXD/Proxmox APIs from this machine, so the deploy runs on @local:

    pyinfra -y @local deploys/guest.py --data guests_inventory=inventories/lab.py
    pyinfra -y @local deploys/guest.py --data guests_inventory=inventories/lab.py --data guests=llm1,desk1
    pyinfra @local deploys/guest.py --data guests_inventory=inventories/lab.py --dry   # the plan only

Host data: guests_inventory (default inventories/local.py, or $LABWRIGHT_GUESTS_INVENTORY), guests (names,
comma-separated or a list; default all). Same result as `labwright guest apply INVENTORY`.
"""

from labwright.deploys.guest import deploy_guest

deploy_guest()
