"""Every leaf command of labwright's typer app, as typer built it: the walk the CLI-wide tests share (the bad-input
sweep, the vocabulary rules).

The walk goes through the top-level group the way a command line does (``list_commands``, then ``get_command``, which
imports a group's module when it is resolved: labwright.cli.LazyGroup), so a group that `labwright --help` lists but
that cannot be loaded, or one that is loaded but not listed, is seen here too.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import click
import typer

from labwright.cli import app


def leaf_commands() -> Iterator[tuple[str, Any]]:
    """(``"group command"`` path, the click command) for every visible command that takes no subcommand."""
    def visit(command: Any, path: list[str], parent: click.Context | None) -> Iterator[tuple[str, Any]]:
        if not hasattr(command, "list_commands"):
            yield " ".join(path), command
            return
        ctx = click.Context(command, info_name=path[-1] if path else "labwright", parent=parent)
        names = command.list_commands(ctx)
        assert names, f"group {' '.join(path) or 'labwright'} has no command"
        for name in names:
            sub = command.get_command(ctx, name)
            assert sub is not None, f"{' '.join([*path, name])} is listed but cannot be loaded"
            if not getattr(sub, "hidden", False):
                yield from visit(sub, [*path, name], ctx)

    yield from visit(typer.main.get_command(app), [], None)
