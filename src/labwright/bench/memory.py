"""Peak memory of a server on this machine: its process found by the port it listens on, its RSS sampled in a thread,
and the GPUs' memory in use from ``nvidia-smi`` when this machine has one.

Only for loopback URLs: ``/proc/net/tcp{,6}`` gives the listening socket's inode, ``/proc/PID/fd`` the process that
holds it. A server in a container or on another host is not visible here, and the benchmark says so (null).
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

from labwright.gpu.nvidia.smi import parse_query, query_command
from labwright.shell import quote
from labwright.textio import ascii_digits

LISTEN = "0A"
MIB = 1024 * 1024


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
        if not ascii_digits(entry.name):
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


class PeakSampler:
    """Calls ``read`` every ``interval`` seconds while in a ``with`` block; ``peak`` is the highest value seen."""

    def __init__(self, read: Callable[[], int | None], interval: float, name: str = "sampler"):
        self.read = read
        self.interval = interval
        self.peak: int | None = None
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _sample(self) -> None:
        value = self.read()
        if value is not None:
            self.samples += 1
            self.peak = value if self.peak is None else max(self.peak, value)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakSampler:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()


class RssSampler(PeakSampler):
    """A process's resident memory (bytes), every 20 ms by default."""

    def __init__(self, pid: int, interval: float = 0.02):
        super().__init__(lambda: rss_bytes(pid), interval, f"rss-{pid}")
        self.pid = pid


def gpu_used_bytes(command: str) -> int | None:
    """Memory in use on all NVIDIA GPUs together (``nvidia-smi --query-gpu=memory.used``, MiB), or None: asked
    through labwright.gpu.nvidia.smi.query_command like every nvidia-smi query (a field this nvidia-smi refuses is
    dropped, so a refused memory.used leaves nothing to sum: None)."""
    try:
        proc = subprocess.run(["/bin/sh", "-c", query_command(("memory.used",), smi=quote(command),
                                                               timeout=None, nounits=True)],
                              capture_output=True, text=True, timeout=10)
        query = parse_query(proc.stdout)
        if proc.returncode != 0 or query.exit != 0 or "memory.used" not in query.fields:
            return None
        used = [row["memory.used"] or "" for row in query.rows]
        if not all(ascii_digits(value) for value in used):  # MiB in use: a whole number, never negative
            return None
        return sum(int(value) for value in used) * MIB
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


class GpuSampler(PeakSampler):
    """GPU memory in use on this machine, as field note 001's "VRAM peak sampled during generation" (all processes: a
    server in a local container with the GPU passed through counts too). ``nvidia-smi`` takes tens of ms per call,
    hence the longer interval."""

    def __init__(self, command: str, interval: float = 0.2):
        super().__init__(lambda: gpu_used_bytes(command), interval, "gpu-memory")

    @staticmethod
    def command() -> str | None:
        return shutil.which("nvidia-smi")
