"""`labwright ARGS` run in this process through the CLI's entry point: its exit code and what it printed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from labwright.cli import main


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


def runner(capsys: pytest.CaptureFixture[str]) -> Callable[..., Result]:
    """A ``labwright(*args) -> Result`` for a test's ``capsys``."""
    def run(*args: str) -> Result:
        capsys.readouterr()
        code = main(list(args))
        out, err = capsys.readouterr()
        return Result(code, out, err)

    return run
