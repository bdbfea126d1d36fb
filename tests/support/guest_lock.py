"""Another labwright run holding a lab guest's run lock (labwright.guestlock), as `stack switch` or `probe` would:
a process that takes the lock through labwright.hosts (or `pct exec` on a node), says so, and holds it until it is
killed or its stdin closes."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from labwright.testing.pyinfra_output import tool_env

HOLDER = """
import sys
from labwright import guestlock
if sys.argv[1].startswith("@pct/"):  # on the node: through pct exec, as host upgrade takes it
    from labwright.hosts.local import LocalHost
    from labwright.hosts.pct import PctHost
    guest = PctHost(LocalHost(), int(sys.argv[1].rsplit("/", 1)[1]), sys.argv[1])
else:
    from labwright.hosts.lxd import LxdHost
    guest = LxdHost(sys.argv[1])
with guestlock.held(guest, "test holder", wait=0):
    print("held", flush=True)
    sys.stdin.read()
"""


@contextmanager
def holding(name: str) -> Iterator[subprocess.Popen[str]]:
    """The holder of ``name``'s lock (an LXD guest, or ``@pct/NODE/VMID`` through the ``pct`` on PATH), started and
    holding when the block runs; killed after it."""
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
