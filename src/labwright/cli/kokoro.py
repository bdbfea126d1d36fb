"""`labwright kokoro`: Kokoro-FastAPI TTS: the sentence-streaming patch."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from labwright.kokoro.streaming import plan_streaming, read_tree, write_change

NAME = "kokoro"
HELP = "Kokoro-FastAPI TTS: the sentence-streaming patch."

app = typer.Typer(no_args_is_help=True, help=HELP)


@app.command()
def patch(
    source: Path = typer.Option(..., "--source", help="Kokoro-FastAPI checkout (the directory holding api/)."),
    dry: bool = typer.Option(False, "--dry", help="Print what would change; write nothing."),
    as_json: bool = typer.Option(False, "--json", help='Print {"mode", "era", "files", "diff", "message"} as JSON.'),
) -> None:
    """Stream per sentence: split on sentence ends instead of newlines, and yield to the event loop after each chunk.

    Exit 0: patch/already; 1: unrecognised source (nothing written, the file and anchor are named); 2: bad input.

    Example: labwright kokoro patch --source /opt/kokoro --dry
    """
    change = plan_streaming(read_tree(source))
    if change.files and not dry:
        write_change(change)
    if as_json:
        typer.echo(json.dumps(change.as_json()))
    elif change.ok:
        typer.echo(change.diff, nl=False)
        verb = "would change" if dry and change.files else "changed" if change.files else "unchanged"
        era = f" [{change.era}]" if change.era else ""
        typer.echo(f"{change.mode}: {change.message}{era} ({verb})", err=True)
    change.raise_for_mode()
