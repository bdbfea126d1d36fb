"""`labwright desktop check`'s command path in a REAL lab container (a copy of the test lab's template, seconds):
each check's ``sh -c`` through LxdHost.exec, exit codes and output as the guest gives them, a command the guest
lacks passed back as 125 rather than LXD's "Command not found" / "not executable" error, and the whole CLI
against a guest with no desktop.
The full desktop deploy is tests/integration/test_desktop_deploy.py (slow)."""

from __future__ import annotations

import json

import pytest

from labwright.cli import main
from labwright.cli.desktop import runner
from labwright.hosts.lxd import LxdHost
from labwright.testing.lab_fixture import Lab

pytest_plugins = ["labwright.testing.lab_fixture"]
pytestmark = [pytest.mark.lab]


def test_the_check_runner_gives_the_guests_exit_codes_and_output(lab: Lab, lab_container: str):
    run = runner(LxdHost(lab_container, lab.client))
    assert run("echo 'a b'; printf 'x\\377'; echo err >&2") == (0, "a b\nx\ufffd")  # stdout only, bytes decoded
    assert run("exit 3") == (3, "")
    # LXD fails an exec that exits 127 ("Command not found") or 126 ("Command not executable"): both come back 125.
    assert run("labwright-no-such-command --version") == (125, "")
    assert run("(exit 126)") == (125, "")
    assert run("cat /proc/1/uid_map")[0] == 0


def test_desktop_check_on_a_guest_without_a_desktop_fails_each_check_with_its_fix(lab_container: str, capsys):
    assert main(["desktop", "check", lab_container, "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert (doc["guest"], doc["user"], doc["ok"]) == (lab_container, "desk", False)
    checks = {c["name"]: c for c in doc["checks"]}
    assert len(checks) == 12
    failed = [c for c in doc["checks"] if not c["ok"]]
    assert failed and all(c["cause"] and c["fix"] for c in failed)
