"""pyinfra connector ``@pct/NODE/VMID``: a Proxmox VE container, reached through its node's ``pct``.

The shape of pyinfra's own ``connectors/dockerssh.py``: the connector owns pyinfra's ``SSHConnector`` to the
node (so the node is reached exactly as ``pyinfra NODE`` would reach it: ``ssh_*`` host data, ``~/.ssh/config``
with ProxyJump, known_hosts) and only wraps commands and files. Every command runs as
``pct exec VMID -- sh -c '<command>'``; files go by pyinfra's SFTP to a private temporary directory on the node
and then ``pct push``/``pct pull`` into or out of the container, each verified by size and sha256 (pct exits 0
when its copy failed). The container needs neither sshd nor a network address. sudo/su/env/chdir are applied
by pyinfra's own command builder. ``connect`` runs ``pct status VMID`` so a missing or stopped container fails
at once with one clear line (or, with ``guest`` host data, is created as declared).

.. code:: shell

    pyinfra @pct/pve1/101 exec -- uname -a
    pyinfra @pct/pve1/101 deploys/base.py
    pyinfra --data ssh_hostname=pve1.example.org --data ssh_key=~/.ssh/pve @pct/pve1/101 exec -- id

An inventory (``inventory.py``) with two containers on one node, given by its DNS name:

.. code:: python

    pve = (
        ["@pct/pve1/101", "@pct/pve1/102"],
        {"ssh_hostname": "pve1.example.org", "ssh_key": "~/.ssh/pve_ed25519"},
    )

NODE may be an alias from ``~/.ssh/config`` (HostName, Port, User, IdentityFile, ProxyJump...). Host keys are
verified against known_hosts by default (``ssh_strict_host_key_checking=yes``); the node's login shell must be
POSIX (bash on Proxmox VE). ``pct_ssh_*`` host data still works until 0.2, with a warning line.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterator
from typing import IO, TYPE_CHECKING, Any

import paramiko
from pyinfra import logger
from pyinfra.api import StringCommand
from pyinfra.api.exceptions import ConnectError, PyinfraError
from pyinfra.api.output import echo, format_text
from pyinfra.api.util import get_file_io
from pyinfra.connectors.base import BaseConnector, DataMeta
from pyinfra.connectors.ssh import SSHConnector
from pyinfra.connectors.util import (
    CommandOutput,
    OutputLine,
    remove_any_sudo_askpass_file,
)
from typing_extensions import TypedDict, Unpack, override

from labwright.connectors._transfer import HandoverTransfer, run_shell, stdin_bytes
from labwright.connectors.names import parsed_for_pyinfra
from labwright.connectors.pct_commands import (
    DIGEST_SCRIPT,
    INSTALL_SCRIPT,
    ct_absolute,
    describe_digest,
    one_line,
    parse_pct_status,
    parse_size_and_sha256,
    pct_exec_script,
    pct_pull_command,
    pct_push_command,
    pct_says_missing,
    pct_status_command,
    pct_transfer_failure,
    then_remove,
)
from labwright.errors import BadInput, LabwrightError
from labwright.guests.declared import ensure_declared, pyinfra_dry_run, spec_for_host
from labwright.hostnames import parse_pct_target
from labwright.hosts import Result
from labwright.hosts.options import DEPRECATED_KEYS, SSH_OPTIONS, endpoint
from labwright.hosts.pct import PctHost
from labwright.hosts.ssh import SshHost
from labwright.shell import join

if TYPE_CHECKING:
    from pyinfra.api.arguments import ConnectorArguments
    from pyinfra.api.host import Host
    from pyinfra.api.state import State



class PctConnectorData(TypedDict, total=False):
    pct_node: str
    pct_vmid: int
    # Deprecated (read until 0.2, each with a warning line): the ssh_* keys below replace them.
    pct_ssh_hostname: str
    pct_ssh_port: int
    pct_ssh_user: str
    pct_ssh_key: str
    pct_ssh_key_password: str
    pct_ssh_known_hosts_file: str
    pct_ssh_strict_host_key_checking: bool | str
    pct_ssh_config_file: str


connector_data_meta: dict[str, DataMeta] = {
    "pct_node": DataMeta("Proxmox VE node name (NODE of @pct/NODE/VMID)"),
    "pct_vmid": DataMeta("Container id (VMID of @pct/NODE/VMID)"),
    **{old: DataMeta(f"Deprecated: use {new}") for old, new in DEPRECATED_KEYS.items()},
}

#: The node's SSH options: pyinfra's ssh_* host data (labwright.hosts.options), read by the owned SSHConnector.
node_data_meta: dict[str, DataMeta] = SSH_OPTIONS


# --- names ------------------------------------------------------------------------------------
def parse_pct_name(name: str | None) -> tuple[str, int]:
    """``NODE/VMID`` -> (node, vmid); one line (an InventoryError) for anything else (labwright.hostnames)."""
    parsed = parsed_for_pyinfra(parse_pct_target, name)
    return parsed.node, parsed.vmid


class HashingReader:
    """Wraps a binary file object; counts and hashes what is read through it."""

    def __init__(self, file_io: IO[Any]):
        self.file_io = file_io
        self.size = 0
        self.sha256 = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self.file_io.read(size)
        if isinstance(data, str):
            data = data.encode()
        self.size += len(data)
        self.sha256.update(data)
        return data


class HashingWriter:
    """Wraps a binary file object; counts and hashes what is written through it."""

    def __init__(self, file_io: IO[bytes]):
        self.file_io = file_io
        self.size = 0
        self.sha256 = hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.size += len(data)
        self.sha256.update(data)
        return self.file_io.write(data)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# --- output -----------------------------------------------------------------------------------
class _LineSplitter:
    def __init__(self, name: str, emit: Callable[[OutputLine], None]):
        self.name = name
        self.emit = emit
        self.pending = b""

    def feed(self, data: bytes) -> None:
        *lines, self.pending = (self.pending + data).split(b"\n")
        for line in lines:
            self.emit(OutputLine(self.name, line.decode("utf-8", errors="replace")))

    def close(self) -> None:
        if self.pending:
            self.emit(OutputLine(self.name, self.pending.decode("utf-8", errors="replace")))
            self.pending = b""


class PctConnector(HandoverTransfer, BaseConnector):
    """Execute in Proxmox VE containers with ``pct`` on their node, over pyinfra's SSH connector.

    Host data: the node's SSH options are pyinfra's (``docs/connectors.md``: the option set):

    + ``ssh_hostname``: address or ssh-config alias of the node (default: NODE)
    + ``ssh_port``, ``ssh_user`` (default: ssh config's User, else root), ``ssh_key`` / ``ssh_key_password``,
      ``ssh_config_file``, ``ssh_known_hosts_file``, ``ssh_strict_host_key_checking`` (default: ssh config's
      StrictHostKeyChecking, else ``yes``: an unknown or changed host key is refused)

    Deprecated, read until 0.2 with a warning line (each is the ``ssh_*`` key of the same name):
    ``pct_ssh_hostname``, ``pct_ssh_port``, ``pct_ssh_user``, ``pct_ssh_key``, ``pct_ssh_key_password``,
    ``pct_ssh_known_hosts_file``, ``pct_ssh_strict_host_key_checking``, ``pct_ssh_config_file``.
    """

    __examples_doc__ = """
    A container by node name and id; the node is an alias in ``~/.ssh/config``:

    .. code:: shell

        pyinfra @pct/pve1/101 exec -- hostname

    Several containers on a node given by its DNS name:

    .. code:: python

        hosts = (
            ["@pct/pve1/101", "@pct/pve1/102"],
            {"ssh_hostname": "pve1.example.org", "ssh_key": "~/.ssh/pve_ed25519"},
        )
    """

    handles_execution = True
    data_cls = PctConnectorData
    data_meta = connector_data_meta
    data: PctConnectorData

    ssh: SSHConnector
    node_ssh: SshHost | None = None

    def __init__(self, state: State, host: Host):
        super().__init__(state, host)
        # The node is reached by pyinfra's own SSH connector with the ssh_* option set (labwright.hosts.options),
        # as pyinfra's dockerssh connector reaches its docker host.
        self.ssh = SSHConnector(state, host)
        self.node_temp_dir: str | None = None
        self.temp_counter = 0

    @override
    @staticmethod
    def make_names_data(name: str | None = None) -> Iterator[tuple[str, dict, list[str]]]:
        node, vmid = parse_pct_name(name)
        yield f"@pct/{node}/{vmid}", {"pct_node": node, "pct_vmid": vmid}, ["@pct"]

    @property
    def node(self) -> str:
        return self.data["pct_node"]

    @property
    def vmid(self) -> int:
        return self.data["pct_vmid"]

    # --- connection ---------------------------------------------------------------------------
    @override
    def connect(self) -> None:
        try:
            self.node_ssh = SshHost.wrapping(self.ssh, self.node, self.host.data, f"node {self.node}")
        except LabwrightError as exc:
            raise ConnectError(f"@pct/{self.node}/{self.vmid}: {exc}") from None
        logger.debug("Connecting to Proxmox node %s (%s) for CT %s", self.node, self.node_ssh.options, self.vmid)
        self.node_ssh.connect()
        try:
            status, reason = self._container_status()
            if status != "running" and self.host.data.get("guest"):
                self._make_declared()
                status, reason = self._container_status()
            if status == "missing":
                raise ConnectError(f"CT {self.vmid} does not exist on node {self.node} (pct: {reason}); declare it "
                                   "with `guest` host data and labwright creates it (docs/guests.md)")
            if status != "running":
                raise ConnectError(f"CT {self.vmid} on node {self.node} is {status or 'in an unknown state'}, "
                                   f"not running; start it with `pct start {self.vmid}`")
        except BaseException:
            self.node_ssh.close()
            raise

    def _container_status(self) -> tuple[str | None, str]:
        """``pct status`` on the node: ("running"|"stopped"|..., "") or ("missing", pct's line)."""
        result = self.run_on_node(pct_status_command(self.vmid))
        stderr = one_line(result.stderr)
        if result.rc == 127 or "pct: not found" in stderr or "pct: command not found" in stderr:
            assert self.node_ssh is not None
            address = endpoint(self.node_ssh.options).hostname
            raise ConnectError(f"node {self.node} ({address}) has no `pct` command: is it a Proxmox VE "
                               "node, and is pct on the SSH user's PATH?")
        if pct_says_missing(result.stderr):
            return "missing", stderr
        if result.rc != 0:
            raise ConnectError(f"`pct status {self.vmid}` failed on node {self.node} "
                               f"(exit {result.rc}): {stderr or one_line(result.stdout)}")
        return parse_pct_status(result.stdout), ""

    def _make_declared(self) -> None:
        """The host declares its guest (``guest`` data) and the CT is missing or stopped: create/start it through
        the Proxmox API as declared (labwright.guests.declared). ``--dry`` creates nothing and says what would be
        made. The API's task can report success before the node shows the CT running, so the result is read back
        with ``pct status`` (connect() checks it), never taken from the task."""
        try:
            spec = spec_for_host(self.host, self.state.inventory)
            if spec is None:
                return
            if spec.backend != "proxmox" or spec.node != self.node or spec.vmid != self.vmid:
                raise BadInput(f"`guest` declares {spec.backend} guest {spec.node}/{spec.vmid}, but this host is "
                               f"@pct/{self.node}/{self.vmid}: make the declaration match the host name")
            ensure_declared(spec, lambda line: logger.warning(f"{self.host.print_prefix}{line}"), pyinfra_dry_run())
        except LabwrightError as exc:
            raise ConnectError(f"@pct/{self.node}/{self.vmid}: {exc}") from exc

    @override
    def disconnect(self) -> None:
        if self.node_ssh is None or not self.node_ssh.connected:
            return
        try:
            # pyinfra removes sudo askpass helpers only after this returns, when the session is gone.
            remove_any_sudo_askpass_file(self.host)
            if self.node_temp_dir:
                self.run_on_node(join(["rm", "-rf", self.node_temp_dir]))
        except (OSError, PyinfraError, paramiko.SSHException) as exc:
            logger.debug("Could not remove %s on node %s: %s", self.node_temp_dir, self.node, exc)
        finally:
            self.node_ssh.close()
            self.node_temp_dir = None

    # --- node commands ------------------------------------------------------------------------
    def run_on_node(self, command: str, stdin: bytes | None = None, timeout: float | None = None) -> Result:
        """Run a command line on the node itself (not in the container); collect its output."""
        if self.node_ssh is None:
            raise ConnectError(f"@pct/{self.node}/{self.vmid} is not connected")
        return self.node_ssh.run(command, stdin=stdin, timeout=timeout)

    @property
    def ct(self) -> PctHost:
        """The container as a :class:`labwright.hosts.Host`: the node's SshHost plus ``pct exec``."""
        if self.node_ssh is None:
            raise ConnectError(f"@pct/{self.node}/{self.vmid} is not connected")
        return PctHost(self.node_ssh, self.vmid, f"CT {self.vmid} on node {self.node}")

    def _sftp(self) -> Any:
        """pyinfra's file transfer client to the node (SFTP unless ssh_file_transfer_protocol says scp)."""
        assert self.node_ssh is not None
        return self.node_ssh.transfer_client()

    def _node_temp_path(self) -> str:
        """A fresh path in a directory only the SSH user can read, made once per connection."""
        if self.node_temp_dir is None:
            result = self.run_on_node("mktemp -d -t labwright-pct.XXXXXXXXXX")
            if result.rc != 0 or not result.stdout.strip():
                raise OSError(f"mktemp on node {self.node} failed: {one_line(result.stderr)}")
            self.node_temp_dir = result.stdout.strip()
        self.temp_counter += 1
        return f"{self.node_temp_dir}/{self.temp_counter}"

    # --- commands in the container ------------------------------------------------------------
    @override
    def run_shell_command(
        self,
        command: StringCommand,
        print_output: bool = False,
        print_input: bool = False,
        **arguments: Unpack[ConnectorArguments],
    ) -> tuple[bool, CommandOutput]:
        def execute(unix_command: StringCommand, control: ConnectorArguments) -> tuple[int, CommandOutput]:
            node_command = self.ct.node_command(unix_command.get_raw_value())
            logger.debug("--> Running on %s via pct exec %s: %s", self.node, self.vmid, unix_command)
            stdin = control.get("_stdin")
            lines: list[OutputLine] = []

            def emit(line: OutputLine) -> None:
                lines.append(line)
                if print_output:
                    text = line.line if line.buffer_name == "stdout" else format_text(line.line, "red")
                    echo(f"{self.host.print_prefix}{text}", err=True)

            out, err = _LineSplitter("stdout", emit), _LineSplitter("stderr", emit)
            if self.node_ssh is None:
                raise ConnectError(f"@pct/{self.node}/{self.vmid} is not connected")
            code = self.node_ssh.stream(node_command, stdin_bytes(stdin) if stdin is not None else None,
                                        control.get("_timeout"), bool(control.get("_get_pty")), out.feed, err.feed)
            out.close()
            err.close()
            logger.debug("--> Command exit status: %i", code)
            return code, CommandOutput(lines)

        ok, _, output = run_shell(self, command, print_input, arguments, execute)
        return ok, output

    # --- files --------------------------------------------------------------------------------
    def _push(self, filename_or_io: str | IO[Any], ct_path: str, perms: str | None = None,
              user: str | None = None) -> None:
        """Copy to ``ct_path`` in the CT, verified: pct push exits 0 even when its copy failed, so the copy lands
        under a staging name beside ``ct_path``, its size and sha256 are checked in the CT against what was
        read here, and only then is it moved over ``ct_path``. On any failure ``ct_path`` is unchanged and no
        staging copy is left."""
        node_path = self._node_temp_path()
        sftp = self._sftp()
        try:
            with get_file_io(filename_or_io) as file_io:
                source = HashingReader(file_io)
                sftp.putfo(source, node_path)  # putfo only calls read()
        except BaseException:
            self._remove_on_node(node_path)
            raise
        sent = (source.size, source.sha256.hexdigest())
        target = ct_absolute(ct_path)
        directory, name = target.rsplit("/", 1)
        staging = f"{directory}/.{name}.labwright-{secrets.token_hex(4)}"
        what = f"pct push {self.vmid} {ct_path} on node {self.node}"
        result = self.run_on_node(then_remove(pct_push_command(self.vmid, node_path, staging, perms, user), node_path))
        failure = pct_transfer_failure(result.rc, result.stderr)
        if failure is not None:
            self._remove_in_ct(staging)
            raise OSError(f"{what} failed: {failure}")
        keep_mode, keep_owner = "1" if perms is None else "0", "1" if user is None else "0"
        check = self.run_on_node(pct_exec_script(self.vmid, INSTALL_SCRIPT, staging, target,
                                                 f"{sent[0]} {sent[1]}", keep_mode, keep_owner))
        if check.rc == 3:
            got = parse_size_and_sha256(check.stdout)
            arrived = describe_digest(*got) if got else "nothing"
            raise OSError(f"{what} failed although pct reported success: sent {describe_digest(*sent)}, the CT got "
                          f"{arrived}; {ct_path} is unchanged")
        if check.rc != 0:
            self._remove_in_ct(staging)
            raise OSError(f"{what} failed: {one_line(check.stderr) or f'exit {check.rc}'}")

    def _pull(self, ct_path: str, filename_or_io: str | IO[Any]) -> None:
        """Copy ``ct_path`` out of the CT, verified: pct pull exits 0 even when its copy failed (a missing file
        leaves an empty one), so the result is checked by size and sha256 against the CT's file and written to
        ``filename_or_io`` only when it matches; a file target is replaced by rename, never left partial."""
        node_path = self._node_temp_path()
        sftp = self._sftp()
        what = f"pct pull {self.vmid} {ct_path} on node {self.node}"
        try:
            result = self.run_on_node(pct_pull_command(self.vmid, ct_path, node_path))
            failure = pct_transfer_failure(result.rc, result.stderr)
            if failure is not None:
                raise OSError(f"{what} failed: {failure}")
            digest = self.run_on_node(pct_exec_script(self.vmid, DIGEST_SCRIPT, ct_absolute(ct_path)))
            in_ct = parse_size_and_sha256(digest.stdout) if digest.rc == 0 else None
            if in_ct is None:
                raise OSError(f"{what}: cannot read size and sha256 of {ct_path} in the CT: "
                              f"{one_line(digest.stderr) or f'exit {digest.rc}'}")
            if isinstance(filename_or_io, str):
                self._pull_to_file(sftp, node_path, filename_or_io, in_ct, what)
            else:
                with tempfile.SpooledTemporaryFile(max_size=8 << 20) as spool:
                    self._receive(sftp, node_path, spool, in_ct, what, "the download")
                    spool.seek(0)
                    with get_file_io(filename_or_io, "wb") as file_io:
                        shutil.copyfileobj(spool, file_io)
        finally:
            self._remove_on_node(node_path)

    def _pull_to_file(self, sftp: Any, node_path: str, local_path: str,
                      expected: tuple[int, str], what: str) -> None:
        """Receive into a temporary file beside ``local_path``; rename it into place only once verified."""
        directory = os.path.dirname(os.path.abspath(local_path))
        fd, partial = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(local_path)}.",
                                       suffix=".labwright-part")
        try:
            with os.fdopen(fd, "wb") as file_io:
                self._receive(sftp, node_path, file_io, expected, what, local_path)
            if os.path.exists(local_path):
                shutil.copymode(local_path, partial)
            else:
                os.chmod(partial, 0o666 & ~_umask())
            os.replace(partial, local_path)
        except BaseException:
            if os.path.exists(partial):
                os.unlink(partial)
            raise

    def _receive(self, sftp: Any, node_path: str, file_io: IO[bytes],
                 expected: tuple[int, str], what: str, destination: str) -> None:
        received = HashingWriter(file_io)
        sftp.getfo(node_path, received)  # getfo only calls write()
        got = (received.size, received.sha256.hexdigest())
        if got != expected:
            raise OSError(f"{what} failed although pct reported success: the CT has {describe_digest(*expected)}, "
                          f"the copy has {describe_digest(*got)}; {destination} not written")

    def _remove_in_ct(self, ct_path: str) -> None:
        try:
            self.ct.run(["rm", "-f", ct_path])
        except (OSError, paramiko.SSHException) as exc:
            logger.warning("Could not remove %s in CT %s: %s", ct_path, self.vmid, exc)

    def _remove_on_node(self, node_path: str) -> None:
        try:
            self.run_on_node(join(["rm", "-f", node_path]))
        except (OSError, paramiko.SSHException) as exc:
            logger.warning("Could not remove %s on node %s: %s", node_path, self.node, exc)
