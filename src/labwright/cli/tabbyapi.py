"""`labwright tabbyapi`: tabbyAPI configuration and the n-gram drafting patch."""

import typer

NAME = "tabbyapi"
HELP = "tabbyAPI configuration and the n-gram drafting patch."

app = typer.Typer(no_args_is_help=True, help=HELP)
