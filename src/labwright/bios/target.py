"""A host reached through pyinfra's connectors (``@local``, ``@lxd/NAME``, ``@incus/NAME``, SSH hostnames).

The CLI connects in-process with pyinfra's API, so every connector labwright and pyinfra ship works without an
inventory file; the deploy hands over the host pyinfra already connected (:meth:`Target.from_host`).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from labwright.errors import BadInput, OperationFailed

if TYPE_CHECKING:
    from pyinfra.api.host import Host

#: Where flashrom lives on Debian (/usr/sbin), ahead of nothing the host's own PATH already has.
PATH_PREFIX = 'PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"; export PATH; '
RC_MARK = "@@labwright-rc="


@dataclass(frozen=True)
class Result:
    rc: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.rc == 0

    def last_line(self) -> str:
        """The last non-empty line of stderr, else stdout: what a one-line error quotes."""
        for text in (self.stderr, self.stdout):
            lines = [line.strip() for line in text.splitlines() if line.strip()]
            if lines:
                return lines[-1]
        return f"exit {self.rc}, no output"


class Target:
    """Commands and files on one host. ``label`` is how messages name it (the target string)."""

    def __init__(self, host: Host, label: str, owned: bool = False):
        self.host = host
        self.label = label
        self._owned = owned

    @classmethod
    def connect(cls, target: str, data: dict[str, Any] | None = None) -> Target:
        """Connect to ``target`` (as pyinfra names hosts on its command line); BadInput when it cannot be reached."""
        if not target or target.startswith("-") or re.search(r"\s", target):
            raise BadInput(f"HOST {target!r}: expected a pyinfra target such as @local, @lxd/NAME or a hostname")
        from pyinfra.api import Config, Inventory, State
        from pyinfra.api.exceptions import ConnectError

        inventory = Inventory(([(target, dict(data or {}))], {}))
        State(inventory, Config())
        host = inventory.get_host(target)
        try:
            host.connect(show_errors=False, raise_exceptions=True)
        except ConnectError as exc:
            raise BadInput(f"HOST {target}: cannot connect ({exc}); check the name (`lxc list` for @lxd/NAME)") \
                from None
        return cls(host, target, owned=True)

    @classmethod
    def from_host(cls, host: Host) -> Target:
        return cls(host, host.name)

    def close(self) -> None:
        if self._owned:
            self.host.disconnect()

    def __enter__(self) -> Target:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def run(self, command: str, timeout: int = 600) -> Result:
        """Run a shell command (sbin dirs on PATH); its exit code comes back on a marker line."""
        wrapped = f"{PATH_PREFIX}( {command} ); echo \"{RC_MARK}$?\""
        _, output = self.host.run_shell_command(wrapped, _timeout=timeout)
        stdout_lines = list(output.stdout_lines)
        rc = 255
        # The marker ends the last line; output without a final newline shares that line with it.
        if stdout_lines and RC_MARK in stdout_lines[-1]:
            before, _, code = stdout_lines.pop().rpartition(RC_MARK)
            rc = int(code) if code.strip().isdigit() else 255
            if before:
                stdout_lines.append(before)
        return Result(rc, "\n".join(stdout_lines), "\n".join(output.stderr_lines))

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
        out = self.check(f"sha256sum {shlex.quote(remote)}", f"sha256sum {remote}").stdout.split()
        return out[0] if out else ""
