"""`labwright guest`: Declarative LXC guests on Proxmox VE and LXD/Incus with NVIDIA passthrough."""

import typer

NAME = "guest"
HELP = "Declarative LXC guests on Proxmox VE and LXD/Incus with NVIDIA passthrough."

app = typer.Typer(no_args_is_help=True, help=HELP)
