"""The `labwright guest snapshot|snapshots|restore` CLI as a subprocess, and the shape of its refusals.

The commands are registered on `guest` by ``labwright.cli.guest_snapshots.register`` (a second call adds nothing),
so this runs them whether or not cli/guest.py has been wired to call it.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping

CLI = ("import sys; from labwright.cli import guest, guest_snapshots, main; "
       "guest_snapshots.register(guest.app); sys.exit(main(sys.argv[1:]))")


def run_cli(env: Mapping[str, str], *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", CLI, *args], capture_output=True, text=True, env=dict(env),
                          timeout=timeout)


def assert_one_line_refusal(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    """Exit 2, one `labwright: error:` line on stderr holding every needle, no traceback."""
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("labwright: error: "), result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
