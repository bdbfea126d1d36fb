"""The node seam over real SSH: ``PctHost`` (a node Host plus ``pct exec``) and ``SshPveNode`` (the Proxmox backend's
node files and commands) against an LXD container standing in for a Proxmox VE node (sshd, the lab key, its host
key pinned, the pct double), as test_pct_connector.py builds it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from labwright.errors import OperationFailed
from labwright.guests.pve_node import SshPveNode
from labwright.hosts.pct import PctHost
from labwright.hosts.ssh import SshHost
from labwright.testing.lab_fixture import Lab
from support.pct_node import pct_node

pytest_plugins = ["labwright.testing.lab_fixture"]
pytestmark = pytest.mark.lab

CT = 101


@dataclass
class PveNode:
    lab: Lab
    container: str
    address: str
    key: str
    known_hosts: Path

    def sh(self, script: str) -> bytes:
        """Run on the node itself (through LXD, not through the seam under test); its stdout."""
        return self.lab.client.exec(self.container, ["sh", "-c", script]).stdout

    @staticmethod
    def in_ct(vmid: int, path: str) -> str:
        """Where a path inside the double's CT lives on the node."""
        return f"/var/lib/pct-double/{vmid}/rootfs{path}"


@pytest.fixture(scope="module")
def pve_node(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PveNode]:
    with pct_node(lab, tmp_path_factory, "lwpvn", f"pct create {CT} --start 1") as (container, address, known_hosts):
        yield PveNode(lab, container, address, lab.private_key_path, known_hosts)


def ssh_data(node: PveNode) -> dict[str, object]:
    return {"ssh_hostname": node.address, "ssh_key": node.key, "ssh_known_hosts_file": str(node.known_hosts)}


def test_pct_host_runs_and_moves_files_in_the_ct_through_the_nodes_ssh(pve_node: PveNode):
    node = SshHost.open("pve1", ssh_data(pve_node), label="node pve1")
    try:
        ct = PctHost(node, CT)
        result = ct.run(["sh", "-c", 'echo "$1" $PATH; exit 4', "sh", "it's"])
        assert (result.rc, result.stdout.split()[0]) == (4, "it's") and "/usr/local/bin" in result.stdout
        ct.put(b"\x00binary\xff\n", "/root/lw-pct-host", mode=0o600)
        assert pve_node.sh(f"cat {PveNode.in_ct(CT, '/root/lw-pct-host')}") == b"\x00binary\xff\n"
        assert ct.get("/root/lw-pct-host") == b"\x00binary\xff\n"
        with pytest.raises(OSError, match="cannot read /root/missing"):
            ct.get("/root/missing")
    finally:
        node.close()


def test_ssh_pve_node_reads_writes_and_runs_through_the_seam(pve_node: PveNode):
    node = SshPveNode("pve1", ssh_data(pve_node))
    try:
        node.write_file("/root/lw-node.conf", "arch: amd64\nlxc.cgroup2.devices.allow: c 195:* rwm\n")
        assert node.read_file("/root/lw-node.conf") == "arch: amd64\nlxc.cgroup2.devices.allow: c 195:* rwm\n"
        assert pve_node.sh("ls -a /root | grep -c labwright || true").strip() == b"0"  # no copy left beside
        result = node.run(["sh", "-c", "echo out; echo err >&2; exit 3"])
        assert (result.rc, result.stdout, result.stderr) == (3, "out\n", "err\n")
        with pytest.raises(OperationFailed, match="cannot read /root/missing on node pve1"):
            node.read_file("/root/missing")
        with pytest.raises(OperationFailed, match="cannot write /nonexistent-dir/x on node pve1"):
            node.write_file("/nonexistent-dir/x", "x")
    finally:
        node.close()
