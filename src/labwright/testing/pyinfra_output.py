"""Read pyinfra's results table, so tests can assert "changed N" / "a second run changes nothing"."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path


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


@dataclass
class DeployRun:
    """One ``pyinfra`` run: exit code, everything it printed, and how long it took."""

    rc: int
    output: str
    seconds: float

    @property
    def totals(self) -> Totals:
        return pyinfra_totals(self.output)


def tool_env() -> dict[str, str]:
    """The environment for running this venv's tools (pyinfra, labwright, pytest) as subprocesses."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}", "COLUMNS": "200"}


def run_pyinfra(target: str, deploy_file: str, *data: str, cwd: str | Path, timeout: float = 600) -> DeployRun:
    """``pyinfra -y TARGET DEPLOY_FILE --data key=value ...`` from ``cwd``."""
    cmd = [str(Path(sys.executable).parent / "pyinfra"), "-y", target, deploy_file]
    for item in data:
        cmd += ["--data", item]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=cwd, env=tool_env(), capture_output=True, text=True, timeout=timeout)
    return DeployRun(proc.returncode, proc.stdout + proc.stderr, time.monotonic() - start)


@dataclass
class Deployed:
    """A container a deploy test set up once: its name and address, the verify run before the deploy, the deploy."""

    name: str
    address: str
    before: subprocess.CompletedProcess[str]
    first: DeployRun
