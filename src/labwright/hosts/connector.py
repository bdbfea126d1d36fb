"""A host reached through any pyinfra connector (``@local``, ``@lxd/NAME``, ``@incus/NAME``, ``@pct/NODE/VMID``,
SSH hostnames): pyinfra's API connects in-process, so every connector labwright and pyinfra ship works without an
inventory file, and a deploy hands over the host pyinfra already connected (:meth:`ConnectorHost.from_host`).

pyinfra's ``run_shell_command`` answers success or failure only; the exit code comes back on a marker line.
"""

from __future__ import annotations

import io
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from labwright.errors import BadInput
from labwright.hosts import CommandFiles, Result, Source, shell_line, source_bytes
from labwright.shell import quote
from labwright.textio import ascii_digits

if TYPE_CHECKING:
    from pyinfra.api.host import Host as PyinfraHost

RC_MARK = "@@labwright-rc="


class ConnectorHost(CommandFiles):
    """Commands and files on one pyinfra host. ``label`` is how messages name it (the target string)."""

    def __init__(self, host: PyinfraHost, label: str, owned: bool = False):
        self.host = host
        self.label = label
        self._owned = owned

    @classmethod
    def connect(cls, target: str, data: dict[str, Any] | None = None) -> Self:
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
            raise BadInput(f"HOST {target}: cannot connect ({exc}); check the name (`lxc list` for @lxd/NAME, "
                           "`incus list` for @incus/NAME)") from None
        return cls(host, target, owned=True)

    @classmethod
    def from_host(cls, host: PyinfraHost) -> Self:
        return cls(host, host.name)

    def close(self) -> None:
        if self._owned:
            self.host.disconnect()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def run(self, command: str | Sequence[str], stdin: bytes | str | None = None,
            timeout: float | None = 600, prefix: str = "") -> Result:
        """Run a shell command (after ``prefix``); its exit code comes back on a marker line."""
        wrapped = f"{prefix}( {shell_line(command)} ); echo \"{RC_MARK}$?\""
        arguments: dict[str, Any] = {"_timeout": timeout}
        if stdin is not None:
            arguments["_stdin"] = stdin.decode() if isinstance(stdin, bytes) else stdin
        _, output = self.host.run_shell_command(wrapped, **arguments)
        stdout_lines = list(output.stdout_lines)
        rc = 255
        # The marker ends the last line; output without a final newline shares that line with it.
        if stdout_lines and RC_MARK in stdout_lines[-1]:
            before, _, code = stdout_lines.pop().rpartition(RC_MARK)
            rc = int(code) if ascii_digits(code.strip()) else 255
            if before:
                stdout_lines.append(before)
        return Result(rc, "\n".join(stdout_lines), "\n".join(output.stderr_lines))

    def put(self, source: Source, remote: str, mode: int | None = None) -> None:
        if isinstance(source, str | Path):
            ok = self.host.put_file(str(source), remote)
        else:
            ok = self.host.put_file(io.BytesIO(source_bytes(source)), remote)
        if not ok:
            raise OSError(f"{self.label}: copying to {remote} on the host failed")
        if mode is not None and not self.run(["chmod", f"{mode:o}", "--", remote]).ok:
            raise OSError(f"{self.label}: chmod {mode:o} {quote(remote)} failed")

    def get(self, remote: str) -> bytes:
        with tempfile.TemporaryDirectory(prefix="labwright-get-") as directory:
            local = Path(directory) / "file"
            if not self.host.get_file(remote, str(local)):
                raise OSError(f"{self.label}: copying {remote} off the host failed")
            return local.read_bytes()
