"""ONE way to run a command on a host: ``run`` / ``put`` / ``get``, one :class:`Result`, one SSH option set; and
one way to read its files: ``read_text`` / ``exists`` / ``listdir`` / ``stat`` / ``realpath`` (this machine's
directly, any other's by commands: :class:`CommandFiles`).

Every runbook that reaches a machine goes through a :class:`Host`; each transport is a small module:

- :mod:`labwright.hosts.local`: this machine, optionally through a wrapper (``ip netns exec NAME``);
- :mod:`labwright.hosts.ssh`: over pyinfra's own SSH connector, so ``~/.ssh/config`` (HostName, User, Port,
  IdentityFile, ProxyJump, ProxyCommand, UserKnownHostsFile, StrictHostKeyChecking) and pyinfra's ``ssh_*``
  host data apply exactly as they do for ``pyinfra HOST``; the option set is :mod:`labwright.hosts.options`;
- :mod:`labwright.hosts.lxd`: an LXD/Incus container through labwright's LXD API client;
- :mod:`labwright.hosts.connector`: any connected pyinfra host (``@local``, ``@lxd/NAME``, ``@pct/NODE/VMID``...).

:mod:`labwright.hosts.host_data` types a connector's ``--data KEY=VALUE`` host data as the connector reads it.

The ``@pct`` connector is pyinfra's SSH connector to the node plus the ``pct`` wrapping (as pyinfra's
``connectors/dockerssh.py`` is for docker); its node commands go through :class:`labwright.hosts.ssh.SshHost`.
"""

from __future__ import annotations

import stat as stat_mode
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

from labwright.shell import join, quote

#: What ``put`` accepts: the bytes themselves, a local file's path, or a readable binary file object.
Source = bytes | str | Path | IO[bytes]


@dataclass(frozen=True)
class Result:
    """A finished command: exit code (124 timed out, 127 not found (125 in an LXD container: labwright.hosts.lxd),
    255 could not reach the host), its output."""

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


@dataclass(frozen=True)
class FileStat:
    """What :meth:`Host.stat` says of a path: ``mode`` (st_mode: the file type and permission bits) and, for a device
    node, its ``major`` and ``minor``."""

    mode: int
    major: int = 0
    minor: int = 0

    @property
    def is_dir(self) -> bool:
        return stat_mode.S_ISDIR(self.mode)

    @property
    def is_file(self) -> bool:
        return stat_mode.S_ISREG(self.mode)

    @property
    def is_symlink(self) -> bool:
        return stat_mode.S_ISLNK(self.mode)

    @property
    def is_char(self) -> bool:
        return stat_mode.S_ISCHR(self.mode)

    @property
    def permissions(self) -> int:
        return stat_mode.S_IMODE(self.mode)


class Host(Protocol):
    """A machine commands and files reach. ``label`` is how messages name it."""

    label: str

    def run(self, command: str | Sequence[str], stdin: bytes | str | None = None,
            timeout: float | None = None) -> Result:
        """Run a POSIX shell command line (str) or an argv (quoted for the shell); never raises for a failed command."""
        ...

    def put(self, source: Source, remote: str, mode: int | None = None) -> None:
        """Write ``remote`` (mode unset: an existing file keeps its mode). Raises OSError when it fails."""
        ...

    def get(self, remote: str) -> bytes:
        """``remote``'s contents. Raises OSError when it cannot be read."""
        ...

    def read_text(self, path: str) -> str:
        """``path``'s text. Raises OSError when it cannot be read."""
        ...

    def exists(self, path: str) -> bool:
        """Whether ``path`` exists (a symbolic link: its target)."""
        ...

    def listdir(self, path: str) -> list[str]:
        """The names in the directory ``path``, sorted. Raises OSError when it is no readable directory."""
        ...

    def stat(self, path: str, follow_symlinks: bool = True) -> FileStat | None:
        """``path``'s type, mode and device numbers (``follow_symlinks=False``: the link itself); None when missing."""
        ...

    def realpath(self, path: str) -> str:
        """``path`` with every symbolic link resolved (as ``readlink -f``)."""
        ...

    def close(self) -> None: ...


class CommandFiles:
    """:class:`Host`'s file reads for a transport that only runs commands (SSH, pct, LXD exec, a pyinfra connector):
    ``cat``, ``test``, ``ls``, ``stat`` and ``readlink``, one command each (GNU coreutils, as on Debian and Proxmox
    VE). The class using it defines ``label``, ``run`` and ``get``."""

    label: str

    def run(self, command: str | Sequence[str], stdin: bytes | str | None = None,
            timeout: float | None = None) -> Result:
        raise NotImplementedError

    def get(self, remote: str) -> bytes:
        raise NotImplementedError

    def read_text(self, path: str) -> str:
        return self.get(path).decode(errors="surrogateescape")

    def exists(self, path: str) -> bool:
        return self.run(["test", "-e", path]).ok

    def listdir(self, path: str) -> list[str]:
        result = self.run(f"test -d {quote(path)} && ls -A1 -- {quote(path)}")
        if not result.ok:
            raise OSError(f"cannot list {path} on {self.label}: "
                          f"{result.last_line() if result.stderr.strip() else 'not a directory'}")
        return sorted(name for name in result.stdout.splitlines() if name)

    def stat(self, path: str, follow_symlinks: bool = True) -> FileStat | None:
        result = self.run(["stat", *(["-L"] if follow_symlinks else []), "-c", "%f %t %T", "--", path])
        fields = result.stdout.split()
        if not result.ok or len(fields) != 3:
            return None
        return FileStat(*(int(field, 16) for field in fields))

    def realpath(self, path: str) -> str:
        result = self.run(["readlink", "-f", "--", path])
        return result.stdout.strip() if result.ok and result.stdout.strip() else path


def shell_line(command: str | Sequence[str]) -> str:
    """A command as one shell line: a str is already one, an argv is quoted word by word."""
    return command if isinstance(command, str) else join(command)


def source_bytes(source: Source) -> bytes:
    if isinstance(source, bytes):
        return source
    if isinstance(source, str | Path):
        return Path(source).read_bytes()
    return source.read()


def put_with_cat(host: Host, source: Source, remote: str, mode: int | None) -> None:
    """``put`` for a transport that only runs commands: write beside, then rename (never a half-written file)."""
    q, tmp = quote(remote), quote(f"{remote}.labwright-part")
    chmod = f"chmod {mode:o} {tmp} && " if mode is not None else \
        f"{{ [ ! -e {q} ] || chmod \"$(stat -c %a {q})\" {tmp}; }} && "
    result = host.run(f"cat > {tmp} && {chmod}mv -f -- {tmp} {q} || {{ rc=$?; rm -f {tmp}; exit $rc; }}",
                      stdin=source_bytes(source))
    if not result.ok:
        raise OSError(f"cannot write {remote} on {host.label}: {result.last_line()}")


def get_with_cat(host: Host, remote: str) -> bytes:
    result = host.run(["cat", "--", remote])
    if not result.ok:
        raise OSError(f"cannot read {remote} on {host.label}: {result.last_line()}")
    return result.stdout.encode("utf-8", errors="surrogateescape")


__all__ = ["CommandFiles", "FileStat", "Host", "Result", "Source", "get_with_cat", "put_with_cat", "shell_line",
           "source_bytes"]
