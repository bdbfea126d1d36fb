"""What labwright's connectors share: a shell command's steps around its run, stdin as bytes, and put_file/get_file
with the sudo/su handover.

With sudo/su a file cannot go straight to its place as the connecting user, so (as pyinfra's SSH
connector does) it goes to a temporary path readable by the other user only, and that user copies it
into place; a download is copied out by that user first. Each connector supplies the two raw moves,
``_push`` and ``_pull``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any

from pyinfra import logger
from pyinfra.api import QuoteString, StringCommand
from pyinfra.api.output import echo
from pyinfra.connectors.util import (
    CommandOutput,
    execute_command_with_sudo_retry,
    extract_control_arguments,
    make_unix_command_for_host,
)

if TYPE_CHECKING:
    from pyinfra.api.arguments import ConnectorArguments

HANDOVER_ARGUMENTS = ("_sudo", "_sudo_user", "_doas", "_doas_user", "_dzdo", "_dzdo_user", "_su_user")
OTHER_USER_ARGUMENTS = ("_su_user", "_sudo_user", "_doas_user", "_dzdo_user")


def run_shell(connector: Any, command: StringCommand, print_input: bool, arguments: ConnectorArguments,
              execute: Callable[[StringCommand, ConnectorArguments], tuple[int, CommandOutput]],
              ) -> tuple[bool, int, CommandOutput]:
    """The steps of a connector's ``run_shell_command`` around running the command: pyinfra's control arguments
    (``_timeout``, ``_stdin``, ``_get_pty``, ``_success_exit_codes``) taken out of ``arguments``, the command made the
    host's shell line (sudo/su, env, chdir: pyinfra's ``make_unix_command_for_host``), echoed when ``print_input``,
    run by ``execute(line, control)``, again with the password when sudo asks for one; (ok: by
    ``_success_exit_codes``, else exit 0; the exit code; the output)."""
    control = extract_control_arguments(arguments)
    success_codes = control.get("_success_exit_codes")

    def attempt() -> tuple[int, CommandOutput]:
        unix_command = make_unix_command_for_host(connector.state, connector.host, command, **arguments)
        if print_input:
            echo(f"{connector.host.print_prefix}>>> {unix_command}", err=True)
        return execute(unix_command, control)

    exit_code, output = execute_command_with_sudo_retry(connector.host, arguments, attempt)
    return (exit_code in success_codes if success_codes else exit_code == 0), exit_code, output


def stdin_bytes(stdin: Any) -> bytes:
    """pyinfra's ``_stdin`` (str, bytes, list of lines or file-like) as bytes, each line newline-terminated
    as pyinfra's ``write_stdin`` sends it."""
    if hasattr(stdin, "readlines"):
        stdin = stdin.readlines()
    if not isinstance(stdin, list | tuple):
        stdin = [stdin]
    out = []
    for line in stdin:
        if isinstance(line, str):
            line = line.encode()
        out.append(line if line.endswith(b"\n") else line + b"\n")
    return b"".join(out)


class HandoverTransfer:
    """Mixin for a pyinfra connector: implements put_file/get_file on top of ``_push``/``_pull``."""

    host: Any
    run_shell_command: Any  # the connector's own

    def _push(self, filename_or_io: str | IO[Any], path: str, perms: str | None = None,
              user: str | None = None) -> None:
        """Write ``path`` as the connecting user; ``perms``/``user`` set mode and owner of a new copy."""
        raise NotImplementedError

    def _pull(self, path: str, filename_or_io: str | IO[Any]) -> None:
        raise NotImplementedError

    def put_file(
        self,
        filename_or_io,
        remote_filename,
        remote_temp_filename=None,
        print_output: bool = False,
        print_input: bool = False,
        **arguments: Any,
    ) -> bool:
        """Upload; with sudo/su the file is pushed to a temporary path owned by the target user and
        copied into place as that user."""
        if not any(arguments.get(key) for key in HANDOVER_ARGUMENTS):
            self._push(filename_or_io, remote_filename)
        else:
            # _chdir may need the other user's rights, so it goes with them (as in pyinfra's SSH connector).
            noauth = {k: v for k, v in arguments.items() if k not in HANDOVER_ARGUMENTS and k != "_chdir"}
            temp = remote_temp_filename or self.host.get_temp_filename(remote_filename)
            other_user = next((str(arguments[k]) for k in OTHER_USER_ARGUMENTS if arguments.get(k)), None)
            self._push(filename_or_io, temp, perms="0600", user=other_user)
            try:
                ok, output = self.run_shell_command(
                    StringCommand("cp", temp, QuoteString(remote_filename)),
                    print_output=print_output, print_input=print_input, **arguments,
                )
            finally:
                self.run_shell_command(StringCommand("rm", "-f", temp), **noauth)
            if not ok:
                logger.error(f"File upload error: {output.stderr}")
                return False
        if print_output:
            echo(f"{self.host.print_prefix}file uploaded: {remote_filename}", err=True)
        return True

    def get_file(
        self,
        remote_filename,
        filename_or_io,
        remote_temp_filename=None,
        print_output: bool = False,
        print_input: bool = False,
        **arguments: Any,
    ) -> bool:
        """Download; with sudo/su the file is first copied to a readable temporary path by that user."""
        if not any(arguments.get(key) for key in HANDOVER_ARGUMENTS):
            self._pull(remote_filename, filename_or_io)
        else:
            temp = remote_temp_filename or self.host.get_temp_filename(remote_filename)
            ok, output = self.run_shell_command(
                StringCommand("cp", QuoteString(remote_filename), temp, "&&", "chmod", "+r", temp),
                print_output=print_output, print_input=print_input, **arguments,
            )
            if not ok:
                logger.error(f"File download copy temp error: {output.stderr}")
                return False
            try:
                self._pull(temp, filename_or_io)
            finally:
                ok, output = self.run_shell_command(
                    StringCommand("rm", "-f", temp), print_output=print_output, print_input=print_input, **arguments
                )
            if not ok:
                logger.error(f"File download remove temp error: {output.stderr}")
                return False
        if print_output:
            echo(f"{self.host.print_prefix}file downloaded: {remote_filename}", err=True)
        return True
