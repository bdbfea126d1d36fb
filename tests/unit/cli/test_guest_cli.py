"""`labwright guest` without a daemon: help, and bad inventories as one line with exit 2."""

from __future__ import annotations

import pytest

from support.cli_child import run_cli


def lw(cli_env, *args):
    return run_cli(["guest", *args], env=cli_env, timeout=60)


def the_error(stderr: str) -> str:
    errors = [line for line in stderr.splitlines() if line.startswith("labwright: error: ")]
    assert len(errors) == 1 and stderr.splitlines()[-1] == errors[0], stderr
    return errors[0]


@pytest.mark.parametrize("command", ["plan", "apply", "show", "start", "stop", "destroy"])
def test_every_command_has_help(cli_env, command):
    proc = lw(cli_env, command, "--help")
    assert proc.returncode == 0 and "--inventory" in proc.stdout and "--guest" in proc.stdout


@pytest.mark.parametrize(("text", "fragment"), [
    ('g = [("@lxd/a", {"guest": {"backend": "lxd"}}), ("a", {"guest": {"backend": "lxd"}})]\n',
     "guest name 'a' is declared twice"),
    ('g = [("@pct/pve1/99", {"guest": {"backend": "proxmox", "template": "local:vztmpl/x.tar.zst"}})]\n',
     "@pct/pve1/99: VMID '99' is not a Proxmox container id (an integer from 100 to 999999999)"),
    ('g = [("@lxd/a", {"guest": {"backend": "lxd", "memory": "lots"}})]\n', "memory: 'lots' is not a size"),
    ("g = [\n", "fix the Python syntax"),
])
@pytest.mark.parametrize("command", ["plan", "apply", "show", "destroy"])
def test_bad_inventory_is_one_line_exit_2(cli_env, tmp_path, text, fragment, command):
    inv = tmp_path / "inv.py"
    inv.write_text(text)
    proc = lw(cli_env, command, str(inv), "--yes" if command == "destroy" else "--json")
    assert proc.returncode == 2
    assert fragment in the_error(proc.stderr)


def test_unknown_guest_name_lists_the_known_ones(cli_env, tmp_path):
    inv = tmp_path / "inv.py"
    inv.write_text('g = [("@lxd/a", {"guest": {"backend": "lxd"}})]\n')
    proc = lw(cli_env, "plan", str(inv), "--guest", "b")
    assert proc.returncode == 2 and "no guest named b (guests: a)" in the_error(proc.stderr)


def test_inventory_without_guests(cli_env, tmp_path):
    inv = tmp_path / "inv.py"
    inv.write_text('lab = ["@lxd/x"]\n')
    proc = lw(cli_env, "plan", str(inv))
    assert proc.returncode == 2 and proc.stdout == ""
    assert the_error(proc.stderr) == (f"labwright: error: inventory {inv}: no host has `guest` data, so there is "
                                      'nothing to do; declare one (a host with guest={"backend": "lxd", ...}, '
                                      "docs/guests.md) or pass the inventory that has them")
