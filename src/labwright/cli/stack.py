"""`labwright stack`: Install, switch and roll back named engine stacks in a guest."""

import typer

NAME = "stack"
HELP = "Install, switch and roll back named engine stacks in a guest."

app = typer.Typer(no_args_is_help=True, help=HELP)
