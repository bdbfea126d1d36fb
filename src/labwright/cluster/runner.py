"""How the cluster runbooks reach a node: ``NodeRunner.run(script)``, on the ``hosts`` seam (labwright.hosts).

- ``ssh``: production Proxmox nodes (pyinfra's SSH connector: the ``ssh_*`` option set, ~/.ssh/config with
  ProxyJump, host keys checked unless ``ssh_strict_host_key_checking`` says otherwise).
- ``local``: the node labwright runs on.
- ``lxd``: a node that is an LXD container (the LXD API: ``NAME`` or ``REMOTE:NAME``).
- ``host``: any :class:`labwright.hosts.Host` a Python inventory hands over as ``cluster_host`` (another transport;
  the tests' network-namespace nodes are one, tests/support/corosync_netns.py).

A node comes from inventory host data: ``cluster_host``, ``cluster_lxd``, ``cluster_local``, else SSH to
``ssh_hostname`` (or the host name) as ``ssh_user`` (default root), with ``ssh_port``, ``ssh_key``,
``ssh_known_hosts_file`` and the rest of the option set as every SSH path in labwright reads them
(docs/connectors.md).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pyinfra.api.exceptions import ConnectError

from labwright.errors import BadInput
from labwright.hosts import Host, Result
from labwright.hosts.local import LocalHost
from labwright.hosts.lxd import LxdHost
from labwright.hosts.options import SSH_OPTIONS
from labwright.hosts.ssh import SshHost
from labwright.schema.checks import host_problem, port

__all__ = ["NodeRunner", "Result", "runner_from_data"]


@dataclass
class NodeRunner:
    name: str
    kind: str  # ssh | local | lxd | host
    target: str = ""  # ssh host or LXD container
    user: str = "root"
    port: int | None = None  # ssh: ssh_port
    key: str = ""  # ssh: ssh_key (exactly this key)
    known_hosts: str = ""  # ssh: ssh_known_hosts_file (host keys are always checked)
    ssh_data: dict[str, Any] = field(default_factory=dict)  # ssh: the node's whole ssh_* option set
    given: Host | None = field(default=None, repr=False, compare=False)  # host: the Host itself
    _host: Host | None = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def on(cls, name: str, host: Host) -> NodeRunner:
        """Node ``name`` reached through ``host`` (any :class:`labwright.hosts.Host`)."""
        return cls(name, "host", host.label, given=host)

    def body(self, script: str) -> str:
        return "export PATH=$PATH:/usr/sbin:/sbin; " + script

    def host(self) -> Host:
        """The node on the ``hosts`` seam (made once, kept for the runner's later commands)."""
        if self._host is None:
            if self.kind == "host" and self.given is not None:
                self._host = self.given
            elif self.kind == "local":
                self._host = LocalHost(label=f"node {self.name}")
            elif self.kind == "lxd":
                self._host = LxdHost(self.target)
            elif self.kind == "ssh":
                data = {"ssh_user": self.user, "ssh_port": self.port, "ssh_key": self.key or None,
                        "ssh_known_hosts_file": self.known_hosts or None, **self.ssh_data}
                self._host = SshHost.open(self.target, data, label=f"node {self.name}")
            else:
                raise BadInput(f"node {self.name}: unknown connection kind {self.kind!r}; use ssh, local, lxd or a "
                               "cluster_host")
        return self._host

    def run(self, script: str, timeout: float = 30) -> Result:
        """Run ``script`` on the node; an unreachable node is exit 255 with the reason on stderr (as ssh reports
        it), a deadline passed is exit 124."""
        try:
            return self.host().run(self.body(script), timeout=timeout)
        except ConnectError as exc:
            return Result(255, "", str(exc))
        except TimeoutError:
            return Result(124, "", f"timed out after {timeout:.0f}s")

    def close(self) -> None:
        if self._host is not None:
            self._host.close()
            self._host = None


def runner_from_data(name: str, data: Mapping[str, Any]) -> NodeRunner:
    given = data.get("cluster_host")
    if given is not None:
        if not all(callable(getattr(given, m, None)) for m in ("run", "put", "get", "close")):
            raise BadInput(f"node {name}: cluster_host is a {type(given).__name__}, not a labwright.hosts.Host "
                           "(run/put/get/close); give one from a Python inventory, or use ssh_hostname")
        return NodeRunner.on(name, given)
    if data.get("cluster_lxd"):
        return NodeRunner(name, "lxd", str(data["cluster_lxd"]))
    if data.get("cluster_local"):
        return NodeRunner(name, "local")
    ssh_data = {key: data[key] for key in SSH_OPTIONS if data.get(key) is not None}
    # checked where the inventory enters, before any node is dialled (sweep at 2b91fd1: ssh_port 'abc' was a
    # traceback, 99999 accepted; a host name starting with '-' reaches ssh as an option)
    hostname = str(data.get("ssh_hostname") or name)
    problem = host_problem(hostname)
    if problem is not None:
        raise BadInput(f"node {name}: ssh_hostname {problem}; give the node's address or DNS name")
    try:
        port_number = port(data["ssh_port"]) if data.get("ssh_port") not in (None, "") else None
    except ValueError as exc:
        raise BadInput(f"node {name}: ssh_port: {exc}") from None
    return NodeRunner(name, "ssh", hostname, user=str(data.get("ssh_user") or "root"),
                      port=port_number,
                      key=os.path.expanduser(str(data["ssh_key"])) if data.get("ssh_key") else "",
                      known_hosts=os.path.expanduser(str(data.get("ssh_known_hosts_file") or "")), ssh_data=ssh_data)
