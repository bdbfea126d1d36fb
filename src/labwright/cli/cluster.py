"""`labwright cluster`: Proxmox/corosync cluster doctor and repair runbooks."""

import typer

NAME = "cluster"
HELP = "Proxmox/corosync cluster doctor and repair runbooks."

app = typer.Typer(no_args_is_help=True, help=HELP)
