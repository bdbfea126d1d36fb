"""pyinfra connector ``@lxd/NAME`` (and ``@lxd/REMOTE:NAME``, ``@incus/...``).

Commands run in a persistent session: on connect, one long-lived exec starts a tiny agent
(``python3``, see :mod:`labwright.lxd.session`) that runs each command with ``sh -c`` and answers
over the exec's websockets, ~1-3 ms a command. Without python3 in the container (or with host
data ``lxd_agent=False``) each command is one REST ``exec`` with recorded output on a kept-alive
connection (~15-20 ms), never ``lxc exec`` subprocesses or pylxd's websockets. Files move through
the files API. sudo/su/env/chdir are applied by pyinfra's own command builder, as in pyinfra's
connectors, so both ways run the very same shell command.

.. code:: shell

    pyinfra @lxd/web1 exec -- uname -a
    pyinfra @lxd/homelab:gpu1 deploys/base.py     # a remote from `lxc remote list`
    pyinfra @incus/desk1 deploys/desktop.py

Host data: ``lxd_socket`` (path of a unix socket to use instead of the default),
``lxd_config_dir`` (client config directory for remotes), ``lxd_project``, ``lxd_agent`` (default
True: use the agent session when the container has python3).
"""

from __future__ import annotations

import io
import secrets
import time
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING, Any

from pyinfra import logger
from pyinfra.api import StringCommand
from pyinfra.api.exceptions import ConnectError
from pyinfra.api.output import echo
from pyinfra.api.util import get_file_io
from pyinfra.connectors.base import BaseConnector, DataMeta
from pyinfra.connectors.util import (
    CommandOutput,
    OutputLine,
)
from typing_extensions import TypedDict, Unpack, override

from labwright.connectors._transfer import HandoverTransfer, run_shell, stdin_bytes
from labwright.connectors.names import parsed_for_pyinfra
from labwright.errors import BadInput, LabwrightError
from labwright.guests.declared import ensure_declared, pyinfra_dry_run, spec_for_host, wait_until
from labwright.hostnames import parse_lxd_target
from labwright.lab.lab import instance_address
from labwright.lxd.client import ExecResult, LxdClient
from labwright.lxd.remotes import resolve_endpoint
from labwright.lxd.session import AgentLost, AgentNotRun, AgentSession, AgentUnavailable
from labwright.shell import join

if TYPE_CHECKING:
    from pyinfra.api.arguments import ConnectorArguments
    from pyinfra.api.host import Host
    from pyinfra.api.state import State

TIMEOUT_EXIT = 124  # coreutils `timeout`
DYING_SETTLE_S = 10.0  # how long a container that fails commands may still say Running while it stops


class _TransferLost(OSError):
    """A file transfer lost because the container stopped or its daemon went away (the message is the one line)."""


def quiet_pyinfra_errors_in_greenlets() -> None:
    """pyinfra fails the last host of a run by raising PyinfraError("No hosts remaining!") inside the host's greenlet;
    gevent prints that greenlet's whole traceback before pyinfra's own one-line "pyinfra error". Keep the line only
    (gevent's Hub.NOT_ERROR: exceptions its error handler does not print)."""
    import gevent
    from pyinfra.api.exceptions import PyinfraError

    hub = gevent.get_hub()
    if PyinfraError not in hub.NOT_ERROR:
        hub.NOT_ERROR = (*hub.NOT_ERROR, PyinfraError)
#: How often a connection starts a new agent after one died between commands (a command that killed
#: it, an OOM kill); past that, the rest of the connection uses REST execs.
AGENT_RESTARTS = 3
#: How long a guest the connector just created may take to get its address (DHCP on the lab bridge: ~2 s).
GUEST_READY_TIMEOUT = 120


class LxdConnectorData(TypedDict, total=False):
    lxd_instance: str
    lxd_remote: str | None
    lxd_socket: str
    lxd_config_dir: str
    lxd_project: str
    lxd_agent: bool


connector_data_meta: dict[str, DataMeta] = {
    "lxd_instance": DataMeta("Instance (container) name"),
    "lxd_remote": DataMeta("Remote from the lxc/incus client config; none means the local daemon"),
    "lxd_socket": DataMeta("Unix socket path of the daemon (overrides discovery)"),
    "lxd_config_dir": DataMeta("lxc/incus client config directory holding config.yml and certificates"),
    "lxd_project": DataMeta("LXD project"),
    "lxd_agent": DataMeta("Run commands through a persistent agent session (needs python3 in the container)", True),
}


