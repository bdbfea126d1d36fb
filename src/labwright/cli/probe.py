"""`labwright probe`: Find the real context ceiling of a running engine."""

import typer

NAME = "probe"
HELP = "Find the real context ceiling of a running engine."

app = typer.Typer(no_args_is_help=True, help=HELP)
