"""How the cluster runbooks reach a node: one small abstraction, ``NodeRunner.run(script)``.

- ``ssh``: production Proxmox nodes (``ssh -o BatchMode=yes root@HOST sh -c SCRIPT``).
- ``local``: the node labwright runs on.
- ``lxd``: a node that is an LXD container (``lxc exec NAME -- sh -c SCRIPT``).
- ``netns``: a node that is a network namespace on this machine, with its own /etc/corosync, /run,
  /var/lib/corosync, /var/log/corosync (bind mounts of ``ROOT/...``) and a shared /etc/pve; what the
  tests and the benchmark use (corosync's tools talk over abstract unix sockets, which are per
  network namespace). /etc is overlaid with a private tmpfs in each call so /etc/pve can be mounted
  without touching the host's /etc.

A node comes from inventory host data: ``cluster_netns`` + ``cluster_root`` (+ ``cluster_pve_dir``),
``cluster_lxd``, ``cluster_local``, else SSH to ``ssh_hostname`` (or the host name) as ``ssh_user``
(default root), with ``ssh_port``, ``ssh_key`` and ``ssh_known_hosts_file`` as the other SSH paths in
labwright read them (OpenSSH's client: ~/.ssh/config and the agent apply; host keys are always checked).
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from labwright.errors import BadInput


@dataclass(frozen=True)
class Result:
    rc: int
    stdout: str
    stderr: str


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

    def argv(self, script: str) -> list[str]:
        exports = "".join(f"export {k}={shlex.quote(v)}; " for k, v in self.env.items())
        path = f"export PATH={shlex.quote(self.extra_path)}:$PATH:/usr/sbin:/sbin; " if self.extra_path else \
            "export PATH=$PATH:/usr/sbin:/sbin; "
        body = path + exports + script
        if self.kind == "local":
            return ["sh", "-c", body]
        if self.kind == "ssh":
            opts = ["-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "-o", "StrictHostKeyChecking=yes"]
            if self.port:
                opts += ["-p", str(self.port)]
            if self.key:
                opts += ["-i", self.key, "-o", "IdentitiesOnly=yes"]
            if self.known_hosts:
                opts += ["-o", f"UserKnownHostsFile={self.known_hosts}"]
            return ["ssh", *opts, f"{self.user}@{self.target}", "sh -c " + shlex.quote(body)]
        if self.kind == "lxd":
            return ["lxc", "exec", self.target, "--", "sh", "-c", body]
        if self.kind == "netns":
            return ["ip", "netns", "exec", self.target, "sh", "-c", netns_prelude(self.root, self.pve_dir) + body]
        raise BadInput(f"node {self.name}: unknown connection kind {self.kind!r}; use ssh, local, lxd or netns")

    def run(self, script: str, timeout: float = 30) -> Result:
        try:
            proc = subprocess.run(self.argv(script), capture_output=True, text=True, timeout=timeout,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return Result(124, "", f"timed out after {timeout:.0f}s")
        except FileNotFoundError as exc:
            return Result(127, "", f"{exc.filename}: not found")
        return Result(proc.returncode, proc.stdout, proc.stderr)


def netns_prelude(root: str, pve_dir: str) -> str:
    """Shell lines that give this call (``ip netns exec`` runs it in a private mount namespace) the node's
    own corosync directories and /etc/pve, as the notes' recipe does for ``corosync -f``."""
    r = shlex.quote(root)
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
        lines.append(f"mount --bind {shlex.quote(pve_dir)} /etc/pve")
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
    return NodeRunner(name, "ssh", str(data.get("ssh_hostname") or name), user=str(data.get("ssh_user") or "root"),
                      extra_path=extra, env=env, port=int(data["ssh_port"]) if data.get("ssh_port") else None,
                      key=os.path.expanduser(str(data["ssh_key"])) if data.get("ssh_key") else "",
                      known_hosts=os.path.expanduser(str(data.get("ssh_known_hosts_file") or "")))
