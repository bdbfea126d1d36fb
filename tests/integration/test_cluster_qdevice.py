"""`labwright cluster doctor/rejoin/ghosts` against the real 3-node corosync cluster in network namespaces with a
real QDevice: corosync-qnetd (Debian's corosync-qnetd) in a namespace of its own, corosync-qdevice (model net, TLS
with certificates made by corosync-qnetd-certutil / corosync-qdevice-net-certutil) on every node, as
`pvecm qdevice setup` configures it. corosync-quorumtool then prints the Qdevice column and row (issue 15: the old
parser found no members in it). Proxmox's `pvecm` is tests/support/doubles/pvecm, as in test_cluster_corosync.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from labwright.cluster.parse import parse_quorum_status
from support.cluster_cli import (
    cli,
    cluster_version,
    doctor_json,
    error_line,
    make_stale_by_version,
    node,
    running_cluster,
)
from support.corosync_netns import NetnsCluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[NetnsCluster]:
    yield from running_cluster(tmp_path_factory.mktemp("cluster"), version=4, qdevice=True)


def test_real_quorumtool_prints_the_qdevice_and_labwright_reads_it(cluster):
    res = cluster.runner("node2", with_standin=False).run("corosync-quorumtool -s", timeout=10)
    assert "    Nodeid      Votes    Qdevice Name\n" in res.stdout
    status = parse_quorum_status(res.stdout)
    assert status is not None and status.quorate and "Qdevice" in status.flags
    assert [(m.nodeid, m.name, m.qdevice) for m in status.members] == [
        (1, "node1", "A,V,NMW"), (2, "node2", "A,V,NMW"), (3, "node3", "A,V,NMW")]
    assert status.qdevice is not None and (status.qdevice.name, status.qdevice.votes) == ("Qdevice", 1)
    assert status.total_votes == 4
    pvecm = cluster.runner("node1").run("cd /tmp && pvecm status", timeout=20)  # the stand-in execs -siH
    status = parse_quorum_status(pvecm.stdout, "pvecm status")
    assert status is not None and [m.name for m in status.members] == [cluster.addr(n) for n in cluster.names]


def test_doctor_with_a_qdevice(cluster):
    rc, diag = doctor_json(cluster)
    assert rc == 0, diag
    assert diag["quorate"] and diag["members"] == cluster.names and diag["total_votes"] == 4
    assert all(n["verdict"] == "healthy" for n in diag["nodes"])


def test_ghosts_with_a_qdevice_and_a_name_that_is_a_ring_address(cluster):
    ghost = cluster.pve_dir / "nodes" / "pve9"
    (ghost / "qemu-server").mkdir(parents=True)
    (ghost / "qemu-server" / "109.conf").write_text("name: old\nscsi0: local-lvm:vm-109-disk-0,size=8G\n")
    collide = cluster.pve_dir / "nodes" / cluster.addr("node2")  # a directory named like node2's ring0_addr
    collide.mkdir()
    try:
        p = cli(cluster, "ghosts", "--json")
        assert p.returncode == 0, p.stderr
        listed = json.loads(p.stdout)
        assert sorted(g["name"] for g in listed["ghosts"]) == sorted(["pve9", cluster.addr("node2")])
        version = cluster_version(cluster)
        p = cli(cluster, "ghosts", "--remove", cluster.addr("node2"), "--yes")
        assert p.returncode == 1 and "ring0_addr of nodelist node node2" in error_line(p)
        assert collide.is_dir() and cluster_version(cluster) == version  # nothing changed
        p = cli(cluster, "ghosts", "--remove", "pve9", "--yes")
        assert p.returncode == 0, p.stderr
        assert not ghost.exists() and "not a known host" in p.stdout
        rc, diag = doctor_json(cluster)
        assert rc == 0 and diag["members"] == cluster.names
    finally:
        collide.rmdir()


def test_stale_node_rejoins_a_cluster_with_a_qdevice_with_pvecm_standin(cluster):
    old, new = make_stale_by_version(cluster)
    rc, diag = doctor_json(cluster)
    assert rc == 1 and diag["quorate"] and diag["members"] == ["node1", "node2"]
    assert node(diag, "node3")["verdict"] == "stale config"
    p = cli(cluster, "rejoin", "node3", "--lead", cluster.addr("node1"), "--yes", "--json")
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert (res["before_version"], res["after_version"]) == (old, new)
    assert any("successfully added node 'node3' to cluster." in s for s in res["steps"])
    rc, diag = doctor_json(cluster)
    assert rc == 0 and diag["members"] == cluster.names


def test_failed_pvecm_add_exits_0_and_the_rejoin_says_why(cluster):
    make_stale_by_version(cluster)
    # The stand-in cannot reach the lead: real pvecm's worker dies "unable to copy ssh ID" and pvecm exits 0.
    peers = cluster.root / "peers" / cluster.addr("node1")
    target = peers.readlink()
    peers.unlink()
    try:
        p = cli(cluster, "rejoin", "node3", "--lead", cluster.addr("node1"), "--yes")
        line = error_line(p)
        assert p.returncode == 1 and "did not join it" in line and "unable to copy ssh ID" in line, line
        assert "exit 0" in line and "no quorate membership" not in line
    finally:
        peers.symlink_to(target)
    p = cli(cluster, "rejoin", "node3", "--lead", cluster.addr("node1"), "--yes")
    assert p.returncode == 0, p.stderr
