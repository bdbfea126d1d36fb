"""A host over SSH, through pyinfra's own SSH connector: its paramiko client honours ``~/.ssh/config``
(HostName, User, Port, IdentityFile, ProxyJump, ProxyCommand, UserKnownHostsFile, StrictHostKeyChecking),
and the options are pyinfra's ``ssh_*`` host data (:mod:`labwright.hosts.options`).

:class:`SshHost` either owns a connector (``SshHost.open(name, data)``: the guest backend's and the cluster
runbooks' nodes) or wraps one a pyinfra connector made (the ``@pct`` connector's node, as pyinfra's
``dockerssh`` connector wraps its ``SSHConnector``). Commands run on their own channel so the exit code,
stdin, a deadline and both output streams are exact.
"""

from __future__ import annotations

import io
import logging
import select
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import paramiko
from pyinfra.api import Config, Inventory, State
from pyinfra.api.exceptions import ConnectError, PyinfraError
from pyinfra.connectors.ssh import SSHConnector

from labwright.hosts import CommandFiles, Result, Source, shell_line
from labwright.hosts.options import endpoint, ssh_options

READ_CHUNK = 32768


class _SaidByConnectError(logging.Filter):
    """Drop the two warnings of pyinfra's SSH client (pyinfra 3.10.0, connectors/sshuserclient/client.py: StrictPolicy
    line 37, get_host_keys line 182) that would print beside labwright's own one-line error: "No host key for H found
    in known_hosts" (connect_error says it, with the fix) and "Failed to load host keys from F: [Errno 2] ..." for a
    known_hosts file that does not exist yet (normal before the first SSH login; an unreadable or broken file still
    warns)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.msg)
        if message.startswith("No host key for ") and message.endswith(" found in known_hosts"):
            return False
        args = record.args if isinstance(record.args, tuple) else ()
        return not (message.startswith("Failed to load host keys from ") and len(args) == 2
                    and isinstance(args[1], FileNotFoundError))


logging.getLogger("pyinfra").addFilter(_SaidByConnectError())


def read_channel(channel: paramiko.Channel, timeout: float | None,
                 on_stdout: Callable[[bytes], None], on_stderr: Callable[[bytes], None]) -> int:
    """Read stdout and stderr together until the command ends; return its exit status.

    Both streams are drained as data arrives (a full stderr window cannot stall stdout) and the deadline
    holds with or without gevent's monkey patching. TimeoutError when the command outlives ``timeout``.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        while channel.recv_ready():
            on_stdout(channel.recv(READ_CHUNK))
        while channel.recv_stderr_ready():
            on_stderr(channel.recv_stderr(READ_CHUNK))
        if (channel.eof_received or channel.closed) and not channel.recv_ready() and not channel.recv_stderr_ready():
            break
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            channel.close()
            raise TimeoutError(f"command did not finish within {timeout}s")
        select.select([channel], [], [], remaining)
    remaining = None if deadline is None else max(deadline - time.monotonic(), 0)
    if not channel.status_event.wait(remaining):
        channel.close()
        raise TimeoutError(f"command did not finish within {timeout}s")
    return channel.recv_exit_status()


def connect_error(exc: BaseException, label: str, options: Mapping[str, Any]) -> str:
    """One line saying why pyinfra's SSH connector could not log into ``label``, and what to do."""
    cause = exc.__context__ if isinstance(exc, ConnectError) and exc.__context__ is not None else exc
    target = endpoint(options)
    where = target.where
    if isinstance(cause, paramiko.BadHostKeyException):
        return (f"host key of {label} ({where}) does NOT match {target.known_hosts_file}: possible "
                "man-in-the-middle; if it was reinstalled, remove the old key: "
                f"ssh-keygen -R {target.known_hosts_entry}")
    if isinstance(cause, paramiko.AuthenticationException):
        key = options.get("ssh_key") or "ssh config, agent and ~/.ssh keys"
        return f"SSH login to {label} as {where} refused (key: {key}): {cause}"
    if isinstance(cause, paramiko.SSHException) and ("No host key" in str(cause) or "known_hosts" in str(cause)):
        return (f"host key of {label} ({where}) is not in {target.known_hosts_file}; add it (ssh-keyscan -p "
                f"{target.port} {target.hostname}), set ssh_known_hosts_file, or for a throwaway machine set "
                "ssh_strict_host_key_checking=no")
    if isinstance(cause, socket.gaierror):
        return f"cannot resolve {label} ({target.hostname}): {cause.strerror}"
    if isinstance(cause, OSError | EOFError):
        reason = getattr(cause, "strerror", None) or str(cause) or type(cause).__name__
        return f"cannot reach {label} over SSH at {where}: {reason}"
    if not isinstance(exc, ConnectError):  # pyinfra's own checks, e.g. "No such private key file: ..."
        return f"SSH to {label} ({where}): {exc}"
    return f"SSH to {label} ({where}) failed: {cause}"


