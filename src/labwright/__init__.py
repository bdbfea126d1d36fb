"""labwright: reproducible local-LLM infrastructure for Proxmox VE and LXD/Incus homelabs."""

__version__ = "0.1.0"
