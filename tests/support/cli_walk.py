"""Every leaf command of labwright's typer app, as typer built it: the walk the CLI-wide tests share (the bad-input
sweep, the vocabulary rules)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import typer

from labwright.cli import register


def leaf_commands() -> Iterator[tuple[str, Any]]:
    """(``"group command"`` path, the click command) for every visible command that takes no subcommand."""
    def visit(command: Any, path: list[str]) -> Iterator[tuple[str, Any]]:
        subcommands = getattr(command, "commands", None)
        if subcommands:
            for name, sub in subcommands.items():
                if not getattr(sub, "hidden", False):
                    yield from visit(sub, [*path, name])
            return
        yield " ".join(path), command

    yield from visit(typer.main.get_command(register()), [])
