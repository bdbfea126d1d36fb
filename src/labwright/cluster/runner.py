"""How the cluster runbooks reach a node: ``NodeRunner.run(script)``, on the ``hosts`` seam (labwright.hosts).

- ``ssh``: production Proxmox nodes (pyinfra's SSH connector: the ``ssh_*`` option set, ~/.ssh/config with
  ProxyJump, host keys checked unless ``ssh_strict_host_key_checking`` says otherwise).
- ``local``: the node labwright runs on.
- ``lxd``: a node that is an LXD container (the LXD API: ``NAME`` or ``REMOTE:NAME``).
- ``netns``: a node that is a network namespace on this machine, with its own /etc/corosync, /run,
  /var/lib/corosync, /var/log/corosync (bind mounts of ``ROOT/...``) and a shared /etc/pve; what the
  tests and the benchmark use (corosync's tools talk over abstract unix sockets, which are per
  network namespace). /etc is overlaid with a private tmpfs in each call so /etc/pve can be mounted
  without touching the host's /etc.

A node comes from inventory host data: ``cluster_netns`` + ``cluster_root`` (+ ``cluster_pve_dir``),
``cluster_lxd``, ``cluster_local``, else SSH to ``ssh_hostname`` (or the host name) as ``ssh_user``
(default root), with ``ssh_port``, ``ssh_key``, ``ssh_known_hosts_file`` and the rest of the option set as every
SSH path in labwright reads them (docs/connectors.md).
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
from labwright.shell import quote

__all__ = ["NodeRunner", "Result", "netns_prelude", "runner_from_data"]


@dataclass
class NodeRunner:
    name: str
    kind: str  # ssh | local | lxd | netns
    target: str = ""  # ssh host, LXD container or netns name
    user: str = "root"
    root: str = ""  # netns: the node's directory (etc/corosync, run, var/lib/corosync, var/log/corosync)
    pve_dir: str = ""  # netns: the directory mounted as /etc/pve (one shared by all nodes: pmxcfs' stand-in)
    extra_path: str = ""  # prepended to PATH on the node (the tests' pvecm stand-in)
    env: dict[str, str] = field(default_factory=dict)
    port: int | None = None  # ssh: ssh_port
    key: str = ""  # ssh: ssh_key (exactly this key)
    known_hosts: str = ""  # ssh: ssh_known_hosts_file (host keys are always checked)
    ssh_data: dict[str, Any] = field(default_factory=dict)  # ssh: the node's whole ssh_* option set
    _host: Host | None = field(default=None, init=False, repr=False, compare=False)

    def body(self, script: str) -> str:
        exports = "".join(f"export {k}={quote(v)}; " for k, v in self.env.items())
        path = f"export PATH={quote(self.extra_path)}:$PATH:/usr/sbin:/sbin; " if self.extra_path else \
            "export PATH=$PATH:/usr/sbin:/sbin; "
        prelude = netns_prelude(self.root, self.pve_dir) if self.kind == "netns" else ""
        return prelude + path + exports + script

    def host(self) -> Host:
        """The node on the ``hosts`` seam (made once, kept for the runner's later commands)."""
        if self._host is None:
            if self.kind == "local":
                self._host = LocalHost(label=f"node {self.name}")
            elif self.kind == "netns":
                self._host = LocalHost(["ip", "netns", "exec", self.target], label=f"node {self.name}")
            elif self.kind == "lxd":
                self._host = LxdHost(self.target)
            elif self.kind == "ssh":
                data = {"ssh_user": self.user, "ssh_port": self.port, "ssh_key": self.key or None,
                        "ssh_known_hosts_file": self.known_hosts or None, **self.ssh_data}
                self._host = SshHost.open(self.target, data, label=f"node {self.name}")
            else:
                raise BadInput(f"node {self.name}: unknown connection kind {self.kind!r}; use ssh, local, lxd or netns")
        return self._host

    def argv(self, script: str) -> list[str]:
        """The local command line running ``script`` on a ``local`` or ``netns`` node (what a long-lived
        process such as ``corosync -f`` is started with)."""
        host = self.host()
        if not isinstance(host, LocalHost):
            raise BadInput(f"node {self.name}: a {self.kind} node has no local command line")
        return host.argv(self.body(script))

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


def netns_prelude(root: str, pve_dir: str) -> str:
    """Shell lines that give this call (``ip netns exec`` runs it in a private mount namespace) the node's
    own corosync directories and /etc/pve, as the notes' recipe does for ``corosync -f``."""
    r = quote(root)
    lines = [
        "set -e",
        # A private /etc: overlay on a tmpfs (per call), so /etc/pve can exist without touching the host's /etc.
        f"mount -t tmpfs lwc-etc {r}/ovl",
        f"mkdir -p {r}/ovl/u/pve {r}/ovl/u/corosync {r}/ovl/w",
        f"mount -t overlay lwc-etc -o lowerdir=/etc,upperdir={r}/ovl/u,workdir={r}/ovl/w /etc",
        f"mount --bind {r}/etc/corosync /etc/corosync",
        f"mount --bind {r}/run /run",
        f"mount --bind {r}/var/lib/corosync /var/lib/corosync",
        f"mount --bind {r}/var/log/corosync /var/log/corosync",
    ]
    if pve_dir:
        lines.append(f"mount --bind {quote(pve_dir)} /etc/pve")
    lines.append("set +e")
    return "\n".join(lines) + "\n"


def runner_from_data(name: str, data: Mapping[str, Any]) -> NodeRunner:
    extra = str(data.get("cluster_path", ""))
    env = {str(k): str(v) for k, v in (data.get("cluster_env") or {}).items()}
    if data.get("cluster_netns"):
        if not data.get("cluster_root"):
            raise BadInput(f"node {name}: cluster_netns needs cluster_root (the node's directory); add it")
        return NodeRunner(name, "netns", str(data["cluster_netns"]), root=str(data["cluster_root"]),
                          pve_dir=str(data.get("cluster_pve_dir", "")), extra_path=extra, env=env)
    if data.get("cluster_lxd"):
        return NodeRunner(name, "lxd", str(data["cluster_lxd"]), extra_path=extra, env=env)
    if data.get("cluster_local"):
        return NodeRunner(name, "local", extra_path=extra, env=env)
    ssh_data = {key: data[key] for key in SSH_OPTIONS if data.get(key) is not None}
    return NodeRunner(name, "ssh", str(data.get("ssh_hostname") or name), user=str(data.get("ssh_user") or "root"),
                      extra_path=extra, env=env, port=int(data["ssh_port"]) if data.get("ssh_port") else None,
                      key=os.path.expanduser(str(data["ssh_key"])) if data.get("ssh_key") else "",
                      known_hosts=os.path.expanduser(str(data.get("ssh_known_hosts_file") or "")), ssh_data=ssh_data)
