"""`labwright matrix`: Wheel compatibility matrix: resolve and check engine stacks (torch, CUDA, flash-attn ...)."""

import typer

NAME = "matrix"
HELP = "Wheel compatibility matrix: resolve and check engine stacks (torch, CUDA, flash-attn ...)."

app = typer.Typer(no_args_is_help=True, help=HELP)
