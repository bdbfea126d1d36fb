"""`labwright kv`: KV-cache and context planning from a model's config.json."""

import typer

NAME = "kv"
HELP = "KV-cache and context planning from a model's config.json."

app = typer.Typer(no_args_is_help=True, help=HELP)
