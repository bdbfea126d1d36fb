"""pyinfra connectors: @lxd/@incus (LXD REST API) and @pct (Proxmox pct over SSH)."""
