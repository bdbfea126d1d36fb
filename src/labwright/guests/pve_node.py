"""What the Proxmox backend needs from the node itself, beyond the API: its NVIDIA device nodes and majors,
the ``/etc/pve`` config files (raw ``lxc.*`` lines are not in the API), and the uvm preflight command.

``LocalPveNode`` reads and writes through a ``labwright.hosts.Host``: this machine's ``LocalHost`` when labwright
runs on the node, a double over a tree in tests (fake device nodes, and ``etc/pve`` pointing at the simulator's
pmxcfs: tests/support/host_tree.py).
``SshPveNode`` does the same over SSH (the ``hosts`` seam: pyinfra's SSH connector, the ``ssh_*`` option set) as
root by default, with the host key checked against known_hosts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from pyinfra.api.exceptions import ConnectError

from labwright.errors import LabwrightError, OperationFailed
from labwright.gpu.dri import DRI_FACTS_SCRIPT, DriFacts, parse_dri_facts, read_dri
from labwright.gpu.nvidia.host import NODE_FACTS_SCRIPT, GpuHost, NodeGpu, parse_node_facts
from labwright.hosts import Host, Result
from labwright.hosts.local import LocalHost
from labwright.hosts.options import endpoint
from labwright.hosts.ssh import SshHost


class PveNode(Protocol):
    label: str

    def gpu(self) -> NodeGpu: ...

    def dri(self) -> DriFacts: ...

    def read_file(self, path: str) -> str: ...

    def write_file(self, path: str, text: str) -> None: ...

    def run(self, argv: Sequence[str]) -> Result: ...


class LocalPveNode(GpuHost):
    """The node's files and commands through ``host`` (this machine): GpuHost's, with the node's label."""

    def __init__(self, host: Host | None = None, label: str = "this machine"):
        super().__init__(host if host is not None else LocalHost(label=label))
        self.label = label

    def gpu(self) -> NodeGpu:
        return NodeGpu(self.driver_version(), self.majors(), tuple(self.device_nodes()))

    def dri(self) -> DriFacts:
        """The node's AMD/Intel GPUs: its /sys/class/drm, /dev/dri and /dev/kfd."""
        return read_dri(self.host)


class SshPveNode:
    """The node over SSH through the ``hosts`` seam (pyinfra's SSH connector): ``data`` is the node's inventory
    host data, the ``ssh_*`` option set (``ssh_hostname``, ``ssh_port``, ``ssh_user`` (default root),
    ``ssh_key``, ``ssh_known_hosts_file``, ``ssh_config_file``...); ~/.ssh/config (ProxyJump too) and the agent
    apply, and host keys are checked (``ssh_strict_host_key_checking`` default yes)."""

    def __init__(self, node: str, data: Mapping[str, Any]):
        try:
            self._host = SshHost.open(node, data, label=f"node {node}")
        except LabwrightError as exc:
            raise OperationFailed(f"node {node}: {exc}") from exc
        target = endpoint(self._host.options)
        self.label = f"node {node} ({target.user}@{target.hostname})"
        self._host.label = self.label

    def _login_failed(self, exc: BaseException) -> OperationFailed:
        if isinstance(exc, ConnectError):
            return OperationFailed(f"cannot log in to {self.label} over SSH: {exc}; check ssh_hostname/ssh_user in "
                                   "the node's host data and that its host key is in known_hosts")
        return OperationFailed(f"{self.label}: {exc}")

    def run(self, argv: Sequence[str] | str) -> Result:
        """A command on the node (an argv, or a shell line); OperationFailed when the node cannot be reached."""
        try:
            return self._host.run(argv, timeout=120)
        except (ConnectError, TimeoutError) as exc:
            raise self._login_failed(exc) from exc

    def gpu(self) -> NodeGpu:
        result = self.run(NODE_FACTS_SCRIPT)
        if not result.ok:
            raise OperationFailed(f"reading NVIDIA facts on {self.label} failed: "
                                  f"{(result.stdout + result.stderr).strip()[:200]}")
        return parse_node_facts(result.stdout)

    def dri(self) -> DriFacts:
        """The node's AMD/Intel GPUs in one round trip (labwright.gpu.dri.DRI_FACTS_SCRIPT)."""
        result = self.run(DRI_FACTS_SCRIPT)
        if not result.ok:
            raise OperationFailed(f"reading /sys/class/drm on {self.label} failed: "
                                  f"{(result.stdout + result.stderr).strip()[:200]}")
        return parse_dri_facts(result.stdout)

    def read_file(self, path: str) -> str:
        """``path``'s text, through the seam's ``get`` (pyinfra's SFTP/SCP client)."""
        try:
            return self._host.get(path).decode()
        except ConnectError as exc:
            raise self._login_failed(exc) from exc
        except (OSError, UnicodeDecodeError) as exc:
            raise OperationFailed(f"cannot read {path} on {self.label}: {exc}") from exc

    def write_file(self, path: str, text: str) -> None:
        """``path`` replaced whole: the seam's ``put`` writes a copy beside it, then one rename moves it over (a
        reader of /etc/pve never sees half a config)."""
        tmp = f"{path}.tmp.labwright"
        try:
            self._host.put(text.encode(), tmp)
        except ConnectError as exc:
            raise self._login_failed(exc) from exc
        except OSError as exc:
            raise OperationFailed(f"cannot write {path} on {self.label}: {exc}") from exc
        result = self.run(["mv", "-f", "--", tmp, path])
        if not result.ok:
            self.run(["rm", "-f", "--", tmp])
            raise OperationFailed(f"cannot write {path} on {self.label}: "
                                  f"{(result.stdout + result.stderr).strip()[:200]}")

    def close(self) -> None:
        self._host.close()
