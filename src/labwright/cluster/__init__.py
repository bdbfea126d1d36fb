"""Proxmox/corosync cluster runbooks as code: doctor, stale-config rejoin, ghost-node cleanup."""
