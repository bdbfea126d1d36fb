"""`labwright host upgrade`: a GPU host driver/kernel upgrade every GPU guest survives (docs/host-upgrade.md)."""
