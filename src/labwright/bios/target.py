"""A host reached through pyinfra's connectors (``@local``, ``@lxd/NAME``, ``@incus/NAME``, SSH hostnames): the
``hosts`` seam's :class:`~labwright.hosts.connector.ConnectorHost` with what the flash runbooks add: sbin
directories on PATH, a ``check`` that turns a failure into one line, and sha256 of a remote file.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from labwright.errors import OperationFailed
from labwright.hosts import Result
from labwright.hosts.connector import RC_MARK, ConnectorHost
from labwright.shell import quote

#: Where flashrom lives on Debian (/usr/sbin), ahead of nothing the host's own PATH already has.
PATH_PREFIX = 'PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"; export PATH; '

__all__ = ["PATH_PREFIX", "RC_MARK", "Result", "Target"]

class Target(ConnectorHost):
    """Commands and files on one host. ``label`` is how messages name it (the target string)."""

    def run(self, command: str | Sequence[str], stdin: bytes | str | None = None,
            timeout: float | None = 600, prefix: str = PATH_PREFIX) -> Result:
        """Run a shell command (sbin dirs on PATH); its exit code comes back on a marker line."""
        return super().run(command, stdin=stdin, timeout=timeout, prefix=prefix)

    def check(self, command: str, what: str, timeout: int = 600) -> Result:
        result = self.run(command, timeout=timeout)
        if not result.ok:
            raise OperationFailed(f"{self.label}: {what} failed: {result.last_line()}")
        return result

    def get_file(self, remote: str, local: Path) -> None:
        if not self.host.get_file(remote, str(local)):
            raise OperationFailed(f"{self.label}: copying {remote} off the host failed")

    def put_file(self, local: Path, remote: str) -> None:
        if not self.host.put_file(str(local), remote):
            raise OperationFailed(f"{self.label}: copying {local} to {remote} on the host failed")

    def sha256(self, remote: str) -> str:
        out = self.check(f"sha256sum {quote(remote)}", f"sha256sum {remote}").stdout.split()
        return out[0] if out else ""
