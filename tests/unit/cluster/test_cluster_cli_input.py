"""`labwright cluster` refuses impossible values in one line before any node is contacted (no node answers here:
a value that got that far would fail on the node, not with these lines)."""

from __future__ import annotations

import pytest

from labwright.cli import main


@pytest.fixture
def inventory(tmp_path, monkeypatch):
    monkeypatch.setenv("LXD_DIR", str(tmp_path / "no-lxd"))
    path = tmp_path / "cluster.py"
    path.write_text('cluster = [("pve1", {"cluster_lxd": "pve1"}), ("pve2", {"cluster_lxd": "pve2"})]\n')
    return str(path)


@pytest.mark.parametrize(("args", "words"), [
    (["doctor", "-i", "INV", "--last-version", "7"], "--last-version 7 only means something with --prevent NODE"),
    (["doctor", "-i", "INV", "--prevent", "pve2", "--last-version", "-1"], "--last-version -1: not a corosync config"),
    (["doctor", "-i", "INV", "--prevent", "pve2", "--last-version", str(2**64)], "not a corosync config_version"),
    (["rejoin", "pve1", "--lead", "a b", "-i", "INV"], "--lead 'a b': not an IP address or host name"),
    (["rejoin", "pve1", "--lead", "@lxd/$(id)", "-i", "INV"], "--lead '@lxd/$(id)': not an IP address"),
    (["rejoin", "pve1", "--lead", "", "-i", "INV"], "--lead '': empty; give a value, or leave the option out"),
    (["rejoin", "pve1", "--lead", "n" * 300, "-i", "INV"], "not an IP address or host name"),
    (["rejoin", "pve1", "--lead", "10.1.2.300", "-i", "INV"], "--lead '10.1.2.300': not an IP address"),
])
def test_impossible_values_are_one_line_exit_2(inventory, capsys, args, words):
    assert main(["cluster", *[inventory if a == "INV" else a for a in args]]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err, err


@pytest.mark.parametrize("lead", ["10.140.3.10", "fd00::1", "pve1", "pve1.lab.example."])
def test_addresses_and_host_names_pass_the_check(lead):
    from labwright.cli.cluster import check_address

    assert check_address(lead, "--lead") == lead


def test_a_directory_as_inventory_is_called_a_directory(tmp_path, capsys):
    assert main(["cluster", "ghosts", "-i", str(tmp_path)]) == 2
    assert f"inventory {tmp_path} is a directory, not a file" in capsys.readouterr().err


def test_a_cluster_host_that_is_not_a_host_is_one_line_exit_2(tmp_path, capsys):
    path = tmp_path / "cluster.py"
    path.write_text('cluster = [("pve1", {"cluster_host": "ip netns exec x"})]\n')
    assert main(["cluster", "doctor", "-i", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "node pve1: cluster_host is a str, not a labwright.hosts.Host" in err, err


def test_a_cluster_host_from_a_python_inventory_runs_the_doctor(tmp_path, capsys):
    """Any Host an inventory constructs is the node's transport: here this machine (a LocalHost), whose commands
    are the doctor's real ones (no corosync here: the node is said to be down, exit 1)."""
    path = tmp_path / "cluster.py"
    path.write_text("from labwright.hosts.local import LocalHost as _LocalHost\n"
                    'cluster = [("pve1", {"cluster_host": _LocalHost(label="node pve1")})]\n')
    code = main(["cluster", "doctor", "-i", str(path), "--json"])
    out = capsys.readouterr().out
    assert code == 1 and '"name": "pve1"' in out, out
