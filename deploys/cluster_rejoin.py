"""Rejoin a corosync node whose config is stale (the seed's runbook), as a pyinfra deploy on the controller.

    pyinfra -y @local deploys/cluster_rejoin.py --data cluster_inventory=inventories/cluster.py \
        --data node=pve7 --data lead=10.140.3.10
    pyinfra @local deploys/cluster_rejoin.py --dry ...   # the plan only

The nodes are reached the way `labwright cluster` reaches them (the inventory's `cluster` group: SSH, or a
network namespace / LXD container in tests). While pyinfra prepares, the doctor runs (read-only) and the
safety checks apply: the cluster must be quorate, the node stale, the lead a quorate member; else the deploy
stops with one line and nothing has run. A healthy node is a no-op, so a second run changes nothing.
The one operation stops corosync on the node, runs `pvecm add LEAD --use_ssh --force` from /tmp, waits for
quorum and verifies membership and config_version (labwright.cluster.rejoin).
"""

from labwright.deploys.cluster_rejoin import deploy_cluster_rejoin

deploy_cluster_rejoin()
