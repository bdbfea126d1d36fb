"""`labwright desktop check`'s command path in a REAL lab container (a copy of the test lab's template, seconds):
each check's ``sh -c`` through LxdHost.run, exit codes and output as the guest gives them, a command the guest
lacks passed back as 125 rather than LXD's "Command not found" / "not executable" error, and the whole CLI
against a guest with no desktop.
The full desktop deploy is tests/integration/test_desktop_deploy.py (slow)."""

from __future__ import annotations

import json

import pytest

from labwright.cli import main
from labwright.hosts.lxd import LxdHost
from labwright.testing.lab_fixture import Lab

pytest_plugins = ["labwright.testing.lab_fixture"]
pytestmark = [pytest.mark.lab]


def test_lxd_host_run_gives_the_guests_exit_codes_and_output(lab: Lab, lab_container: str):
    host = LxdHost(lab_container, lab.client)
    result = host.run("echo 'a b'; printf 'x\\377'; echo err >&2")
    assert (result.rc, result.stdout, result.stderr) == (0, "a b\nx\ufffd", "err\n")  # bytes decoded
    assert (host.run("exit 3").rc, host.run("exit 3").stdout) == (3, "")
    # LXD fails an exec that exits 127 ("Command not found") or 126 ("Command not executable"): both come back 125.
    missing = host.run("labwright-no-such-command --version")
    assert (missing.rc, missing.stdout) == (125, "") and "labwright-no-such-command" in missing.stderr
    assert host.run("(exit 126)").rc == 125
    assert host.run("cat /proc/1/uid_map").ok


def test_desktop_check_on_a_guest_without_a_desktop_fails_each_check_with_its_fix(lab_container: str, capsys):
    assert main(["desktop", "check", lab_container, "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert (doc["guest"], doc["user"], doc["ok"]) == (lab_container, "desk", False)
    checks = {c["name"]: c for c in doc["checks"]}
    assert len(checks) == 12
    failed = [c for c in doc["checks"] if not c["ok"]]
    assert failed and all(c["cause"] and c["fix"] for c in failed)
