"""`labwright bios`: flashrom BIOS backups."""

import typer

NAME = "bios"
HELP = "flashrom BIOS backups."

app = typer.Typer(no_args_is_help=True, help=HELP)