class SshHost(CommandFiles):
    """Commands and files on one machine over pyinfra's SSH connector."""

    def __init__(self, connector: SSHConnector, label: str, options: Mapping[str, Any]):
        self.connector = connector
        self.label = label
        self.options = dict(options)
        self._owner: Any = None  # the pyinfra host an opened SshHost made for itself

    @classmethod
    def open(cls, name: str, data: Mapping[str, Any], label: str | None = None) -> SshHost:
        """A host for machine ``name`` (an address or ssh config alias) with inventory host data ``data``
        (the ``ssh_*`` option set); connect() logs in."""
        options = ssh_options(data, name)
        inventory = Inventory(([(name, options)], {}))
        State(inventory, Config())
        host = inventory.get_host(name)
        connector = host.connector
        assert isinstance(connector, SSHConnector)
        ssh_host = cls(connector, label or name, options)
        ssh_host._owner = host
        return ssh_host

    @classmethod
    def wrapping(cls, connector: SSHConnector, name: str, data: Mapping[str, Any], label: str) -> SshHost:
        """Give ``connector`` (made by another connector for its host) the option set for machine ``name``."""
        options = ssh_options(data, name)
        connector.data.update(options)  # type: ignore[typeddict-item]
        return cls(connector, label, options)

    @property
    def connected(self) -> bool:
        client = self.connector.client
        transport = client.get_transport() if client is not None else None
        return transport is not None and transport.is_active()

    def connect(self) -> None:
        """Log in; ConnectError with one line saying why not."""
        if self.connected:
            return
        try:
            self.connector.connect()
        except PyinfraError as exc:
            raise ConnectError(connect_error(exc, self.label, self.options)) from None

    def close(self) -> None:
        self.connector.disconnect()
        if self.connector.client is not None:
            self.connector.client.close()
            self.connector.client = None

    def open_channel(self, command: str, get_pty: bool = False) -> paramiko.Channel:
        client = self.connector.client
        transport = client.get_transport() if client is not None else None
        if transport is None or not transport.is_active():
            raise ConnectError(f"SSH connection to {self.label} is not open")
        channel = transport.open_session(timeout=self.connector.state.config.CONNECT_TIMEOUT)
        if get_pty:
            channel.get_pty()
        channel.exec_command(command)
        return channel

    def stream(self, command: str, stdin: bytes | None, timeout: float | None, get_pty: bool,
               on_stdout: Callable[[bytes], None], on_stderr: Callable[[bytes], None]) -> int:
        """Run ``command``, feeding output to the callbacks as it arrives; its exit code."""
        self.connect()
        channel = self.open_channel(command, get_pty=get_pty)
        try:
            if stdin:
                channel.sendall(stdin)
            channel.shutdown_write()
            return read_channel(channel, timeout, on_stdout, on_stderr)
        finally:
            channel.close()

    def run(self, command: str | Sequence[str], stdin: bytes | str | None = None,
            timeout: float | None = None) -> Result:
        """Run a command line in the login shell. Raises ConnectError when the host cannot be reached and
        TimeoutError when ``timeout`` passes."""
        out, err = bytearray(), bytearray()
        data = stdin.encode() if isinstance(stdin, str) else stdin
        code = self.stream(shell_line(command), data, timeout, False, out.extend, err.extend)
        return Result(code, out.decode(errors="replace"), err.decode(errors="replace"))

    def transfer_client(self) -> Any:
        """pyinfra's file transfer client for this connection (SFTP, or SCP with ssh_file_transfer_protocol)."""
        self.connect()
        return self.connector.get_file_transfer_connection()

    def put(self, source: Source, remote: str, mode: int | None = None) -> None:
        client = self.transfer_client()
        if isinstance(source, bytes):
            client.putfo(io.BytesIO(source), remote)
        elif isinstance(source, str | Path):
            with open(source, "rb") as file_io:
                client.putfo(file_io, remote)
        else:
            client.putfo(source, remote)
        if mode is not None:
            result = self.run(["chmod", f"{mode:o}", "--", remote])
            if not result.ok:
                raise OSError(f"chmod {mode:o} {remote} on {self.label}: {result.last_line()}")

    def get(self, remote: str) -> bytes:
        buffer = io.BytesIO()
        self.get_into(remote, buffer)
        return buffer.getvalue()

    def get_into(self, remote: str, file_io: IO[bytes]) -> None:
        self.transfer_client().getfo(remote, file_io)
