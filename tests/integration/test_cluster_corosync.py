"""`labwright cluster doctor/rejoin` against a real 3-node corosync 3 cluster (knet + crypto) in network
namespaces on this machine. Proxmox's `pvecm` cannot run here: tests/support/doubles/pvecm stands in for it (copies
the lead's corosync.conf and authkey and restarts corosync); every test that runs it says so in its name.

One cluster per module (started in ~3 s); each test leaves it healthy, the quorum-loss test runs last.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Iterator

import pytest

from labwright.cli import main
from labwright.cluster.parse import parse_quorum_status
from labwright.testing.pyinfra_output import run_pyinfra
from support.cluster_cli import (
    cli,
    cluster_version,
    conf_path,
    digest,
    doctor_json,
    error_line,
    make_stale_by_version,
    node,
    running_cluster,
    wait_for,
)
from support.corosync_netns import NetnsCluster, sh

VERSION = 4


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[NetnsCluster]:
    yield from running_cluster(tmp_path_factory.mktemp("cluster"), version=VERSION)


@pytest.mark.smoke  # real corosync in network namespaces: scripts/test --quick
def test_doctor_healthy_cluster(cluster):
    rc, diag = doctor_json(cluster)
    assert rc == 0, diag
    assert diag["quorate"] and diag["members"] == ["node1", "node2", "node3"]
    assert (diag["expected_votes"], diag["total_votes"]) == (3, 3)
    v = cluster_version(cluster)
    assert diag["config_version"] == v and diag["pve_conf_version"] == v
    for name in cluster.names:
        n = node(diag, name)
        assert n["verdict"] == "healthy" and n["service"] == "active" and n["member"]
        assert n["config_version"] == v and n["running_version"] == v
        assert n["cluster_view"]["status"] == "joined" and not n["suggestion"]
    # `pvecm status` (stand-in: Cluster information + the real `corosync-quorumtool -siH`) parses as Proxmox's does.
    st = parse_quorum_status(cluster.runner("node2").run("cd /tmp && pvecm status").stdout)
    assert st and st.quorate and st.config_version == v and st.cluster_name == "lwtest" and st.node_id == 2
    assert [(m.nodeid, m.name) for m in st.members] == [(i + 1, cluster.addr(n)) for i, n in enumerate(cluster.names)]
    assert [m.nodeid for m in st.members if m.local] == [2]
    text = cli(cluster, "doctor", subprocess_=True)  # the installed console script, once
    assert text.returncode == 0 and "healthy" in text.stdout and "cluster: quorate" in text.stdout


def test_rejoin_refuses_healthy_node_and_changes_nothing(cluster):
    pid, before = cluster.pid("node2"), digest(conf_path(cluster, "node2"))
    p = cli(cluster, "rejoin", "node2", "--lead", cluster.addr("node1"), "--yes")
    assert p.returncode == 0, p.stderr
    assert "node2 is healthy" in p.stdout and "nothing changed" in p.stdout
    assert cluster.pid("node2") == pid and digest(conf_path(cluster, "node2")) == before


def test_unknown_node_and_missing_inventory_are_one_line(cluster):
    p = cli(cluster, "rejoin", "node9", "--lead", cluster.addr("node1"), "--yes")
    assert p.returncode == 2
    assert p.stderr.strip().count("\n") == 0
    assert "no node named 'node9'" in error_line(p) and "node1, node2, node3" in p.stderr
    p = cli(cluster, "doctor", "-i", "/nonexistent/cluster.py", inventory=False)
    assert p.returncode == 2 and "/nonexistent/cluster.py" in error_line(p)


def test_stale_config_version_doctor_and_rejoin_with_pvecm_standin(cluster):
    old, new = make_stale_by_version(cluster)
    rc, diag = doctor_json(cluster)
    assert rc == 1 and diag["quorate"] and diag["config_version"] == new
    n3 = node(diag, "node3")
    assert n3["verdict"] == "stale config" and n3["config_version"] == old and not n3["member"]
    assert n3["missed_versions"] == [old + 1, new]
    assert any(f"Received config version ({new}) is different than my config version ({old})! Exiting" in s
               for s in n3["signs"])
    assert any("Members[1]: 3" in s for s in n3["signs"])  # the seed's single-member membership
    assert n3["cluster_view"]["status"] == "left" and n3["cluster_view"]["config_version"] == old
    assert n3["suggestion"] == f"labwright cluster rejoin node3 --lead {cluster.addr('node1')}"
    assert node(diag, "node1")["verdict"] == node(diag, "node2")["verdict"] == "healthy"

    # Dry run: the plan, nothing touched.
    before = digest(conf_path(cluster, "node3"))
    p = cli(cluster, "rejoin", "node3", "--lead", cluster.addr("node1"))
    assert p.returncode == 0, p.stderr
    assert "plan (dry run)" in p.stdout and f"pvecm add {cluster.addr('node1')} --use_ssh --force" in p.stdout
    assert digest(conf_path(cluster, "node3")) == before and cluster.pid("node3") is None
    # A lead that is not a quorate member is refused (the stale node itself here).
    p = cli(cluster, "rejoin", "node3", "--lead", cluster.addr("node3"), "--yes")
    assert p.returncode == 2 and "--lead" in error_line(p)
    assert digest(conf_path(cluster, "node3")) == before

    p = cli(cluster, "rejoin", "node3", "--lead", cluster.addr("node1"), "--yes", "--json", subprocess_=True)
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    assert res["changed"] and (res["before_version"], res["after_version"]) == (old, new)
    assert res["dry"] is False and "dry_run" not in res  # the CLI's one word (docs/cli.md)
    assert any("pvecm add" in s for s in res["steps"])
    rc, diag = doctor_json(cluster)
    assert rc == 0 and all(n["verdict"] == "healthy" for n in diag["nodes"]), diag
    assert node(diag, "node3")["config_version"] == new
    # Idempotent: a second rejoin changes nothing and says so.
    p = cli(cluster, "rejoin", "node3", "--lead", cluster.addr("node1"), "--yes")
    assert p.returncode == 0 and "nothing to do" in p.stdout


def test_old_authkey_doctor_and_rejoin_with_pvecm_standin(cluster):
    cluster.stop("node3")
    key = cluster.node_dir("node3") / "etc/corosync/authkey"
    key.unlink()
    sh("corosync-keygen", "-k", str(key))
    cluster.start("node3")
    log1 = cluster.node_dir("node1") / "var/log/corosync/corosync.log"
    wait_for(lambda: f"Unable to decrypt packet from {cluster.addr('node3')}" in log1.read_text()
             and cluster.quorate("node3") == (False, 1), 30, "node1 to reject node3's packets")
    rc, diag = doctor_json(cluster)
    n3 = node(diag, "node3")
    assert rc == 1 and n3["verdict"] == "stale config" and n3["service"] == "active" and not n3["member"]
    assert n3["missed_versions"] == [] and any("authkey differs" in r for r in n3["reasons"])
    assert any(f"Unable to decrypt packet from {cluster.addr('node3')}" in s for s in n3["signs"])
    assert n3["quorate"] is False and n3["members_seen"] == 1
    pid = cluster.pid("node3")
    p = cli(cluster, "rejoin", "node3", "--lead", cluster.addr("node2"), "--yes")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "stopped corosync on node3" in p.stdout and cluster.pid("node3") not in (None, pid)
    rc, diag = doctor_json(cluster)
    assert rc == 0 and all(n["verdict"] == "healthy" for n in diag["nodes"]), diag
    assert key.read_bytes() == (cluster.node_dir("node2") / "etc/corosync/authkey").read_bytes()


def test_corosync_conf_that_does_not_parse_refuses_rejoin(cluster):
    path = conf_path(cluster, "node3")
    good = path.read_text()
    bad = good.replace("  node {\n    name: node2", "  node { name: node2")
    try:
        path.write_text(bad)
        rc, diag = doctor_json(cluster)
        n3 = node(diag, "node3")
        assert rc == 1 and any("line" in r and "a brace must end its line" in r for r in n3["reasons"])
        pid = cluster.pid("node3")
        p = cli(cluster, "rejoin", "node3", "--lead", cluster.addr("node1"), "--yes")
        assert p.returncode == 2 and "node3:/etc/corosync/corosync.conf: line" in error_line(p)
        assert path.read_text() == bad and cluster.pid("node3") == pid
    finally:
        path.write_text(good)


def test_prevent_compares_last_known_version(cluster, tmp_path):
    v = cluster_version(cluster)
    p = cli(cluster, "doctor", "--prevent", "node3", "--last-version", str(v - 3), "--json")
    res = json.loads(p.stdout)
    assert p.returncode == 1 and not res["safe"] and res["missed_versions"] == [v - 2, v - 1, v]
    assert "rejoin node3" in res["advice"]
    p = cli(cluster, "doctor", "--prevent", "node3", "--last-version", str(v))
    assert p.returncode == 0 and "safe to power on" in p.stdout
    p = cli(cluster, "doctor", "--prevent", "node7", "--last-version", "1")
    assert p.returncode == 2 and "node7" in error_line(p)
    # The last known version from the inventory's host data; node3 is not contacted (its namespace is gone
    # for this inventory: contacting it would make it "unreachable" and fail the run).
    inv = tmp_path / "offline.py"
    node3 = f'"cluster_host": _NetnsHost({cluster.ns("node3")!r},'
    text = cluster.inventory_text()
    assert node3 in text
    inv.write_text(text.replace(node3, f'"corosync_config_version": {v - 1}, "cluster_host": _NetnsHost("nope",'))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["cluster", "doctor", "-i", str(inv), "--prevent", "node3", "--json"])
    res = json.loads(out.getvalue())
    assert rc == 1 and res["last_known"] == v - 1 and res["missed_versions"] == [v] and res["quorate"], err.getvalue()


def test_stopped_node_is_not_in_cluster_and_rejoin_refuses(cluster):
    cluster.stop("node3")
    try:
        rc, diag = doctor_json(cluster)
        n3 = node(diag, "node3")
        assert rc == 1 and diag["quorate"] and n3["verdict"] == "not in cluster" and n3["service"] == "inactive"
        assert any("corosync is inactive" in r for r in n3["reasons"]) and not n3["suggestion"]
        before = digest(conf_path(cluster, "node3"))
        p = cli(cluster, "rejoin", "node3", "--lead", cluster.addr("node1"), "--yes")
        assert p.returncode == 1 and "not stale config" in error_line(p)
        assert digest(conf_path(cluster, "node3")) == before and cluster.pid("node3") is None
    finally:
        cluster.start("node3")
        cluster.wait_members(cluster.names, 3)


def test_rejoin_deploy_with_pvecm_standin_then_no_change(cluster, repo):
    """deploys/cluster_rejoin.py through real pyinfra (@local drives the nodes as the CLI does)."""
    old, new = make_stale_by_version(cluster)
    data = (f"cluster_inventory={cluster.inventory}", "node=node3", f"lead={cluster.addr('node2')}")
    first = run_pyinfra("@local", "deploys/cluster_rejoin.py", *data, cwd=repo, timeout=300)
    assert first.rc == 0, first.output[-3000:]
    assert first.totals.changed == 1 and "pvecm add" in first.output
    assert f"config_version {old} -> {new}" in first.output
    rc, diag = doctor_json(cluster)
    assert rc == 0 and node(diag, "node3")["config_version"] == new
    second = run_pyinfra("@local", "deploys/cluster_rejoin.py", *data, cwd=repo, timeout=300)
    assert second.rc == 0 and second.totals.changed == 0, second.output[-3000:]
    assert "node3 is healthy" in second.output
    bad = run_pyinfra("@local", "deploys/cluster_rejoin.py", data[0], "node=node9", data[2], cwd=repo)
    assert bad.rc != 0 and "no node named 'node9'" in bad.output


def test_quorum_lost_no_rejoin_suggested_and_rejoin_refused(cluster):
    cluster.stop("node2")
    cluster.stop("node3")
    try:
        wait_for(lambda: cluster.quorate("node1") == (False, 1), 20, "node1 to lose quorum")
        rc, diag = doctor_json(cluster)
        assert rc == 1 and not diag["quorate"]
        assert [n["verdict"] for n in diag["nodes"]] == ["quorum lost"] * 3
        assert not any(n["suggestion"] for n in diag["nodes"])
        text = cli(cluster, "doctor").stdout
        assert "NOT quorate" in text and "do NOT rejoin" in text and "labwright cluster rejoin" not in text
        before = digest(conf_path(cluster, "node3"))
        p = cli(cluster, "rejoin", "node3", "--lead", cluster.addr("node1"), "--yes")
        assert p.returncode == 1 and "not quorate" in error_line(p)
        assert digest(conf_path(cluster, "node3")) == before and cluster.pid("node3") is None
    finally:
        cluster.start("node2")
        cluster.start("node3")
        cluster.wait_members(cluster.names, 3)
