"""LxdHost: the shell-line ``run`` its Host callers use (with the 126/127 fold), the argv-exact ``exec`` the probe
uses, ``get`` telling a missing file (FileNotFoundError) from the daemon refusing (OSError). A stand-in LXD client."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from typing import IO, Any, cast

import pytest

from labwright.errors import LxdError, LxdNotFound
from labwright.hosts.lxd import LxdHost
from labwright.lxd.client import ExecResult, LxdClient

FOLD = "rc=$?; case $rc in 126|127) exit 125;; esac; exit $rc"


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
    assert client.calls[-1] == ("box", ["timeout", "5", "sh", "-c", f"echo 'a b'\n{FOLD}"])
    assert (result.rc, result.stderr) == (137, "Killed\n")


def test_run_folds_a_commands_own_126_and_127_into_125_so_lxd_returns_its_output():
    """LXD's exec fails without output on a process exit 126/127; the argv run sends keeps them out (run here by
    a real sh, as it would run in the container)."""
    client = StandInClient(ExecResult(0, b"", b""))
    for command, rc in (("echo out; no-such-command-lw", 125), ("exit 126", 126), ("false", 1), ("true", 0)):
        host(client).run(command)
        done = subprocess.run(client.calls[-1][1], capture_output=True, text=True, check=False)
        assert done.returncode == rc, command
    host(client).run("echo out; no-such-command-lw")
    done = subprocess.run(client.calls[-1][1], capture_output=True, text=True, check=False)
    assert (done.returncode, done.stdout) == (125, "out\n") and "no-such-command-lw" in done.stderr


def test_a_daemon_failure_is_exit_255_from_run_and_raised_by_exec():
    client = StandInClient(LxdError("exec in box: Instance is not running", 400))
    result = host(client, "lab:box").run("true")
    assert (result.rc, result.stderr) == (255, "container lab:box: exec in box: Instance is not running")
    with pytest.raises(LxdError, match="Instance is not running"):
        host(client).exec(["true"])
    with pytest.raises(LxdError, match="Instance is not running"):
        LxdHost("box", cast(LxdClient, client), raise_errors=True).run("true")


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
