"""`labwright tabbyapi`: tabbyAPI configuration and the n-gram drafting patch."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from labwright.tabbyapi.ngram import DEFAULT_MATCH_MIN, check_match_min, plan_ngram, read_tree, write_change

NAME = "tabbyapi"
HELP = "tabbyAPI configuration and the n-gram drafting patch."

app = typer.Typer(no_args_is_help=True, help=HELP)


@app.command()
def ngram(
    source: Path = typer.Option(..., "--source", help="tabbyAPI checkout (the directory holding main.py)."),
    config: Path = typer.Option(None, "--config", help="config.yml to edit [SOURCE/config.yml]."),
    match_min: int = typer.Option(DEFAULT_MATCH_MIN, "--min", help="ngram_match_min: tokens that must match."),
    dry: bool = typer.Option(False, "--dry", help="Print what would change; write nothing."),
    as_json: bool = typer.Option(False, "--json", help='Print {"mode", "file", "diff"} as JSON.'),
) -> None:
    """Turn on exllamav3 n-gram drafting: config keys where tabbyAPI has them, else the one-line source patch.

    Exit 0: config/patch/already; 1: refused (a draft model is set) or unrecognised source; 2: bad input
    (a config.yml that cannot be read or edited as written included).

    Example: labwright tabbyapi ngram --source /opt/tabbyapi --min 3 --dry
    """
    change = plan_ngram(read_tree(source, config), check_match_min(match_min))
    if not dry:
        write_change(change)
    if as_json:
        typer.echo(json.dumps(change.as_json()))
    elif change.ok:
        typer.echo(change.diff, nl=False)
        verb = "would change" if dry and change.new_text is not None else "changed" if change.new_text else "unchanged"
        typer.echo(f"{change.mode}: {change.message} ({verb})", err=True)
    # The JSON was printed first so scripts see the mode; the one-line reason still goes to stderr.
    change.raise_for_mode()
