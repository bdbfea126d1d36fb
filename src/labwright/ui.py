"""Terminal output shared by the CLI: a step reporter with spinners, and tables."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.table import Table

console = Console(stderr=True, highlight=False)
stdout = Console(highlight=False)


class Reporter:
    """Prints one line per step; steps show a spinner while they run (long steps stay visible)."""

    def __init__(self, quiet: bool = False, out: Console | None = None):
        self.quiet = quiet
        self.out = out or console
        self.changed: list[str] = []

    @contextmanager
    def step(self, message: str) -> Iterator[None]:
        started = time.monotonic()
        if self.quiet:
            yield
            return
        if self.out.is_terminal:
            with self.out.status(message):
                yield
        else:
            # Not a terminal (CI logs): say the step has started so a long one is visibly in progress.
            self.out.print(f"… {message}")
            yield
        self.out.print(f"[green]✓[/] {message} [dim]({time.monotonic() - started:.1f}s)[/]")

    def info(self, message: str) -> None:
        if not self.quiet:
            self.out.print(message)

    def change(self, message: str) -> None:
        self.changed.append(message)
        if not self.quiet:
            self.out.print(f"[yellow]+[/] {message}")

    def unchanged(self, message: str) -> None:
        if not self.quiet:
            self.out.print(f"[dim]= {message}[/]")


def table(title: str, columns: list[str], rows: list[list[str]]) -> Table:
    t = Table(title=title, title_justify="left")
    for col in columns:
        t.add_column(col)
    for row in rows:
        t.add_row(*row)
    return t


def is_interactive() -> bool:
    return sys.stdin.isatty()
