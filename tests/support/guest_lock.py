"""Another labwright run holding a lab guest's run lock (labwright.guestlock), as `stack switch` or `probe` would:
a process that takes the lock through labwright.hosts, says so, and holds it until it is killed or its stdin
closes."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from labwright.testing.pyinfra_output import tool_env

HOLDER = """
import sys
from labwright import guestlock
from labwright.hosts.lxd import LxdHost
with guestlock.held(LxdHost(sys.argv[1]), "test holder", wait=0):
    print("held", flush=True)
    sys.stdin.read()
"""


@contextmanager
def holding(name: str) -> Iterator[subprocess.Popen[str]]:
    """The holder of ``name``'s lock, started and holding when the block runs; killed after it."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, name], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=tool_env())
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "held", proc.stderr.read() if proc.stderr else ""
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
