"""The exec agent (labwright.lxd.session.AGENT_SOURCE) run locally, under every python3 found here.

Containers bring their own python3, possibly old, so the agent is exercised under each interpreter
on this machine (3.7+ where pyenv has them); the protocol is spoken directly on its stdin/stdout.
"""

from __future__ import annotations

import ast
import base64
import glob
import json
import os
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from labwright.lxd.session import AGENT_SOURCE, KILL_AFTER
from labwright.testing.waiting import wait_for


def interpreters() -> list[tuple[str, str]]:
    found: dict[str, str] = {}
    candidates = [sys.executable, "/usr/bin/python3", shutil.which("python3") or "",
                  *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.*/bin/python3")))]
    candidates += [shutil.which(f"python3.{minor}") or "" for minor in range(7, 15)]
    for path in filter(None, candidates):
        try:
            version = subprocess.run([path, "-c", "import sys; v = sys.version_info; "
                                      "print(v[:2] >= (3, 7), '%d.%d.%d' % v[:3])"],
                                     capture_output=True, text=True, timeout=20).stdout.split()
        except (OSError, subprocess.TimeoutExpired):
            continue
        if version and version[0] == "True":
            found.setdefault(version[1].strip(), path)
    return sorted(found.items(), key=lambda item: tuple(int(part) for part in item[0].split(".")))


PYTHONS = interpreters()
OLDEST = PYTHONS[0][1]


def _processes_naming(text: str) -> list[int]:
    """PIDs whose command line contains ``text`` (this test's own process excluded)."""
    found = []
    for cmdline in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            if text.encode() in Path(cmdline).read_bytes():
                found.append(int(cmdline.split("/")[2]))
        except OSError:
            continue
    return [pid for pid in found if pid != os.getpid()]


class Agent:
    def __init__(self, python: str, env: dict[str, str] | None = None):
        environment = env if env is not None else {"PATH": os.environ["PATH"], "LANG": "C.UTF-8"}
        self.proc = subprocess.Popen([python, "-c", AGENT_SOURCE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env={**environment, "PYTHONCOERCECLOCALE": "0"})
        self.hello = self.read()
        self.next_id = 1

    def read(self) -> dict:
        assert self.proc.stdout is not None
        head = self.proc.stdout.read(4)
        assert len(head) == 4, self.proc.stderr.read().decode() if self.proc.stderr else ""
        return json.loads(self.proc.stdout.read(struct.unpack(">I", head)[0]))

    def send_raw(self, body: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(struct.pack(">I", len(body)) + body)
        self.proc.stdin.flush()

    def run(self, command: str, stdin: bytes | None = None, timeout: float | None = None) -> dict:
        rid, self.next_id = self.next_id, self.next_id + 1
        self.send_raw(json.dumps({"id": rid, "command": command, "timeout": timeout,
                                  "stdin": None if stdin is None else base64.b64encode(stdin).decode()}).encode())
        answer = self.read()
        assert answer["id"] == rid
        if "error" not in answer:
            answer["stdout"] = base64.b64decode(answer["stdout"])
            answer["stderr"] = base64.b64decode(answer["stderr"])
        return answer

    def close(self) -> tuple[int, bytes, bytes]:
        """Wait for the agent to end (its stdin closed); its exit status and any further output."""
        assert self.proc.stdout is not None and self.proc.stderr is not None
        out, err = self.proc.stdout.read(), self.proc.stderr.read()
        return self.proc.wait(10), out, err


@pytest.fixture(params=[path for _, path in PYTHONS], ids=[version for version, _ in PYTHONS])
def agent(request):
    agent = Agent(request.param)
    yield agent
    if agent.proc.poll() is None:
        agent.proc.kill()
        agent.proc.wait()


def test_source_is_python_3_7_syntax():
    ast.parse(AGENT_SOURCE, feature_version=(3, 7))
    assert "labwright-agent" in AGENT_SOURCE
    assert any(p for p in PYTHONS), "no python3 to run the agent with"


def test_hello_exit_codes_and_exact_bytes(agent):
    assert agent.hello["hello"] == "labwright-agent" and agent.hello["id"] == 0
    assert agent.hello["python"].startswith("3.")
    answer = agent.run("printf 'out\\000\\377'; printf 'err\\n' >&2; exit 7")
    assert (answer["exit_code"], answer["stdout"], answer["stderr"], answer["timed_out"]) == (7, b"out\0\xff", b"err\n",
                                                                                              False)
    assert agent.run("kill -TERM $$")["exit_code"] == 128 + signal.SIGTERM
    assert agent.run("kill -KILL $$")["exit_code"] == 128 + signal.SIGKILL


def test_stdin_both_ways_and_none(agent):
    data = os.urandom(3_000_000)  # far more than a pipe holds: written while output is read
    answer = agent.run("cat; cat >&2 </dev/null; echo done >&2", stdin=data)
    assert answer["stdout"] == data and answer["stderr"] == b"done\n"
    assert agent.run("cat", stdin=b"")["stdout"] == b""
    assert agent.run("test -t 0 || cat; echo end")["stdout"] == b"end\n"  # no stdin: /dev/null
    answer = agent.run("exec 0<&-; echo ignored stdin", stdin=os.urandom(1_000_000))
    assert answer["exit_code"] == 0 and answer["stdout"] == b"ignored stdin\n"


def test_big_outputs_on_both_streams_at_once(agent):
    answer = agent.run("head -c 5000000 /dev/zero | tr '\\0' a; head -c 4000000 /dev/zero | tr '\\0' b >&2")
    assert answer["stdout"] == b"a" * 5_000_000 and answer["stderr"] == b"b" * 4_000_000


def test_unicode_and_undecodable_command_bytes(agent):
    assert agent.run("printf %s 'ünï ✓'")["stdout"] == "ünï ✓".encode()
    # pyinfra's commands are str; bytes that were not UTF-8 travel as surrogate escapes.
    command = b"printf %s '\xff\xfe'".decode("utf-8", "surrogateescape")
    assert agent.run(command)["stdout"] == b"\xff\xfe"


def test_timeout_kills_the_process_group(agent, tmp_path):
    marker = tmp_path / "survivor"
    started = time.monotonic()
    answer = agent.run(f"(sleep 1; touch {marker}) & sleep 30", timeout=0.3)
    assert answer["timed_out"] and answer["exit_code"] == 124
    assert time.monotonic() - started < 15, "the timed-out command ran on towards its sleep 30"
    # The background subshell's command line names the marker: once no process does, nothing is left to touch it
    # (a surviving child would still be listed, then create the marker).
    wait_for("the timed-out command's background child to be gone",
             lambda: not _processes_naming(str(marker)), timeout=30, every=0.05)
    assert not marker.exists(), "a background child of a timed-out command survived"
    assert agent.run("echo next")["stdout"] == b"next\n"


def test_timeout_escalates_to_kill():
    agent = Agent(OLDEST)
    started = time.monotonic()
    answer = agent.run("trap '' TERM; sleep 60", timeout=0.5)
    took = time.monotonic() - started
    assert answer["timed_out"] and answer["exit_code"] == 137
    assert KILL_AFTER <= took < KILL_AFTER + 30, "not killed after TERM was ignored (the command sleeps 60 s)"
    agent.proc.kill()
    agent.proc.wait()


def test_closed_or_held_output(agent):
    answer = agent.run("echo a; exec >&-; echo b >&2; sleep 0.2; exit 4")
    assert (answer["exit_code"], answer["stdout"], answer["stderr"]) == (4, b"a\n", b"b\n")
    started = time.monotonic()
    answer = agent.run("exec >&- 2>&-; sleep 0.4; exit 6")
    assert answer["exit_code"] == 6 and 0.4 <= time.monotonic() - started < 15
    started = time.monotonic()
    answer = agent.run("sleep 20 & echo started")
    assert answer["stdout"] == b"started\n" and time.monotonic() - started < 15, "waited for the background sleep 20"
    assert agent.run("echo next")["stdout"] == b"next\n"


def test_failures_become_error_answers(agent):
    agent.send_raw(b"{not json")
    answer = agent.read()
    assert answer["id"] is None and answer["started"] is False and "JSONDecodeError" in answer["error"]
    agent.send_raw(json.dumps({"id": 41, "stdin": None}).encode())
    answer = agent.read()
    assert answer == {"id": 41, "error": "KeyError: 'command'", "started": False}
    assert agent.run("echo still fine")["stdout"] == b"still fine\n"


def test_eof_ends_the_agent_quietly(agent):
    agent.run("true")
    assert agent.proc.stdin is not None
    agent.proc.stdin.close()
    code, out, err = agent.close()
    assert (code, out, err) == (0, b"", b"")


def test_environment_is_passed_through_unchanged():
    """No PYTHONCOERCECLOCALE, and no LC_CTYPE that Python's C-locale coercion would add."""
    agent = Agent(OLDEST, env={"PATH": os.environ["PATH"], "KEEP": "me"})
    env = dict(line.split("=", 1) for line in agent.run("env")["stdout"].decode().splitlines())
    env.pop("PWD", None)
    env.pop("SHLVL", None)
    env.pop("_", None)
    assert env == {"PATH": os.environ["PATH"], "KEEP": "me"}
    assert agent.run("printf %s 'ü'")["stdout"] == "ü".encode()
    agent.proc.kill()
    agent.proc.wait()


NASTY = ["true", "", "echo 'q' \"d\" $HOME `echo x` \\ ; | & * end", "printf '%s\\n' \"$0\" \"$#\"",
         "a=1; echo $a", "exit 3", "echo ü ✓ >&2", "'\"'\"'", "echo a\nb", "~", "echo *"]


@pytest.mark.parametrize("script", NASTY)
def test_pyinfra_wrapped_commands_run_as_through_both_shells(script):
    """`sh -c <quoted>` skips the outer shell (which would only exec the inner one): same results."""
    agent = Agent(OLDEST)
    for command in ("sh -c " + shlex.quote(script), f"sh -c {shlex.quote(script)} && echo more",
                    f"env X=1 sh -c {shlex.quote(script)}"):
        want = subprocess.run(["sh", "-c", command], capture_output=True, cwd=os.getcwd(),
                              env={"PATH": os.environ["PATH"], "LANG": "C.UTF-8"})
        got = agent.run(command)
        assert (got["exit_code"], got["stdout"], got["stderr"]) == (want.returncode, want.stdout, want.stderr)
    agent.proc.kill()
    agent.proc.wait()
