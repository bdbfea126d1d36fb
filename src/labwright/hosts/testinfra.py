"""A host reached through a testinfra host (``labwright verify``'s ``host`` fixture: ``lxc://``, ``ssh://``...), so
checks written once against :class:`labwright.hosts.Host` run under ``labwright verify`` too."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

from labwright.hosts import CommandFiles, Result, Source, get_with_cat, shell_line, source_bytes
from labwright.shell import quote


class TestinfraHost(CommandFiles):
    """Commands through testinfra's ``host.run`` (its backend's shell). testinfra passes no stdin, so ``put`` sends
    the bytes base64-encoded on the command line (small files: the checks' records and configs)."""

    __test__ = False  # not a pytest test class, though its name starts with Test

    def __init__(self, host: Any, label: str | None = None):
        self.host = host
        self.label = label or str(getattr(host.backend, "hostname", None) or "the verified host")

    def run(self, command: str | Sequence[str], stdin: bytes | str | None = None,
            timeout: float | None = None) -> Result:
        if stdin is not None or timeout is not None:
            raise ValueError("TestinfraHost.run: testinfra's run takes no stdin and no deadline")
        done = self.host.run(shell_line(command))
        return Result(done.rc, done.stdout, done.stderr)

    def put(self, source: Source, remote: str, mode: int | None = None) -> None:
        q, tmp = quote(remote), quote(f"{remote}.labwright-part")
        data = base64.b64encode(source_bytes(source)).decode()
        chmod = f" && chmod {mode:o} {tmp}" if mode is not None else ""
        result = self.run(f"printf %s {data} | base64 -d > {tmp}{chmod} && mv -f -- {tmp} {q} "
                          f"|| {{ rc=$?; rm -f {tmp}; exit $rc; }}")
        if not result.ok:
            raise OSError(f"cannot write {remote} on {self.label}: {result.last_line()}")

    def get(self, remote: str) -> bytes:
        return get_with_cat(self, remote)

    def close(self) -> None:
        pass


__all__ = ["TestinfraHost"]
