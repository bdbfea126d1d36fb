"""What the Proxmox backend needs from the node itself, beyond the API: its NVIDIA device nodes and majors,
the ``/etc/pve`` config files (raw ``lxc.*`` lines are not in the API), and the uvm preflight command.

``LocalPveNode`` reads and writes below a root directory: ``/`` when labwright runs on the node,
a temp dir in tests (fake device nodes, and ``etc/pve`` pointing at the simulator's pmxcfs).
``SshPveNode`` does the same over SSH as root, with the host key checked against known_hosts.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import paramiko

from labwright.errors import OperationFailed
from labwright.guests.gpu import DeviceNode, GpuHost, parse_driver_version, parse_proc_devices

#: One shell command that prints everything the GPU wiring needs, so facts cost one SSH round trip.
_FACTS_SCRIPT = (
    "cat /proc/driver/nvidia/version 2>/dev/null; echo '@@devices'; cat /proc/devices; echo '@@nodes'; "
    "for f in /dev/nvidia* /dev/nvidia-caps/*; do [ -c \"$f\" ] && stat -c '%t %T %n' \"$f\"; done; true"
)


@dataclass(frozen=True)
class NodeGpu:
    """A node's NVIDIA facts: driver version (None: no driver), nvidia* majors, character nodes."""

    driver: str | None
    majors: dict[str, int] = field(default_factory=dict)
    nodes: tuple[DeviceNode, ...] = ()

    @property
    def uvm_missing(self) -> bool:
        return self.driver is not None and not any(n.path == "/dev/nvidia-uvm" for n in self.nodes)


def parse_facts(output: str) -> NodeGpu:
    """``NodeGpu`` from ``_FACTS_SCRIPT`` output (``stat -c '%t %T %n'`` prints majors/minors in hex)."""
    version_text, _, rest = output.partition("@@devices\n")
    devices_text, _, nodes_text = rest.partition("@@nodes\n")
    majors = {k: v for k, v in parse_proc_devices(devices_text).items() if k.startswith("nvidia")}
    nodes = []
    for line in nodes_text.splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3:
            nodes.append(DeviceNode(parts[2], parts[2], int(parts[0], 16), int(parts[1], 16)))
    return NodeGpu(parse_driver_version(version_text), majors, tuple(nodes))


class PveNode(Protocol):
    label: str

    def gpu(self) -> NodeGpu: ...

    def read_file(self, path: str) -> str: ...

    def write_file(self, path: str, text: str) -> None: ...

    def run(self, argv: Sequence[str]) -> tuple[int, str]: ...


class LocalPveNode:
    """The node's files below ``root`` on this machine."""

    def __init__(self, root: str | Path = "/", label: str = "this machine"):
        self.root = Path(root)
        self.label = label
        self.ran: list[tuple[str, ...]] = []

    def _path(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    def gpu(self) -> NodeGpu:
        host = GpuHost(self.root)
        return NodeGpu(host.driver_version(), host.majors(), tuple(host.device_nodes()))

    def read_file(self, path: str) -> str:
        try:
            return self._path(path).read_text()
        except OSError as exc:
            raise OperationFailed(f"cannot read {path} on {self.label}: {exc.strerror or exc}") from exc

    def write_file(self, path: str, text: str) -> None:
        target = self._path(path)
        tmp = target.with_name(f".{target.name}.labwright.{os.getpid()}")
        try:
            tmp.write_text(text)
            os.replace(tmp, target)  # pmxcfs, like PVE's own file_set_contents: write aside, then rename
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise OperationFailed(f"cannot write {path} on {self.label}: {exc.strerror or exc}") from exc

    def run(self, argv: Sequence[str]) -> tuple[int, str]:
        self.ran.append(tuple(argv))
        if self.root != Path("/"):
            # Under a test root nothing runs: the command would act on the real host, not the fake tree.
            return 0, ""
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=120, check=False)
        return proc.returncode, (proc.stdout + proc.stderr).strip()


class SshPveNode:
    """The node over SSH (paramiko): ``data`` is the node's inventory host data (``ssh_hostname``,
    ``ssh_port``, ``ssh_user`` (default root), ``ssh_key``, ``ssh_known_hosts_file``), resolved like
    ``@pct`` does; without ``ssh_key``, the ssh config's IdentityFile and the agent are used."""

    def __init__(self, node: str, data: Mapping[str, Any]):
        from labwright.connectors.pct import resolve_ssh_target

        config_path = Path(os.path.expanduser(data.get("ssh_config_file") or "~/.ssh/config"))
        ssh_config = paramiko.SSHConfig.from_path(str(config_path)) if config_path.is_file() else None
        self.target = resolve_ssh_target(node, {
            "pct_ssh_hostname": data.get("ssh_hostname"), "pct_ssh_port": data.get("ssh_port"),
            "pct_ssh_user": data.get("ssh_user"), "pct_ssh_known_hosts_file": data.get("ssh_known_hosts_file"),
        }, ssh_config)
        self.key = os.path.expanduser(str(data["ssh_key"])) if data.get("ssh_key") else None
        self.label = f"node {node} ({self.target.user}@{self.target.hostname})"
        self._client: paramiko.SSHClient | None = None

    def _ssh(self) -> paramiko.SSHClient:
        if self._client is None:
            client = paramiko.SSHClient()
            for known in (self.target.known_hosts_file, "/etc/ssh/ssh_known_hosts"):
                if os.path.isfile(known):
                    client.load_system_host_keys(known)
            client.set_missing_host_key_policy(paramiko.RejectPolicy())
            options: dict[str, Any] = {"key_filename": list(self.target.key_filenames) or None}
            if self.key:  # exactly this key, as @pct does with pct_ssh_key
                options = {"key_filename": [self.key], "allow_agent": False, "look_for_keys": False}
            try:
                client.connect(self.target.hostname, port=self.target.port, username=self.target.user, timeout=15,
                               **options)
            except (OSError, paramiko.SSHException) as exc:
                raise OperationFailed(f"cannot log in to {self.label} over SSH: {exc}; check ssh_hostname/ssh_user "
                                      "in the node's host data and that its host key is in known_hosts") from exc
            self._client = client
        return self._client

    def _exec(self, command: str, stdin: str | None = None) -> tuple[int, str]:
        _, out, err = self._ssh().exec_command(command, timeout=120)
        if stdin is not None:
            out.channel.sendall(stdin.encode())
            out.channel.shutdown_write()
        text = out.read().decode(errors="replace")
        code = out.channel.recv_exit_status()
        return code, text + err.read().decode(errors="replace")

    def gpu(self) -> NodeGpu:
        code, output = self._exec(_FACTS_SCRIPT)
        if code:
            raise OperationFailed(f"reading NVIDIA facts on {self.label} failed: {output.strip()[:200]}")
        return parse_facts(output)

    def read_file(self, path: str) -> str:
        code, output = self._exec(shlex.join(["cat", "--", path]))
        if code:
            raise OperationFailed(f"cannot read {path} on {self.label}: {output.strip()[:200]}")
        return output

    def write_file(self, path: str, text: str) -> None:
        tmp = f"{path}.tmp.labwright"
        code, output = self._exec(f"cat > {shlex.quote(tmp)} && mv -f -- {shlex.quote(tmp)} {shlex.quote(path)}",
                                  stdin=text)
        if code:
            raise OperationFailed(f"cannot write {path} on {self.label}: {output.strip()[:200]}")

    def run(self, argv: Sequence[str]) -> tuple[int, str]:
        return self._exec(shlex.join(argv))

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
