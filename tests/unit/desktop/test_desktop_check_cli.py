"""`labwright desktop check` on the hosts seam: each check is one ``sh -c`` through LxdHost.run, exits 126 and 127
come back as 125 (LXD fails those execs, "Command not executable" / "not found", instead of giving the output),
the daemon failing is one error line naming the guest. A stand-in LXD client behind the real LxdHost;
tests/integration/test_desktop_check_lab.py runs the same path in a real lab container."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, cast

import pytest

from labwright.cli import desktop as desktop_cli
from labwright.cli import main
from labwright.errors import LxdError
from labwright.lxd.client import ExecResult, LxdClient

TAIL = "\nrc=$?; case $rc in 126|127) exit 125;; esac; exit $rc"


class StandInClient:
    def __init__(self, instance: dict[str, Any] | None, outputs: dict[str, ExecResult] | None = None,
                 fail: Exception | None = None):
        self.instance, self.outputs, self.fail = instance, outputs or {}, fail
        self.calls: list[list[str]] = []
        self.closed = False

    def instance_or_none(self, name: str) -> dict[str, Any] | None:
        return self.instance

    def exec(self, name: str, command: Sequence[str], **_: Any) -> ExecResult:
        self.calls.append(list(command))
        if self.fail is not None:
            raise self.fail
        script = command[2].removesuffix(TAIL)
        return self.outputs.get(script, ExecResult(1, b"", b""))

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def stand_in(monkeypatch):
    def use(client: StandInClient) -> StandInClient:
        # The CLI's own _host (LxdHost with raise_errors) over the stand-in client.
        monkeypatch.setattr(desktop_cli, "resolve_endpoint", lambda remote, flavour=None: ("stand-in", None))
        monkeypatch.setattr(desktop_cli, "LxdClient", lambda endpoint, project=None: cast(LxdClient, client))
        return client
    return use


def test_each_check_is_one_sh_c_and_a_recorded_user_is_read(stand_in, capsys):
    record = json.dumps({"user": "anna", "port": 3390}).encode()
    client = stand_in(StandInClient({"name": "desk1", "status": "Running", "expanded_config": {}},
                                    {"cat /etc/labwright/desktop.json 2>/dev/null": ExecResult(0, record, b"")}))
    assert main(["desktop", "check", "desk1", "--json"]) == 1  # a guest with nothing on it fails the checks
    doc = json.loads(capsys.readouterr().out)
    assert (doc["guest"], doc["user"], doc["ok"]) == ("desk1", "anna", False)
    assert doc["checks"][0] == {"name": "LXD config: unprivileged, confined", "ok": True,
                                "detail": "no privilege or raw AppArmor/seccomp/LXC override",
                                "cause": "the instance is privileged or its confinement was loosened",
                                "fix": "lxc config unset desk1 KEY for each of them, then restart the guest"}
    assert len(client.calls) > 5 and client.closed
    assert all(call[:2] == ["sh", "-c"] and call[2].endswith(TAIL) and len(call) == 3 for call in client.calls)
    assert client.calls[0][2] == "cat /etc/labwright/desktop.json 2>/dev/null" + TAIL


@pytest.mark.parametrize(("client", "message", "code"), [
    (StandInClient(None), "guest desk1: no such LXD instance (see `lxc list`)", 2),
    (StandInClient({"status": "Stopped"}), "guest desk1 is Stopped; start it first (`lxc start desk1`)", 2),
    (StandInClient({"status": "Running"}, fail=LxdError("exec in desk1: websocket gone", 500)),
     "guest desk1: exec in desk1: websocket gone", 1),
])
def test_a_missing_stopped_or_unreachable_guest_is_one_error_line(stand_in, capsys, client, message, code):
    stand_in(client)
    assert main(["desktop", "check", "desk1"]) == code
    assert capsys.readouterr().err.strip().splitlines() == [f"labwright: error: {message}"]
    assert client.closed


def test_a_name_lxd_cannot_have_is_refused_before_the_daemon_is_asked(capsys):
    assert main(["desktop", "check", "lab:desk_1"]) == 2
    assert capsys.readouterr().err.strip() == ("labwright: error: guest 'lab:desk_1' is not an LXD instance name "
                                               "(NAME, REMOTE:NAME or @lxd/NAME); use 1-63 letters, digits and "
                                               "hyphens, starting with a letter (see `lxc list`)")


@pytest.mark.parametrize(("args", "words"), [
    (["desk1", "--port", "70000"], "--port 70000: not a TCP port; give 1-65535"),
    (["desk1", "--port", "0"], "--port 0: not a TCP port"),
    (["desk1", "--port", "-1"], "--port -1: not a TCP port"),
    (["desk1", "--user", "a b"], "--user 'a b': not a Linux user name"),
    (["desk1", "--user", "$(id)"], "--user '$(id)': not a Linux user name"),
    (["a b"], "guest 'a b' is not an LXD instance name"),
    (["@lxd/$(id)"], "guest '@lxd/$(id)' is not an LXD instance name"),
])
def test_impossible_values_are_refused_before_the_daemon(monkeypatch, tmp_path, capsys, args, words):
    # No daemon here: a value that reached it would fail on the socket, not with this line.
    monkeypatch.setenv("LXD_DIR", str(tmp_path / "no-lxd"))
    assert main(["desktop", "check", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err, err
