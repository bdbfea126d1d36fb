"""Verdict logic on facts parsed from real-format tool output (the live behaviour is covered by the netns
cluster tests); and the SSH command line a production node gets."""

import pytest

from labwright.cluster.conf import parse_conf
from labwright.cluster.doctor import QUORUM_LOST, STALE, NodeFacts, diagnose
from labwright.cluster.parse import log_signs, parse_cmap, parse_quorum_status
from labwright.cluster.runner import runner_from_data
from labwright.errors import BadInput
from labwright.hosts.ssh import SshHost
from support.corosync_netns import make_conf


def quorum(nodes: int, quorate: bool, node_id: int) -> str:
    members = "\n".join(f"         {i}          1 node{i}" for i in range(1, nodes + 1))
    return (f"Quorum information\n------------------\nNodes:            {nodes}\nNode ID:          {node_id}\n"
            f"Quorate:          {'Yes' if quorate else 'No'}\n\nVotequorum information\n----------------------\n"
            f"Expected votes:   3\nTotal votes:      {nodes}\nQuorum:           2\n\n"
            f"Membership information\n----------------------\n    Nodeid      Votes Name\n{members}\n")


def facts(name: str, version: int, q: str | None, service: str = "active", log: str = "") -> NodeFacts:
    conf = parse_conf(make_conf(["node1", "node2", "node3"], version), f"{name}:/etc/corosync/corosync.conf")
    return NodeFacts(name, service=service, conf=conf, conf_version=version, pve_conf=conf,
                     quorum=parse_quorum_status(q) if q else None,
                     cmap=parse_cmap(f"totem.config_version (u64) = {version}\n") if service == "active" else {},
                     signs=log_signs(log), authkey_sha256="k")


def test_stale_node_while_quorum_is_lost_gets_no_rejoin_suggestion():
    diag = diagnose([
        facts("node1", 6, quorum(1, False, 1)),
        facts("node2", 6, None, service="inactive"),
        facts("node3", 4, None, service="inactive",
              log="[CMAP  ] Received config version (6) is different than my config version (4)! Exiting\n"),
    ])
    assert not diag.quorate and diag.config_version == 6
    assert [n.verdict for n in diag.nodes] == [QUORUM_LOST] * 3
    n3 = diag.node("node3")
    assert not n3.suggestion and "do NOT rejoin" in n3.reasons[0]
    assert n3.missed_versions == [5, 6]  # still reported, as a fact


def test_stale_node_in_a_quorate_cluster_lists_missed_versions_and_a_lead():
    diag = diagnose([
        facts("node1", 9, quorum(2, True, 1)),
        facts("node2", 9, quorum(2, True, 2)),
        facts("node3", 6, quorum(1, False, 3), log="[QUORUM] Members[1]: 3\n"),
    ])
    n3 = diag.node("node3")
    assert diag.quorate and diag.members == ["node1", "node2"] and n3.verdict == STALE
    assert n3.missed_versions == [7, 8, 9] and n3.suggestion.endswith("--lead 10.98.7.1")
    assert any("single-member membership" in r for r in n3.reasons)


def test_ssh_runner_uses_the_hosts_seam_with_the_ssh_option_set_and_strict_host_keys(tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text("")
    r = runner_from_data("pve7", {"ssh_hostname": "10.140.3.70", "ssh_port": 2222, "ssh_key": "/k/id",
                                  "ssh_known_hosts_file": "/k/known", "ssh_config_file": str(config),
                                  "ssh_connect_retries": 2})
    host = r.host()
    assert isinstance(host, SshHost) and host.label == "node pve7"
    assert host.options["ssh_hostname"] == "10.140.3.70" and host.options["ssh_port"] == 2222
    assert host.options["ssh_key"] == "/k/id" and host.options["ssh_known_hosts_file"] == "/k/known"
    assert host.options["ssh_user"] == "root" and host.options["ssh_strict_host_key_checking"] == "yes"
    assert host.options["ssh_connect_retries"] == 2  # any pyinfra ssh_* key passes through
    assert host.connector.data["ssh_hostname"] == "10.140.3.70"  # pyinfra's own connector reads them
    assert "$HOME" in r.body("echo 'it''s' $HOME") and r.body("true").startswith("export PATH=")


def test_an_unreachable_ssh_node_is_exit_255_with_one_line(tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text("")
    r = runner_from_data("pve7", {"ssh_hostname": "127.0.0.1", "ssh_port": 1, "ssh_config_file": str(config)})
    result = r.run("true", timeout=5)
    assert result.rc == 255 and "cannot reach node pve7 over SSH at root@127.0.0.1:1" in result.stderr
    assert "\n" not in result.stderr


@pytest.mark.parametrize("data, said", [
    ({"ssh_hostname": "127.0.0.1", "ssh_port": "abc"}, "ssh_port"),
    ({"ssh_hostname": "127.0.0.1", "ssh_port": 99999}, "ssh_port"),
    ({"ssh_hostname": "127.0.0.1", "ssh_port": True}, "ssh_port"),
    ({"ssh_hostname": "-oProxyCommand=touch /tmp/x"}, "ssh_hostname"),
    ({"ssh_hostname": "999.1.1.1"}, "ssh_hostname"),
])
def test_a_nodes_ssh_data_is_checked_before_it_is_dialled(data, said):
    """Sweep at 2b91fd1: ssh_port 'abc' was a ValueError traceback; 99999 and an option-like host were accepted."""
    with pytest.raises(BadInput, match=f"^node pve7: {said}") as refused:
        runner_from_data("pve7", data)
    assert "\n" not in str(refused.value)
