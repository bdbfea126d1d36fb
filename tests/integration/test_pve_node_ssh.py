"""SshPveNode over real SSH: a fresh LXD lab container stands in for the Proxmox node (sshd, the lab key,
host key checked against a known_hosts built from the container's key, fetched through the LXD API)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from labwright.errors import OperationFailed
from labwright.guests.proxmox_render import edit_conf
from labwright.guests.pve_node import SshPveNode
from labwright.hosts import Result
from labwright.lab.lab import instance_address
from labwright.testing.lab_fixture import Lab

pytestmark = pytest.mark.lab
CONF = "/etc/pve/nodes/pve1/lxc/201.conf"


@pytest.fixture(scope="module")
def node(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, Any]]]:
    container = lab.fresh("lwpvessh")
    try:
        address = instance_address(lab.client, container)
        assert address, f"{container} has no address"
        host_key = lab.client.exec(container, ["cat", "/etc/ssh/ssh_host_ed25519_key.pub"]).stdout.decode().split()
        known_hosts = tmp_path_factory.mktemp("pve") / "known_hosts"
        known_hosts.write_text(f"{address} {host_key[0]} {host_key[1]}\n")
        made = lab.client.exec(container, ["sh", "-c", f"mkdir -p {CONF.rsplit('/', 1)[0]} && printf "
                                                       f"'arch: amd64\\nmemory: 512\\n' > {CONF}"])
        assert made.exit_code == 0
        yield container, {"ssh_hostname": address, "ssh_key": lab.private_key_path,
                          "ssh_known_hosts_file": str(known_hosts)}
    finally:
        lab.remove(container)


def test_ssh_pve_node_edits_the_config_file_and_runs_commands_over_real_ssh(lab, node):
    container, data = node
    remote = SshPveNode("pve1", data)
    try:
        text = remote.read_file(CONF)
        assert text == "arch: amd64\nmemory: 512\n"
        remote.write_file(CONF, edit_conf(text, {"dev0": "/dev/nvidia0,gid=44"}, ["memory"],
                                          [("lxc.mount.entry", "/dev/nvidia0 dev/nvidia0 none bind,optional")],
                                          frozenset({195})))
        on_node = lab.client.exec(container, ["cat", CONF]).stdout.decode()
        assert on_node == ("arch: amd64\ndev0: /dev/nvidia0,gid=44\n"
                           "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional\n")
        assert lab.client.exec(container, ["sh", "-c", f"ls {CONF}.tmp* 2>/dev/null | wc -l"]).stdout.strip() == b"0"
        assert remote.run(["sh", "-c", "echo it\\'s; exit 3"]) == Result(3, "it's\n", "")
        facts = remote.gpu()  # the stand-in has no NVIDIA driver and no nodes
        assert facts.driver is None and facts.nodes == ()
        with pytest.raises(OperationFailed, match="cannot read /etc/pve/nodes/pve1/lxc/999.conf"):
            remote.read_file("/etc/pve/nodes/pve1/lxc/999.conf")
    finally:
        remote.close()


def test_ssh_pve_node_refuses_a_host_key_it_does_not_know(node, tmp_path):
    _, data = node
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    remote = SshPveNode("pve1", {**data, "ssh_known_hosts_file": str(empty)})
    with pytest.raises(OperationFailed, match="host key is in known_hosts"):
        remote.read_file(CONF)
