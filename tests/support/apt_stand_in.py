"""apt-get as apt 2.6 answers while another process holds its lock, for tests of labwright.aptlock's wait and of
support.guest_apt: ``E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process PID (NAME)`` and exit
100 (apt-pkg/contrib/fileutl.cc GetLock's message; checked on apt 2.6.1 in the lab guest). The holder is a real
process of the test's, named by its pid in ``HOLDER_FILE``."""

from __future__ import annotations

import os
from pathlib import Path

STAND_IN = """#!/bin/sh
# apt-get as apt 2.6 answers: a lock message while the process in $HOLDER_FILE lives, else success
echo "$*" >> "$CALLS"
pid=$(cat "$HOLDER_FILE" 2>/dev/null)
if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
  echo "Reading package lists..."
  if [ -n "$OLD_FORMAT" ]; then
    echo "E: Could not get lock /var/lib/dpkg/lock-frontend - open (11: Resource temporarily unavailable)"
  else
    echo "E: Could not get lock $LOCK. It is held by process $pid (unattended-upgr)"
  fi
  echo "E: Unable to acquire the dpkg frontend lock ($LOCK), is another process using it?"
  exit 100
fi
if [ -n "$BROKEN" ]; then echo "E: Unable to locate package nosuch"; exit 100; fi
echo "Setting up $*"
"""


def stand_in(tmp_path: Path, **env: str) -> dict[str, str]:
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    (bindir / "apt-get").write_text(STAND_IN)
    (bindir / "apt-get").chmod(0o755)
    return {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "CALLS": str(tmp_path / "calls"),
            "HOLDER_FILE": str(tmp_path / "holder"), "LOCK": "/var/lib/dpkg/lock-frontend", **env}


def calls(tmp_path: Path) -> list[str]:
    path = tmp_path / "calls"
    return path.read_text().splitlines() if path.exists() else []


def tail_waiting_on(pid: int) -> bool:
    """A ``tail --pid=PID`` is running: lw_apt waits on the holder's exit."""
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and f"--pid={pid}".encode() in (proc / "cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False
