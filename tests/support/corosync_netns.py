"""A real corosync 3 cluster in network namespaces on this machine, for tests and the benchmark.

One namespace per node, veth pairs into a bridge that lives in its own namespace (the host gets no
address or route), knet + crypto. Each node has its own /etc/corosync, /run, /var/lib/corosync and
/var/log/corosync (bind mounts of ``ROOT/NODE/...``) and all nodes share one ``ROOT/pve`` as /etc/pve
(plain directories stand in for Proxmox's pmxcfs, which is not in Debian). Recipe: the notes'
testbed-cluster-flash-desktop.md.

Each node is a :class:`NetnsHost`, a Host double the cluster runbooks get through their normal seam: ``NodeRunner.on``
here, ``cluster_host`` host data in the inventory the CLI reads (labwright.cluster.runner).

``close()`` kills every corosync it started and deletes the namespaces, also after a failure.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from labwright.cluster.runner import NodeRunner
from labwright.hosts import shell_line
from labwright.hosts.local import LocalHost
from labwright.shell import quote
from labwright.testing.waiting import wait_for

SUBNET = os.environ.get("LABWRIGHT_CLUSTER_SUBNET", "10.98.7")  # /24; not the LXD test lab's 10.99.9.0/24
REPO = Path(__file__).resolve().parents[2]
DOUBLES = REPO / "tests" / "support" / "doubles"

CONF_TEMPLATE = """\
totem {{
  version: 2
  cluster_name: {cluster}
  config_version: {version}
  transport: knet
  crypto_cipher: aes256
  crypto_hash: sha256
  token: 1000
  join: 50
  interface {{
    linknumber: 0
  }}
}}

nodelist {{
{nodes}
}}

quorum {{
  provider: corosync_votequorum
}}

logging {{
  to_logfile: yes
  logfile: /var/log/corosync/corosync.log
  to_syslog: no
  to_stderr: no
  timestamp: on
}}
"""
NODE_TEMPLATE = """\
  node {{
    name: {name}
    nodeid: {nodeid}
    quorum_votes: 1
    ring0_addr: {addr}
  }}"""


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(argv), capture_output=True, text=True)
    if check and proc.returncode:
        raise RuntimeError(f"{' '.join(argv)}: exit {proc.returncode}: {proc.stderr.strip()}")
    return proc


def make_conf(names: list[str], version: int, cluster: str = "lwtest", subnet: str = SUBNET) -> str:
    nodes = "\n".join(NODE_TEMPLATE.format(name=n, nodeid=i + 1, addr=f"{subnet}.{i + 1}") for i, n in enumerate(names))
    return CONF_TEMPLATE.format(cluster=cluster, version=version, nodes=nodes)



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


class NetnsHost(LocalHost):
    """A cluster node that is a network namespace on this machine: every command runs through ``ip netns exec NS``
    after ``netns_prelude`` (the node's own /etc/corosync, /run, /var/lib/corosync, /var/log/corosync below
    ``root``, ``pve_dir`` as /etc/pve), with ``path`` first on PATH (the pvecm stand-in) and ``env`` exported.
    corosync's tools talk over abstract unix sockets, which are per network namespace."""

    def __init__(self, ns: str, root: str, pve_dir: str = "", path: str = "", env: dict[str, str] | None = None,
                 label: str = ""):
        super().__init__(["ip", "netns", "exec", ns], label=label or f"netns {ns}")
        self.ns, self.root, self.pve_dir, self.path, self.env = ns, root, pve_dir, path, dict(env or {})

    def argv(self, command: str | Sequence[str]) -> list[str]:
        """The local command line (``corosync -f`` is started with it; ``run`` uses it too)."""
        path = f"export PATH={quote(self.path)}:$PATH:/usr/sbin:/sbin; " if self.path else \
            "export PATH=$PATH:/usr/sbin:/sbin; "
        exports = "".join(f"export {k}={quote(v)}; " for k, v in self.env.items())
        return super().argv(netns_prelude(self.root, self.pve_dir) + path + exports + shell_line(command))

