"""LxdHost: the shell-line ``run`` its Host callers use, the argv-exact ``exec`` the probe and `desktop check` use,
``get`` telling a missing file (FileNotFoundError) from the daemon refusing (OSError). A stand-in LXD client."""

from __future__ import annotations

from collections.abc import Sequence
from typing import IO, Any, cast

import pytest

from labwright.errors import LxdError, LxdNotFound
from labwright.hosts.lxd import LxdHost
from labwright.lxd.client import ExecResult, LxdClient


class StandInClient:
    def __init__(self, answer: ExecResult | Exception = ExecResult(0, b"", b""),
                 files: dict[str, bytes | Exception] | None = None):
        self.answer, self.files = answer, files or {}
        self.calls: list[tuple[str, list[str]]] = []

    def exec(self, name: str, command: Sequence[str], **_: Any) -> ExecResult:
        self.calls.append((name, list(command)))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer

    def pull_file(self, name: str, path: str, out: IO[bytes]) -> int:
        data = self.files.get(path, LxdNotFound(f"GET {name}:{path}: not found", 404))
        if isinstance(data, Exception):
            raise data
        out.write(data)
        return len(data)


def host(client: StandInClient, target: str = "box") -> LxdHost:
    return LxdHost(target, cast(LxdClient, client))


def test_run_is_a_shell_line_and_exec_is_the_argv_as_it_is():
    client = StandInClient(ExecResult(137, b"\xff{}\n", b"Killed\n"))
    done = host(client).exec(["python3", "-c", "print('a b')", '{"x": 1}'])
    assert client.calls[-1] == ("box", ["python3", "-c", "print('a b')", '{"x": 1}'])
    assert (done.exit_code, done.stdout, done.stderr) == (137, b"\xff{}\n", b"Killed\n")  # bytes as they came
    result = host(client).run(["echo", "a b"], timeout=5)
    assert client.calls[-1] == ("box", ["timeout", "5", "sh", "-c", "echo 'a b'"])
    assert (result.rc, result.stderr) == (137, "Killed\n")


def test_a_daemon_failure_is_exit_255_from_run_and_raised_by_exec():
    client = StandInClient(LxdError("exec in box: Instance is not running", 400))
    result = host(client, "lab:box").run("true")
    assert (result.rc, result.stderr) == (255, "container lab:box: exec in box: Instance is not running")
    with pytest.raises(LxdError, match="Instance is not running"):
        host(client).exec(["true"])


def test_get_tells_a_missing_file_from_a_refusal():
    client = StandInClient(files={"/etc/x": b"data", "/etc/dir": LxdError("GET box:/etc/dir: forbidden", 403),
                                  "/old": LxdError("GET box:/old: gone", 404)})
    assert host(client).get("/etc/x") == b"data"
    for missing in ("/nope", "/old"):
        with pytest.raises(FileNotFoundError, match=f"cannot read {missing} in container box"):
            host(client).get(missing)
    with pytest.raises(OSError, match="cannot read /etc/dir in container box: GET box:/etc/dir: forbidden") as info:
        host(client).get("/etc/dir")
    assert not isinstance(info.value, FileNotFoundError)
