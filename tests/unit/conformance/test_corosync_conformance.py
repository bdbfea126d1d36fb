"""labwright's readers of corosync and pvecm output against recorded outputs (tests/conformance/corosync/, .../pvecm/).

Each case is one TOML file: where the output comes from (upstream project, version, commit, file, lines), the
command, its exit code, stdout and stderr, and what labwright must make of it. Layouts that no upstream version
prints are marked synthetic: labwright must stop on them with a message naming what it did not understand
(UnknownOutput), never find "no members" and act on that guess.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from labwright.cluster.parse import (
    UnknownOutput,
    log_signs,
    parse_membership,
    parse_quorum_status,
    pvecm_add_outcome,
    pvecm_delnode_outcome,
)

ROOT = Path(__file__).resolve().parents[2] / "conformance"
CASES = sorted([*(ROOT / "corosync").glob("*.toml"), *(ROOT / "pvecm").glob("*.toml")])
KNOWN_EXPECTATIONS = {
    "parser", "note", "quorate", "members", "local", "expected_votes", "total_votes", "qdevice", "member_qdevice",
    "flags", "addresses", "config_version", "none", "unknown", "packet_rejected_from", "decrypt_failed_from",
    "joined", "message", "warnings", "arg", "outcome",
}


def load(path: Path) -> dict[str, Any]:
    with path.open("rb") as fh:
        return tomllib.load(fh)


def case_id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


def test_every_layout_and_failure_mode_is_recorded():
    names = {case_id(p) for p in CASES}
    assert {
        "corosync/status-names", "corosync/status-not-quorate", "corosync/status-qdevice",
        "corosync/status-qdevice-not-voting", "corosync/status-ip", "corosync/status-ip-ipv6",
        "corosync/status-all-addresses", "corosync/status-hex-qdevice", "corosync/list", "corosync/list-qdevice",
        "corosync/list-parsable", "corosync/not-running", "corosync/provider-not-votequorum",
        "corosync/unknown-column", "corosync/unknown-row", "corosync/log-knet-ipv6",
        "pvecm/status", "pvecm/status-qdevice", "pvecm/status-ipv6", "pvecm/status-no-cluster",
        "pvecm/nodes-qdevice", "pvecm/add-ok", "pvecm/add-ssh-failed-exit-0", "pvecm/add-rsync-failed-exit-0",
        "pvecm/add-check-failed-exit-0", "pvecm/add-inside-etc-pve", "pvecm/delnode-ok",
        "pvecm/delnode-by-ring-address", "pvecm/delnode-unknown", "pvecm/delnode-self", "pvecm/delnode-no-quorum",
    } <= names


@pytest.mark.parametrize("path", CASES, ids=case_id)
def test_case_names_its_upstream_source(path):
    case = load(path)
    assert case["provenance"]["how"], path
    for source in case["provenance"]["sources"]:
        assert re.fullmatch(r"[0-9a-f]{40}", source["commit"]), source
        assert source["project"] and source["version"] and source["file"] and source["lines"], source
    assert set(case["expect"]) <= KNOWN_EXPECTATIONS, set(case["expect"]) - KNOWN_EXPECTATIONS
    assert set(case["expect"]) - {"note", "parser"}, f"{path.name} checks nothing"
    if case["provenance"]["how"].startswith("synthetic"):
        assert "unknown" in case["expect"], f"{path.name}: a synthetic layout must be refused"


def _check_members(expect: dict[str, Any], members, qdevice) -> None:
    assert [[m.nodeid, m.votes, m.name] for m in members] == expect["members"]
    if "local" in expect:
        assert [m.nodeid for m in members if m.local] == [expect["local"]]
    if "member_qdevice" in expect:
        assert {m.qdevice for m in members} == {expect["member_qdevice"]}
    if "addresses" in expect:
        assert list(members[0].addresses) == expect["addresses"]
    if "qdevice" in expect:
        want = expect["qdevice"]
        assert qdevice is not None
        assert (qdevice.name, qdevice.votes) == (want["name"], want["votes"])
        assert qdevice.configured_votes == want.get("configured_votes")
    else:
        assert qdevice is None


@pytest.mark.parametrize("path", CASES, ids=case_id)
def test_labwright_reads_the_recorded_output(path):
    case = load(path)
    run, expect = case["run"], case["expect"]
    kind = expect["parser"]
    what = run["command"].split("#")[0].strip()
    if "unknown" in expect:
        with pytest.raises(UnknownOutput) as err:
            if kind == "membership":
                parse_membership(run["stdout"].splitlines()[3:], what)
            else:
                parse_quorum_status(run["stdout"] + run["stderr"], what)
        assert expect["unknown"] in str(err.value)
        assert what in str(err.value) and "nothing was changed" in str(err.value)
    elif kind == "quorum_status":
        # labwright reads stdout and stderr together (2>&1), as the doctor's facts script does; piped, stdout is
        # flushed at exit, so stderr comes first
        status = parse_quorum_status(run["stderr"] + run["stdout"], what)
        if expect.get("none"):
            assert status is None
            return
        assert status is not None
        assert status.quorate is expect["quorate"]
        assert (run["exit"] == 0) is status.quorate  # corosync-quorumtool -s: 0 quorate, 2 not (EXIT_NOT_QUORATE)
        _check_members(expect, status.members, status.qdevice)
        for key in ("expected_votes", "total_votes", "config_version", "flags"):
            if key in expect:
                assert getattr(status, key) == expect[key], key
    elif kind == "membership":
        lines = run["stdout"].splitlines()
        start = lines.index("Membership information")
        members, qdevice = parse_membership(lines[start + 1:], what)
        _check_members(expect, members, qdevice)
    elif kind == "log":
        signs = log_signs(run["stdout"])
        assert signs.packet_rejected_from == expect["packet_rejected_from"]
        assert signs.decrypt_failed_from == expect["decrypt_failed_from"]
    elif kind == "add":
        added = pvecm_add_outcome(run["exit"], run["stdout"], run["stderr"])
        assert added.joined is expect["joined"]
        if "message" in expect:
            assert expect["message"] in added.message
        assert added.warnings == expect.get("warnings", 0)
    elif kind == "delnode":
        assert pvecm_delnode_outcome(run["exit"], run["stdout"], run["stderr"], expect["arg"]) == expect["outcome"]
    else:
        raise AssertionError(f"{path.name}: unknown parser {kind!r}")


def test_pvecm_add_exit_0_is_not_trusted():
    """The lead: every failed join in the recorded cases exits 0, and labwright reads it as failed."""
    failed = [load(p) for p in CASES if p.stem.startswith("add-") and p.stem.endswith("-exit-0")]
    assert len(failed) >= 3
    for case in failed:
        run = case["run"]
        assert run["exit"] == 0
        assert not pvecm_add_outcome(0, run["stdout"], run["stderr"]).joined
