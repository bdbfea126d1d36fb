"""LxdGuest on the hosts seam (LxdHost): the waiter (the agent's probe subcommand, the agent already on the guest)
runs as an argv (no shell), an OOM-killed waiter (exit 137) is asked again for the same invocation, a missing file is
None and the daemon's refusal is its own error.
A stand-in LXD client; tests/integration/test_probe_ceiling.py runs it for real."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import IO, Any, cast

import pytest

from labwright.agent import zipapp
from labwright.errors import BadInput, LxdError, LxdNotFound, OperationFailed
from labwright.lxd.client import Endpoint, ExecResult, LxdClient
from labwright.tuning.probe_guest import LxdGuest


class StandInClient:
    def __init__(self, answers: list[ExecResult], status: str = "Running",
                 files: dict[str, bytes | Exception] | None = None, endpoint: Endpoint | None = None):
        self.answers, self.status, self.files = answers, status, files or {}
        self.endpoint = endpoint or Endpoint(socket_path="/var/lib/lxd/unix.socket")  # LXD's, as LxdClient has one
        self.calls: list[tuple[str, list[str]]] = []
        self.shell: list[str] = []

    def instance(self, name: str) -> dict[str, Any]:
        if name != "box":
            raise LxdNotFound(f"GET /1.0/instances/{name}: Instance not found", 404)
        return {"name": name, "status": self.status}

    def exec(self, name: str, command: Sequence[str], **_: Any) -> ExecResult:
        if command[0] == "sh":  # hosts.agent's look for the agent: it is there, root's, with its sha256
            self.shell.append(command[2])
            return ExecResult(0, b"", b"")
        self.calls.append((name, list(command)))
        return self.answers.pop(0)

    def pull_file(self, name: str, path: str, out: IO[bytes]) -> int:
        data = self.files.get(path, LxdNotFound(f"GET {name}:{path}: not found", 404))
        if isinstance(data, Exception):
            raise data
        out.write(data)
        return len(data)


def lines(*docs: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(doc).encode() + b"\n" for doc in docs)


def guest(client: StandInClient, target: str = "box") -> LxdGuest:
    return LxdGuest(target, cast(LxdClient, client))


def test_the_waiter_is_one_argv_and_its_answer_is_returned():
    client = StandInClient([ExecResult(0, lines({"invocation": "7"}, {"outcome": "fits", "seconds": 1.5}), b"")])
    request = {"mode": "probe", "unit": "llama-server.service"}
    assert guest(client).waiter(request, 60) == {"outcome": "fits", "seconds": 1.5}
    assert client.calls == [("box", ["python3", zipapp.remote_path(), "probe", json.dumps(request)])]
    assert len(client.shell) == 1 and zipapp.sha256() in client.shell[0]  # the agent looked for once


@pytest.mark.parametrize("killed", [137, -1, 9])
def test_an_oom_killed_waiter_is_asked_again_to_watch_the_same_invocation(killed):
    client = StandInClient([ExecResult(killed, lines({"invocation": "42", "started": True}), b"Killed\n"),
                            ExecResult(0, lines({"outcome": "oom", "seconds": 3.0}), b"")])
    answer = guest(client).waiter({"mode": "probe", "unit": "u"}, 60)
    assert answer == {"outcome": "oom", "seconds": 3.0, "waiter_killed": True}
    again = json.loads(client.calls[1][1][3])
    assert (again["mode"], again["invocation"], again["unit"]) == ("watch", "42", "u") and again["spent"] >= 0


def test_a_waiter_that_fails_otherwise_names_its_exit_and_last_stderr_line():
    client = StandInClient([ExecResult(1, b"", b"Traceback...\nModuleNotFoundError: No module named 'x'\n")])
    with pytest.raises(OperationFailed) as info:
        guest(client).waiter({"mode": "probe"}, 60)
    assert str(info.value) == ("--guest box: the probe helper failed (exit 1): [\"ModuleNotFoundError: No module "
                               "named 'x'\"]; the guest needs python3 and systemd")
    client = StandInClient([ExecResult(137, lines({"invocation": "1"}), b""), ExecResult(1, b"", b"")])
    with pytest.raises(OperationFailed, match=r"failed \(exit 1\): no output; the guest needs python3"):
        guest(client).waiter({"mode": "probe"}, 60)


def test_read_file_is_none_when_missing_and_the_daemon_refusal_otherwise():
    refused = LxdError("GET box:/etc: /etc is a directory", 400)
    client = StandInClient([], files={"/cfg.yml": b"a: 1\n", "/etc": refused, "/gone": LxdError("gone", 404)})
    box = guest(client)
    assert box.read_file("/cfg.yml") == b"a: 1\n"
    assert box.read_file("/missing") is None and box.read_file("/gone") is None
    with pytest.raises(LxdError) as info:
        box.read_file("/etc")
    assert info.value is refused


@pytest.mark.parametrize(("target", "status", "message"), [
    ("other", "Running", "--guest other: no such LXD instance; list them with `lxc list`"),
    ("bad_name", "Running", "--guest bad_name: no such LXD instance; list them with `lxc list`"),
    ("box", "Stopped", "--guest box: the instance is stopped; start it first (`lxc start box`)"),
])
def test_a_guest_that_is_not_there_or_not_running_is_bad_input(target, status, message):
    with pytest.raises(BadInput) as info:
        guest(StandInClient([], status=status), target)
    assert str(info.value) == message
