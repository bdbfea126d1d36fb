"""Read pyinfra's results table, so tests can assert "changed N" / "a second run changes nothing"."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Totals:
    operations: int
    success: int
    error: int
    no_change: int

    @property
    def changed(self) -> int:
        """Operations that changed something (pyinfra counts a no-op under No Change, not Success)."""
        return self.success


def _num(cell: str) -> int:
    return 0 if cell == "-" else int(cell)


def pyinfra_totals(output: str) -> Totals:
    """Parse the ``Grand total`` row (Hosts, Success, Error, No Change) of a pyinfra run."""
    match = re.search(r"Grand total\s+(\d+|-)\s+(\d+|-)\s+(\d+|-)\s+(\d+|-)", output)
    if not match:
        raise AssertionError(f"no pyinfra results table in output:\n{output[-2000:]}")
    return Totals(*(_num(g) for g in match.groups()))
