"""This machine: a command is a subprocess, optionally run through a wrapper argv (``ip netns exec NAME``,
``chroot DIR``...); its files are read directly (through the wrapper: by commands).

``local_path`` is where a path of the host is on this machine, for what reads it here rather than through the Host
(the LXD daemon given a device node's source): the path itself. A test double over a directory tree maps it below
the tree (tests/support/host_tree.py)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from labwright.hosts import (
    CommandFiles,
    FileStat,
    Host,
    Result,
    Source,
    get_with_cat,
    put_with_cat,
    shell_line,
    source_bytes,
)


class LocalHost(CommandFiles):
    def __init__(self, wrapper: Sequence[str] = (), label: str = "this machine"):
        self.wrapper = list(wrapper)
        self.label = label

    def argv(self, command: str | Sequence[str]) -> list[str]:
        return [*self.wrapper, "sh", "-c", shell_line(command)]

    def run(self, command: str | Sequence[str], stdin: bytes | str | None = None,
            timeout: float | None = None) -> Result:
        data = stdin.encode() if isinstance(stdin, str) else stdin
        try:
            proc = subprocess.run(self.argv(command), input=data, capture_output=True, timeout=timeout,
                                  stdin=None if data is not None else subprocess.DEVNULL, check=False)
        except subprocess.TimeoutExpired:
            return Result(124, "", f"timed out after {timeout:.0f}s")
        except FileNotFoundError as exc:
            return Result(127, "", f"{exc.filename}: not found")
        return Result(proc.returncode, proc.stdout.decode(errors="surrogateescape"),
                      proc.stderr.decode(errors="surrogateescape"))

    def put(self, source: Source, remote: str, mode: int | None = None) -> None:
        if self.wrapper:
            put_with_cat(self, source, remote, mode)
            return
        target = self.local_path(remote)
        partial = target.with_name(f".{target.name}.labwright-part")
        try:
            partial.write_bytes(source_bytes(source))
            if mode is not None:
                partial.chmod(mode)
            elif target.exists():
                partial.chmod(target.stat().st_mode & 0o7777)
            os.replace(partial, target)
        except OSError:
            partial.unlink(missing_ok=True)
            raise

    def get(self, remote: str) -> bytes:
        return get_with_cat(self, remote) if self.wrapper else self.local_path(remote).read_bytes()

    def local_path(self, path: str) -> Path:
        """Where the host's ``path`` is on this machine: the path itself."""
        return Path(path)

    def read_text(self, path: str) -> str:
        return super().read_text(path) if self.wrapper else self.local_path(path).read_text()

    def exists(self, path: str) -> bool:
        return super().exists(path) if self.wrapper else self.local_path(path).exists()

    def listdir(self, path: str) -> list[str]:
        return super().listdir(path) if self.wrapper else sorted(os.listdir(self.local_path(path)))

    def stat(self, path: str, follow_symlinks: bool = True) -> FileStat | None:
        if self.wrapper:
            return super().stat(path, follow_symlinks)
        try:
            info = os.stat(self.local_path(path), follow_symlinks=follow_symlinks)
        except OSError:
            return None
        return FileStat(info.st_mode, os.major(info.st_rdev), os.minor(info.st_rdev))

    def realpath(self, path: str) -> str:
        return super().realpath(path) if self.wrapper else os.path.realpath(self.local_path(path))

    def close(self) -> None:
        pass


def local_path(host: Host, path: str) -> str:
    """Where ``host``'s ``path`` is for a program on this machine (the LXD daemon reading a device node's source):
    a :class:`LocalHost` says; any other host's path is its own (read there, by that host's daemon)."""
    return str(host.local_path(path)) if isinstance(host, LocalHost) else path