@dataclass
class NetnsCluster:
    root: Path
    names: list[str]
    tag: str
    subnet: str = SUBNET
    namespaces: list[str] = field(default_factory=list)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def pve_dir(self) -> Path:
        return self.root / "pve"

    @property
    def bridge_ns(self) -> str:
        return f"lwc-{self.tag}-br"

    def ns(self, name: str) -> str:
        return f"lwc-{self.tag}-{name}"

    def addr(self, name: str) -> str:
        return f"{self.subnet}.{self.names.index(name) + 1}"

    def node_dir(self, name: str) -> Path:
        return self.root / "nodes" / name

    def host(self, name: str, with_standin: bool = True) -> NetnsHost:
        return NetnsHost(self.ns(name), str(self.node_dir(name)), str(self.pve_dir),
                         path=str(DOUBLES) if with_standin else "",
                         env={"PVECM_STANDIN_PEERS": str(self.root / "peers")}, label=f"node {name}")

    def runner(self, name: str, with_standin: bool = True) -> NodeRunner:
        return NodeRunner.on(name, self.host(name, with_standin))

    def runners(self) -> list[NodeRunner]:
        return [self.runner(n) for n in self.names]

    def inventory_text(self) -> str:
        """A pyinfra inventory with a ``cluster`` group describing these nodes: each one's ``cluster_host`` is its
        NetnsHost (a Python inventory hands the runbooks a Host; this module is imported from the tests' folder, so
        the file works in a child process too)."""
        peers = {"PVECM_STANDIN_PEERS": str(self.root / "peers")}
        hosts = ",\n".join(
            f'    ("{n}", {{"cluster_host": _NetnsHost({self.ns(n)!r}, {str(self.node_dir(n))!r}, '
            f'{str(self.pve_dir)!r}, path={str(DOUBLES)!r}, env={peers!r}, label={"node " + n!r})}})'
            for n in self.names)
        return (f"import sys as _sys\n_sys.path.insert(0, {str(REPO / 'tests')!r})\n"
                f"from support.corosync_netns import NetnsHost as _NetnsHost  # noqa: E402\n\n"
                f"cluster = [\n{hosts},\n]\n")

    # -- setup ---------------------------------------------------------------------------------------------
    def create(self, version: int = 4) -> None:
        key = self.root / "authkey"
        sh("corosync-keygen", "-k", str(key))
        conf = make_conf(self.names, version, subnet=self.subnet)
        (self.pve_dir / "nodes").mkdir(parents=True, exist_ok=True)
        (self.pve_dir / "corosync.conf").write_text(conf)
        (self.root / "peers").mkdir(exist_ok=True)
        self.namespaces.append(self.bridge_ns)
        sh("ip", "netns", "add", self.bridge_ns)
        sh("ip", "-n", self.bridge_ns, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", self.bridge_ns, "link", "set", "br0", "up")
        for i, name in enumerate(self.names):
            d = self.node_dir(name)
            for sub in ("etc/corosync", "run", "var/lib/corosync", "var/log/corosync", "ovl"):
                (d / sub).mkdir(parents=True, exist_ok=True)
            (d / "etc/corosync/corosync.conf").write_text(conf)
            shutil.copy(key, d / "etc/corosync/authkey")
            os.chmod(d / "etc/corosync/authkey", 0o400)
            (self.pve_dir / "nodes" / name / "qemu-server").mkdir(parents=True, exist_ok=True)
            (self.pve_dir / "nodes" / name / "lxc").mkdir(parents=True, exist_ok=True)
            # pvecm stand-in's view of "ssh LEAD": the lead's /etc/corosync, by address.
            (self.root / "peers" / self.addr(name)).symlink_to(d / "etc/corosync")
            ns = self.ns(name)
            self.namespaces.append(ns)
            sh("ip", "netns", "add", ns)
            sh("ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", f"p{i}", "netns", self.bridge_ns)
            sh("ip", "-n", self.bridge_ns, "link", "set", f"p{i}", "master", "br0", "up")
            sh("ip", "-n", ns, "addr", "add", f"{self.addr(name)}/24", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")

    def start(self, name: str) -> None:
        """``corosync -f`` in the node's namespace with its bind mounts (as the notes' recipe)."""
        proc = subprocess.Popen(self.host(name, with_standin=False).argv("exec corosync -f"),
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        self.procs.append(proc)

    def pid(self, name: str) -> int | None:
        for p in self.procs:  # reap the corosyncs we started that have exited (no zombie left looking alive)
            p.poll()
        try:
            pid = int((self.node_dir(name) / "run/corosync.pid").read_text().strip())
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
            zombie = ") Z " in Path(f"/proc/{pid}/stat").read_text()
        except (OSError, ValueError):
            return None
        return pid if comm == "corosync" and not zombie else None

    def stop(self, name: str, timeout: float = 15) -> None:
        pid = self.pid(name)
        if pid is None:
            return
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while self.pid(name) is not None and time.monotonic() < deadline:
            time.sleep(0.1)
        if self.pid(name) is not None:
            os.kill(pid, signal.SIGKILL)
            wait_for(f"corosync of {name} (pid {pid}) to be gone after SIGKILL", lambda: self.pid(name) is None,
                     timeout=timeout, every=0.05)

    def quorate(self, name: str) -> tuple[bool, int]:
        res = self.runner(name, with_standin=False).run("corosync-quorumtool -s", timeout=10)
        nodes = next((int(line.split()[1]) for line in res.stdout.splitlines() if line.startswith("Nodes:")), 0)
        return res.rc == 0, nodes

    def wait_members(self, names: list[str], count: int, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(self.quorate(n) == (True, count) for n in names):
                return
            time.sleep(0.3)
        raise AssertionError(f"corosync: {names} did not form a {count}-node quorate membership in {timeout:.0f}s: "
                             f"{[(n, self.quorate(n)) for n in names]}")

    def set_version(self, names: list[str], version: int, reload: bool = True) -> None:
        """Write ``version`` into these nodes' corosync.conf and /etc/pve's, then ``corosync-cfgtool -R``."""
        from labwright.cluster.conf import render_conf
        for n in names:
            p = self.node_dir(n) / "etc/corosync/corosync.conf"
            p.write_text(render_conf(p.read_text(), version))
        pve = self.pve_dir / "corosync.conf"
        pve.write_text(render_conf(pve.read_text(), version))
        if reload:
            res = self.runner(names[0], with_standin=False).run("corosync-cfgtool -R", timeout=15)
            if res.rc:
                raise RuntimeError(f"corosync-cfgtool -R: {res.stdout}{res.stderr}")

    # -- QDevice: corosync-qnetd in its own namespace, corosync-qdevice on every node --------------------------
    QNETD = "qnetd"

    @property
    def qnetd_addr(self) -> str:
        return f"{self.subnet}.250"

    def qnetd_host(self) -> NetnsHost:
        return NetnsHost(self.ns(self.QNETD), str(self.node_dir(self.QNETD)), label=f"node {self.QNETD}")

    def qnetd_runner(self) -> NodeRunner:
        return NodeRunner.on(self.QNETD, self.qnetd_host())

    def _must(self, runner: NodeRunner, script: str) -> str:
        res = runner.run(script, timeout=60)
        if res.rc:
            raise RuntimeError(f"{runner.name}: {script!r}: exit {res.rc}: {(res.stderr or res.stdout).strip()}")
        return res.stdout

    def add_qdevice(self, timeout: float = 60) -> None:
        """A QDevice (model net, ffsplit) as ``pvecm qdevice setup`` makes one (pve-cluster src/PVE/CLI/pvecm.pm
        86-292): qnetd's CA and server certificate, each node's client certificate signed by qnetd
        (corosync-qdevice-net-certutil -i/-r/-M/-m, corosync-qnetd-certutil -i/-s), the quorum.device block in
        every corosync.conf, a reload, then corosync-qdevice on every node. Waits until each node counts its vote."""
        qn = self.QNETD
        d = self.node_dir(qn)
        for sub in ("etc/corosync", "run/corosync-qnetd", "var/lib/corosync", "var/log/corosync", "ovl"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        ns = self.ns(qn)
        self.namespaces.append(ns)
        sh("ip", "netns", "add", ns)
        sh("ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", "pq", "netns", self.bridge_ns)
        sh("ip", "-n", self.bridge_ns, "link", "set", "pq", "master", "br0", "up")
        sh("ip", "-n", ns, "addr", "add", f"{self.qnetd_addr}/24", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        qnetd = self.qnetd_runner()
        self._must(qnetd, "corosync-qnetd-certutil -i")
        self.procs.append(subprocess.Popen(self.qnetd_host().argv("exec corosync-qnetd -f"), stdin=subprocess.DEVNULL,
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                           start_new_session=True))
        cluster = "lwtest"
        qnetd_db = d / "etc/corosync/qnetd/nssdb"
        first = self.names[0]
        node_db = self.node_dir(first) / "etc/corosync/qdevice/net/nssdb"
        r1 = self.runner(first, with_standin=False)
        self._must(r1, f"corosync-qdevice-net-certutil -i -c {qnetd_db}/qnetd-cacert.crt")
        self._must(r1, f"corosync-qdevice-net-certutil -r -n {cluster}")
        self._must(qnetd, f"corosync-qnetd-certutil -s -c {node_db}/qdevice-net-node.crq -n {cluster}")
        self._must(r1, f"corosync-qdevice-net-certutil -M -c {qnetd_db}/cluster-{cluster}.crt")
        for name in self.names[1:]:
            r = self.runner(name, with_standin=False)
            self._must(r, f"corosync-qdevice-net-certutil -i -c {qnetd_db}/qnetd-cacert.crt")
            self._must(r, f"corosync-qdevice-net-certutil -m -c {node_db}/qdevice-net-node.p12")
        device = (f"  device {{\n    model: net\n    votes: 1\n    net {{\n      tls: on\n"
                  f"      host: {self.qnetd_addr}\n      algorithm: ffsplit\n    }}\n  }}\n")
        from labwright.cluster.conf import parse_conf, render_conf
        pve = self.pve_dir / "corosync.conf"
        text = pve.read_text()
        version = parse_conf(text).config_version + 1
        provider = "  provider: corosync_votequorum\n"
        text = render_conf(text.replace(provider, provider + device), version)
        pve.write_text(text)
        for name in self.names:
            (self.node_dir(name) / "etc/corosync/corosync.conf").write_text(text)
        self._must(r1, "corosync-cfgtool -R")
        for name in self.names:
            (self.node_dir(name) / "run/corosync-qdevice").mkdir(exist_ok=True)
            argv = self.host(name, with_standin=False).argv("exec corosync-qdevice -f")
            self.procs.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                               stderr=subprocess.DEVNULL, start_new_session=True))
        self.wait_qdevice_votes(self.names, timeout)

    def qdevice_votes(self, name: str) -> bool:
        """This node's corosync-quorumtool shows the Qdevice row with its vote counted."""
        res = self.runner(name, with_standin=False).run("corosync-quorumtool -s", timeout=10)
        return any(line.split()[:2] == ["0", "1"] and line.rstrip().endswith("Qdevice")
                   for line in res.stdout.splitlines())

    def wait_qdevice_votes(self, names: list[str], timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(self.qdevice_votes(n) for n in names):
                return
            time.sleep(0.3)
        raise AssertionError(f"corosync-qdevice: {names} did not count the Qdevice vote in {timeout:.0f}s: "
                             f"{[(n, self.qdevice_votes(n)) for n in names]}")

    def close(self) -> None:
        for name in self.names:
            with contextlib.suppress(ProcessLookupError):
                self.stop(name, timeout=5)
        # Any corosync still inside our namespaces (e.g. one started by the pvecm stand-in).
        for ns in self.namespaces:
            pids = sh("ip", "netns", "pids", ns, check=False).stdout.split()
            for p in pids:
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(p), signal.SIGKILL)
        for ns in reversed(self.namespaces):
            sh("ip", "netns", "del", ns, check=False)
        shutil.rmtree(self.root, ignore_errors=True)


def start_cluster(names: list[str] | None = None, version: int = 4, wait: bool = True) -> NetnsCluster:
    tag = secrets.token_hex(2)
    root = Path(tempfile.mkdtemp(prefix=f"lwc-{tag}-"))
    cluster = NetnsCluster(root, names or ["node1", "node2", "node3"], tag)
    try:
        cluster.create(version)
        for n in cluster.names:
            cluster.start(n)
        if wait:
            cluster.wait_members(cluster.names, len(cluster.names))
    except BaseException:
        cluster.close()
        raise
    return cluster
