"""This machine: a command is a subprocess, optionally run through a wrapper argv (``ip netns exec NAME``,
``chroot DIR``...)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from labwright.hosts import Result, Source, get_with_cat, put_with_cat, shell_line, source_bytes


class LocalHost:
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
        target = Path(remote)
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
        return get_with_cat(self, remote) if self.wrapper else Path(remote).read_bytes()

    def close(self) -> None:
        pass
