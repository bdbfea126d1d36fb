"""An LXD/Incus container through labwright's LXD API client (never ``lxc exec`` subprocesses).
``NAME`` or ``REMOTE:NAME`` as in ``lxc``; remotes come from the lxc client config.

LXD's exec fails (an error, no output) when the process exits 127 ("Command not found") or 126 ("Command not
executable"): it reads its own codes into them. ``run`` folds a command's own 126/127 into 125 so its output comes
back; this is the one place that fold is made."""

from __future__ import annotations

import io
from collections.abc import Sequence

from labwright.errors import LabwrightError, LxdError, LxdNotFound
from labwright.hostnames import lxd_guest
from labwright.hosts import CommandFiles, Result, Source, shell_line, source_bytes
from labwright.lxd.client import ExecResult, LxdClient
from labwright.lxd.remotes import resolve_endpoint
from labwright.shell import quote


class LxdHost(CommandFiles):
    def __init__(self, target: str, client: LxdClient | None = None, raise_errors: bool = False):
        """``raise_errors``: ``run`` raises (LxdError, OSError) when the daemon cannot run the command, for callers
        that stop there with one line, instead of reading it as exit 255."""
        parsed = lxd_guest(target)
        self.name = parsed.instance
        self.label = f"container {target}"
        if client is None:
            endpoint, project = resolve_endpoint(parsed.remote, flavour=parsed.flavour)
            client = LxdClient(endpoint, project=project)
        self.client = client
        self.raise_errors = raise_errors

    def run(self, command: str | Sequence[str], stdin: bytes | str | None = None,
            timeout: float | None = None) -> Result:
        if stdin is not None:
            raise ValueError("LxdHost.run: the LXD exec API records output and takes no stdin; put a file instead")
        argv = ["sh", "-c", f"{shell_line(command)}\nrc=$?; case $rc in 126|127) exit 125;; esac; exit $rc"]
        if timeout is not None:  # coreutils timeout: exit 124, as LocalHost and SshHost report a deadline
            argv = ["timeout", str(max(1, round(timeout))), *argv]
        try:
            done = self.exec(argv)
        except (LabwrightError, OSError) as exc:
            if self.raise_errors:
                raise
            return Result(255, "", f"{self.label}: {exc}")
        return Result(done.exit_code, done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace"))

    def exec(self, argv: Sequence[str]) -> ExecResult:
        """Run ``argv`` as it is (no ``sh -c``): the exit code as LXD reports it (a process the OOM killer
        SIGKILLed is not hidden behind a shell's own exit), stdout and stderr as bytes. Unlike ``run`` it raises
        (LxdError, OSError) when the daemon cannot run the command, for callers that stop on that rather than read
        it as exit 255."""
        return self.client.exec(self.name, list(argv))

    def put(self, source: Source, remote: str, mode: int | None = None) -> None:
        try:
            self.client.push_file(self.name, remote, source_bytes(source), mode=mode)
        except LabwrightError as exc:
            raise OSError(f"cannot write {remote} in {self.label}: {exc}") from exc

    def get(self, remote: str) -> bytes:
        """``remote``'s bytes; FileNotFoundError (an OSError) when it does not exist."""
        buffer = io.BytesIO()
        try:
            self.client.pull_file(self.name, remote, buffer)
        except LabwrightError as exc:
            if isinstance(exc, LxdNotFound) or (isinstance(exc, LxdError) and exc.status_code == 404):
                raise FileNotFoundError(f"cannot read {quote(remote)} in {self.label}: {exc}") from exc
            raise OSError(f"cannot read {quote(remote)} in {self.label}: {exc}") from exc
        return buffer.getvalue()

    def close(self) -> None:
        self.client.close()
