"""Peak memory of a server on this machine: its process found by the port it listens on, its RSS sampled in a thread.

Only for loopback URLs: ``/proc/net/tcp{,6}`` gives the listening socket's inode, ``/proc/PID/fd`` the process that
holds it. A server in a container or on another host is not visible here, and the benchmark says so (null).
"""

from __future__ import annotations

import ipaddress
import os
import threading
from pathlib import Path

LISTEN = "0A"


def is_local(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def listening_inodes(port: int, proc: Path = Path("/proc")) -> set[str]:
    inodes: set[str] = set()
    for table in ("net/tcp", "net/tcp6"):
        try:
            lines = (proc / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    return inodes


def listening_pid(port: int, proc: Path = Path("/proc")) -> int | None:
    """The process listening on TCP ``port`` in this network namespace, or None (not found, or not ours to see)."""
    inodes = {f"socket:[{inode}]" for inode in listening_inodes(port, proc)}
    if not inodes:
        return None
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            for fd in (entry / "fd").iterdir():
                if os.readlink(fd) in inodes:
                    return int(entry.name)
        except OSError:
            continue
    return None


def rss_bytes(pid: int, proc: Path = Path("/proc")) -> int | None:
    try:
        for line in (proc / str(pid) / "status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


class RssSampler:
    """Samples a process's RSS every ``interval`` seconds while in a ``with`` block; ``peak`` is the highest seen."""

    def __init__(self, pid: int, interval: float = 0.02):
        self.pid = pid
        self.interval = interval
        self.peak: int | None = None
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"rss-{pid}", daemon=True)

    def _sample(self) -> None:
        value = rss_bytes(self.pid)
        if value is not None:
            self.samples += 1
            self.peak = value if self.peak is None else max(self.peak, value)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval)

    def __enter__(self) -> RssSampler:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()