def lines(data: bytes) -> list[str]:
    text = data.decode("utf-8", errors="replace")
    return text.splitlines()


class LxdConnector(HandoverTransfer, BaseConnector):
    """Execute in LXD containers through the daemon's REST API."""

    handles_execution = True
    flavour = "lxd"
    data_cls = LxdConnectorData
    data_meta = connector_data_meta

    client: LxdClient
    instance: str
    session: AgentSession | None = None

    def __init__(self, state: State, host: Host):
        super().__init__(state, host)
        self._agent_starts = 0

    @classmethod
    def _names(cls, name: str | None) -> Iterator[tuple[str, dict, list[str]]]:
        parsed = parsed_for_pyinfra(parse_lxd_target, name, cls.flavour)  # labwright.hostnames: the one parser
        yield (
            f"@{cls.flavour}/{name}",
            {"lxd_instance": parsed.instance, "lxd_remote": parsed.remote},
            [f"@{cls.flavour}"],
        )

    @override
    @staticmethod
    def make_names_data(name: str | None = None) -> Iterator[tuple[str, dict, list[str]]]:
        return LxdConnector._names(name)

    @override
    def connect(self) -> None:
        data = self.host.data
        instance = data.get("lxd_instance")
        remote = data.get("lxd_remote")
        where = f"{remote}:{instance}" if remote else instance
        try:
            endpoint, project = resolve_endpoint(
                remote, data.get("lxd_config_dir"), self.flavour, data.get("lxd_socket")
            )
            self.client = LxdClient(endpoint, project=data.get("lxd_project") or project)
            info = self.client.instance_or_none(instance)
            if (info is None or info.get("status") != "Running") and self.host.data.get("guest"):
                info = self._make_declared(instance)
        except LabwrightError as exc:
            raise ConnectError(f"{where}: {exc}") from exc
        if info is None:
            raise ConnectError(f"{where}: no such container on {endpoint.describe()} (declare it with `guest` host "
                               "data and labwright creates it; see docs/guests.md)")
        if info.get("status") != "Running":
            raise ConnectError(f"{where}: container is {info.get('status')}; start it first "
                               f"(`{self.flavour if self.flavour == 'incus' else 'lxc'} start {where}`)")
        self.instance = instance
        quiet_pyinfra_errors_in_greenlets()
        if self.session is not None:  # connect() again without disconnect(): do not leave an agent behind
            self.session.close()
            self.session = None
        self._agent_starts = 0
        if self.data.get("lxd_agent", True):
            self._start_agent()

    def _make_declared(self, instance: str) -> dict[str, Any] | None:
        """The host declares its guest (``guest`` data) and it is missing or stopped: create/start it as declared
        (labwright.guests.declared), then wait until it can be deployed into (an address on its NIC, if it has
        one). ``--dry`` creates nothing and fails naming what would be made."""
        spec = spec_for_host(self.host, self.state.inventory)
        if spec is None:
            return self.client.instance_or_none(instance)
        if spec.backend != "lxd" or spec.name != instance:
            raise BadInput(f"`guest` declares a {spec.backend} guest named {spec.name!r}, but this host is "
                           f"@{self.flavour}/{instance}: make the declaration match the host name")
        ensure_declared(spec, lambda line: logger.warning(f"{self.host.print_prefix}{line}"), pyinfra_dry_run())
        info = self.client.instance_or_none(instance)
        if info is not None and info.get("status") == "Running" and self._has_nic(info):
            wait_until(lambda: instance_address(self.client, instance) is not None, GUEST_READY_TIMEOUT,
                       f"{instance} to get an IPv4 address after it was created")
        return info

    @staticmethod
    def _has_nic(info: dict[str, Any]) -> bool:
        devices = info.get("expanded_devices") or info.get("devices") or {}
        return any(isinstance(dev, dict) and dev.get("type") == "nic" for dev in devices.values())

    def _start_agent(self) -> None:
        self._agent_starts += 1
        session = AgentSession(self.client, self.instance, log=logger)
        try:
            session.start()
        except AgentUnavailable as exc:
            logger.debug("@%s/%s: %s; commands run as REST execs", self.flavour, self.instance, exc)
            self.session = None
            return
        self.session = session

    def _live_session(self) -> AgentSession | None:
        """The agent session, restarting a dead one (a bounded number of times) first."""
        if self.session is not None and not self.session.alive:
            self.session.close()
            self.session = None
            if self._agent_starts <= AGENT_RESTARTS:
                self._start_agent()
        return self.session

    @override
    def disconnect(self) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None
        if getattr(self, "client", None) is not None:
            self.client.shutdown()

    # --- commands -----------------------------------------------------------------------------
    @override
    def run_shell_command(
        self,
        command: StringCommand,
        print_output: bool = False,
        print_input: bool = False,
        **arguments: Unpack[ConnectorArguments],
    ) -> tuple[bool, CommandOutput]:
        def execute(unix_command: StringCommand, control: ConnectorArguments) -> tuple[int, CommandOutput]:
            result = self._run_script(unix_command.get_raw_value(), control.get("_stdin"), control.get("_timeout"),
                                      str(unix_command))
            output = [OutputLine("stdout", line) for line in lines(result.stdout)]
            output += [OutputLine("stderr", line) for line in lines(result.stderr)]
            if print_output:
                for line in output:
                    echo(f"{self.host.print_prefix}{line.line}", err=line.buffer_name == "stderr")
            return result.exit_code, CommandOutput(output)

        try:
            ok, exit_code, output = run_shell(self, command, print_input, arguments, execute)
        except ConnectError as exc:
            # The container or its daemon went away: one line in the host's output (pyinfra prints a failed
            # command's stderr), not a traceback. A lost agent in a running container stays a ConnectError ("may
            # have run": the caller decides).
            try:
                gone = "shutting down" in str(exc) or self._status(DYING_SETTLE_S) != "Running"
            except LabwrightError:
                gone = True
            if not gone:
                raise
            return False, CommandOutput([OutputLine("stderr", self._lost(str(exc)))])
        if not ok:
            dying = exit_code in (-1, 137, 143, 255) or any(
                "Cannot fork" in line.line for line in output if line.buffer_name == "stderr")
            why = self._gone(settle=DYING_SETTLE_S if dying else 0)
            if why:
                output = CommandOutput([*output, OutputLine("stderr", why)])
        return ok, output

    def _where(self) -> str:
        return f"@{self.flavour}/{self.instance}"

    def _status(self, settle: float) -> str:
        """The container's status; ``settle`` > 0: while it still says Running, ask again until that many seconds
        passed (a container being stopped fails commands before its status changes)."""
        deadline = time.monotonic() + settle
        while True:
            info = self.client.instance_or_none(self.instance)
            status = str(info.get("status")) if info else "deleted"
            if status != "Running" or time.monotonic() >= deadline:
                return status
            time.sleep(0.2)

    def _gone(self, settle: float = 0) -> str:
        """Why commands cannot run in the container any more ("" while it runs): it stopped, or the daemon went."""
        try:
            status = self._status(settle)
        except LabwrightError as exc:
            return self._lost(str(exc))
        if status == "Running":
            return ""
        tool = "incus" if self.flavour == "incus" else "lxc"
        return (f"labwright: {self._where()} is {status} now: it stopped during the run; start it (`{tool} start "
                f"{self.instance}`) and re-run the deploy (the steps done so far are kept; the next run redoes the "
                "rest)")

    def _lost(self, detail: str) -> str:
        """The one line for a command whose result was lost: the container's state if the daemon answers."""
        try:
            if "shutting down" in detail:  # the daemon said so itself
                raise LabwrightError(detail)
            status = self._status(DYING_SETTLE_S)
        except LabwrightError:
            daemon, tool = ("Incus", "incus") if self.flavour == "incus" else ("LXD", "lxc")
            return (f"labwright: {self._where()}: the {daemon} daemon stopped answering during the run ({detail}); "
                    f"once it answers again (`{tool} list`), re-run the deploy (the steps done so far are kept)")
        if status != "Running":
            return self._gone() or detail
        return (f"labwright: {self._where()}: the connection to the container was lost during the run ({detail}); "
                "re-run the deploy (the steps done so far are kept)")

    def _run_script(self, script: str, stdin: Any, timeout: int | float | None, shown: str) -> ExecResult:
        """Run ``sh -c script``: in the agent session when there is one, else as a REST exec.
        Raises TimeoutError when ``timeout`` passed, ConnectError when the result is lost."""
        session = self._live_session()
        if session is not None:
            logger.debug("--> Running command on %s via the exec agent: %s", self.instance, shown)
            try:
                result = session.run(script, None if stdin is None else stdin_bytes(stdin), timeout)
            except AgentNotRun as exc:
                # Certainly not run, so running it the other way cannot run it twice.
                logger.debug("@%s/%s: %s; running the command as a REST exec", self.flavour, self.instance, exc)
            except AgentLost as exc:
                raise ConnectError(f"@{self.flavour}/{self.instance}: {exc}") from exc
            else:
                if result.timed_out:
                    raise TimeoutError(f"command timed out after {timeout}s")
                return result
        logger.debug("--> Running command on %s via the %s API: %s", self.instance,
                     "Incus" if self.flavour == "incus" else "LXD", shown)
        cleanup = None
        try:
            if stdin is not None:
                # Recorded-output exec has no stdin channel: stage it as a file, then redirect.
                cleanup = f"/tmp/.labwright-stdin-{secrets.token_hex(8)}"
                self.client.push_file(self.instance, cleanup, stdin_bytes(stdin), mode=0o600)
                script = f"exec <{cleanup} && rm -f {cleanup} && {script}"
            argv = ["sh", "-c", script]
            if timeout:
                argv = ["timeout", "--kill-after=5", str(int(timeout)), *argv]
            result = self.client.exec(self.instance, argv)
        except LabwrightError as exc:
            raise ConnectError(f"@{self.flavour}/{self.instance}: {exc}") from exc
        if timeout and result.exit_code in (TIMEOUT_EXIT, 137):
            raise TimeoutError(f"command timed out after {timeout}s")
        return result

    def _run_argv(self, argv: list[str]) -> ExecResult:
        """A helper command of the connector's own (no sudo/env wrapping)."""
        return self._run_script(join(argv), None, None, join(argv))

    # --- files --------------------------------------------------------------------------------
    def _push(self, filename_or_io: str | IO[Any], path: str, perms: str | None = None,
              user: str | None = None) -> None:
        with get_file_io(filename_or_io) as file_io:
            data = file_io.read()
        if isinstance(data, str):
            data = data.encode()
        uid = None
        if user is not None:
            found = self._run_argv(["id", "-u", user])
            if found.exit_code != 0:
                raise OSError(f"{self.instance}: no user {user!r} to hand {path} to")
            uid = int(found.stdout)
        mode = int(perms, 8) if perms else None
        try:
            self.client.push_file(self.instance, path, data, mode=mode, uid=uid)
        except LabwrightError as exc:
            # LXD's file API runs through a per-instance forkfile helper; right after the guest was frozen (a
            # snapshot on the dir pool) its socket can reset once ("forkfile.sock: connection reset by peer", seen
            # on the lab). A whole-file overwrite is safe to send again, once, while the guest still runs.
            if "connection reset by peer" not in str(exc) or not self._running():
                raise self._transfer_error(f"upload to {self.instance}:{path} failed: {exc}") from exc
            try:
                self.client.push_file(self.instance, path, data, mode=mode, uid=uid)
            except LabwrightError as again:
                raise self._transfer_error(f"upload to {self.instance}:{path} failed twice: {again}") from again

    def _running(self) -> bool:
        try:
            return self._status(0) == "Running"
        except LabwrightError:
            return False

    def _transfer_error(self, detail: str) -> OSError:
        """A failed push/pull: the one line of ``_lost`` when the container or its daemon went away, else OSError."""
        try:
            gone = "shutting down" in detail or self._status(0) != "Running"
        except LabwrightError:
            gone = True
        return _TransferLost(self._lost(detail)) if gone else OSError(detail)

    @override
    def put_file(self, *args: Any, **kwargs: Any) -> bool:
        try:
            return bool(super().put_file(*args, **kwargs))
        except _TransferLost as exc:  # one line, not pyinfra's "Command socket/SSH error: OSError('...')"
            logger.error(f"{self.host.print_prefix}{exc}")
            return False

    @override
    def get_file(self, *args: Any, **kwargs: Any) -> bool:
        try:
            return bool(super().get_file(*args, **kwargs))
        except _TransferLost as exc:
            logger.error(f"{self.host.print_prefix}{exc}")
            return False

    def _pull(self, path: str, filename_or_io: str | IO[Any]) -> None:
        buffer = io.BytesIO()
        try:
            self.client.pull_file(self.instance, path, buffer)
        except LabwrightError as exc:
            raise self._transfer_error(f"download of {self.instance}:{path} failed: {exc}") from exc
        with get_file_io(filename_or_io, "wb") as file_io:
            file_io.write(buffer.getvalue())


class IncusConnector(LxdConnector):
    """``@incus/NAME``: the same REST API, Incus's socket and client config."""

    flavour = "incus"

    @override
    @staticmethod
    def make_names_data(name: str | None = None) -> Iterator[tuple[str, dict, list[str]]]:
        return IncusConnector._names(name)
