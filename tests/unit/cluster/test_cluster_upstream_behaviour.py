"""The runbooks against what the real tools do (issue 15), on recorded outputs (tests/conformance/corosync, .../pvecm):
a QDevice's extra column and row, IPv6 knet addresses, `pvecm add` exiting 0 on a failed join, `pvecm delnode`
matching ring addresses, and an unknown layout stopping everything. Nodes are fakes that answer the doctor's facts
script with those outputs and record every other command."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from labwright.cluster.doctor import FACTS_SCRIPT, HEALTHY, NOT_IN_CLUSTER, doctor
from labwright.cluster.ghosts import ghosts
from labwright.cluster.parse import UnknownOutput, log_signs
from labwright.cluster.rejoin import STOP_SCRIPT, rejoin
from labwright.cluster.runner import Result
from labwright.errors import OperationFailed, SafetyCheckFailed
from support.corosync_netns import make_conf

CONFORMANCE = Path(__file__).resolve().parents[2] / "conformance"
NAMES = ["node1", "node2", "node3"]


def recorded(tool: str, case: str) -> dict[str, Any]:
    with (CONFORMANCE / tool / f"{case}.toml").open("rb") as fh:
        return tomllib.load(fh)["run"]


def quorumtool(case: str, local: int) -> str:
    """A recorded ``corosync-quorumtool -s`` as node ``local`` prints it."""
    out = recorded("corosync", case)["stdout"]
    out = out.replace(" (local)", "").replace("Node ID:          1\n", f"Node ID:          {local}\n")
    return out.replace(f"         {local}          1    A,V,NMW node{local}\n",
                       f"         {local}          1    A,V,NMW node{local} (local)\n").replace(
        f"         {local}          1 node{local}\n", f"         {local}          1 node{local} (local)\n")


@dataclass
class FakeNode:
    name: str
    conf: str
    quorum: str  # what corosync-quorumtool -s prints ("" = corosync not running)
    service: str = "active"
    log: str = ""
    pve_nodes: list[str] = field(default_factory=lambda: list(NAMES))
    answers: dict[str, Result] = field(default_factory=dict)  # a command's start -> its result
    ran: list[str] = field(default_factory=list)

    def facts_output(self) -> str:
        rc = 0 if "Quorate:          Yes" in self.quorum else (2 if self.quorum else 1)
        version = next(line.split()[1] for line in self.conf.splitlines() if "config_version:" in line)
        cmap = f"totem.config_version (u64) = {version}\n" if self.service == "active" else ""
        return (f"@@state\n{self.service}\n@@conf\n{self.conf}\n@@rc conf 0\n@@pveconf\n{self.conf}\n@@rc pveconf 0\n"
                f"@@authkey\nk\n@@quorum\n{self.quorum or 'Cannot initialize CMAP service'}\n@@rc quorum {rc}\n"
                f"@@cmap\n{cmap}@@pvecm\n@@log\n{self.log}\n@@nodes\n" + "\n".join(self.pve_nodes) + "\n")

    def run(self, script: str, timeout: float = 30) -> Result:
        if script == FACTS_SCRIPT:
            return Result(0, self.facts_output(), "")
        self.ran.append(script)
        if script == STOP_SCRIPT:
            return Result(0, "stopped\n", "")
        for start, result in self.answers.items():
            if start in script:
                return result
        if "@@file" in script:  # the ghost's guest configs: none
            return Result(0, "", "")
        raise AssertionError(f"{self.name}: unexpected command {script!r}")


def cluster(conf: str, case: str = "status-qdevice") -> list[FakeNode]:
    return [FakeNode(n, conf, quorumtool(case, i + 1)) for i, n in enumerate(NAMES)]


def node3_down(nodes: list[FakeNode], conf: str) -> None:
    """node3's corosync is stopped: the others' membership loses its row."""
    nodes[2] = FakeNode("node3", conf, "", service="inactive")
    for node in nodes[:2]:
        node.quorum = "\n".join(line for line in node.quorum.splitlines() if not line.endswith(" node3")) + "\n"
        node.quorum = node.quorum.replace("Nodes:            3", "Nodes:            2")


def test_doctor_sees_the_members_of_a_cluster_with_a_qdevice():
    # Old parser: the Qdevice column made every member row unreadable -> no members -> "not in cluster" everywhere.
    diag = doctor(cluster(make_conf(NAMES, 6)))  # type: ignore[arg-type]
    assert diag.quorate and diag.members == NAMES
    assert [n.verdict for n in diag.nodes] == [HEALTHY] * 3, [n.reasons for n in diag.nodes]
    assert diag.total_votes == 4  # three nodes and the qdevice's vote


def test_ipv6_knet_addresses_are_read_whole_and_attributed():
    log = "[KNET  ] rx: Unable to decrypt packet from fd00:98:7::3:5405 (size 176)!\n"
    assert log_signs(log).decrypt_failed_from == ["fd00:98:7::3"]  # old: "fd00:98:7:" cut at the first ":digits"
    conf = make_conf(NAMES, 6).replace("ring0_addr: 10.98.7.", "ring0_addr: fd00:98:7::")
    nodes = cluster(conf, "status-names")
    nodes[0].log = log
    report = doctor(nodes).node("node3")  # type: ignore[arg-type]
    assert report.address == "fd00:98:7::3"
    assert any("node1 cannot accept its packets" in s and "fd00:98:7::3" in s for s in report.signs), report.signs


def test_rejoin_reads_what_pvecm_add_said_not_its_exit_code(monkeypatch):
    # pvecm add returns 0 when its worker failed (pve-cluster pvecm.pm 520-527): the old rejoin then waited 60 s
    # for a quorum that could not come and reported a timeout.
    nodes = cluster(make_conf(NAMES, 6), "status-names")
    node3_down(nodes, make_conf(NAMES, 4))
    failed = recorded("pvecm", "add-ssh-failed-exit-0")
    nodes[2].answers["pvecm add"] = Result(failed["exit"], failed["stdout"], failed["stderr"])
    monkeypatch.setattr("labwright.cluster.rejoin.wait_quorate",
                        lambda *a, **k: pytest.fail("waited for quorum after a failed pvecm add"))
    with pytest.raises(OperationFailed) as err:
        rejoin(nodes, "node3", "10.98.7.1", yes=True)  # type: ignore[arg-type]
    message = str(err.value)
    assert "did not join" in message and "unable to copy ssh ID: exit code 255" in message
    assert "exit 0" in message and "not a member" in message  # and the state it left, as the doctor sees it


def test_ghost_removal_refuses_a_name_that_is_a_live_members_ring_address():
    # pvecm delnode matches ring0_addr/ring1_addr too (ClusterConfig.pm 493-506): `pvecm delnode pve9` would remove
    # node2, whose second link is addressed by the host name pve9.
    conf = make_conf(NAMES, 6).replace("ring0_addr: 10.98.7.2\n", "ring0_addr: 10.98.7.2\n    ring1_addr: pve9\n")
    nodes = cluster(conf, "status-names")
    for node in nodes:
        node.pve_nodes = [*NAMES, "pve9"]
        node.answers["pvecm delnode"] = Result(0, "", "")  # what real pvecm does: it removes node2
    listed = ghosts(nodes)  # type: ignore[arg-type]
    assert [g.name for g in listed.ghosts] == ["pve9"]
    with pytest.raises(SafetyCheckFailed) as err:
        ghosts(nodes, remove="pve9", yes=True)  # type: ignore[arg-type]
    assert "ring1_addr of nodelist node node2" in str(err.value) and "nothing changed" in str(err.value)
    assert not any("pvecm delnode" in s or "rm -rf" in s for n in nodes for s in n.ran)


def test_an_unknown_layout_stops_before_anything_is_removed_or_rejoined():
    unknown = recorded("corosync", "unknown-column")["stdout"]
    nodes = [FakeNode(n, make_conf(NAMES, 6), unknown) for n in NAMES]
    for node in nodes:
        node.pve_nodes = [*NAMES, "pve9"]
    with pytest.raises(UnknownOutput, match="membership columns 'Nodeid Votes Site Name' not understood"):
        ghosts(nodes, remove="pve9", yes=True)  # type: ignore[arg-type]
    with pytest.raises(UnknownOutput):
        rejoin(nodes, "node3", "10.98.7.1", yes=True)  # type: ignore[arg-type]
    assert not any(n.ran for n in nodes)


def test_a_member_outside_the_quorate_membership_is_still_not_in_cluster():
    nodes = cluster(make_conf(NAMES, 6))
    node3_down(nodes, make_conf(NAMES, 6))
    assert doctor(nodes).node("node3").verdict == NOT_IN_CLUSTER  # type: ignore[arg-type]
