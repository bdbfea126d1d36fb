"""A probe start is decided by its deadline, also when the guest thrashes at its memory limit.

The llama.cpp candidate runs under DEADLINE_WRAPPER (a real-time timer that survives the exec, setitimer(2)), run
here for real as systemd would split its ExecStart; the agent's verdict of a start with no verdict by its deadline
(``overdue``: "oom" when the guest's anonymous memory reached its limit meanwhile, else "timeout"); the unit killed
through its cgroup's ``cgroup.kill`` or, without it, each pid of ``cgroup.procs`` (a real child process here).
tests/integration/test_probe_ceiling.py runs all of it against the real llama-server under a memory limit.
"""

from __future__ import annotations

import base64
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from labwright.agent import probe as waiter
from labwright.tuning.probe import DEADLINE_WRAPPER, cache_spec, llamacpp_target

MIB = 1024**2


def wrapped(deadline: float, *command: str) -> list[str]:
    """The argv systemd runs for ``ExecStart=DEADLINE_WRAPPER DEADLINE COMMAND`` (double quotes group a word, as
    systemd.service(5) "Command lines" reads them), with this interpreter for the guest's /usr/bin/python3."""
    argv = shlex.split(f"{DEADLINE_WRAPPER} {deadline:g} {shlex.join(command)}")
    assert argv[0] == "/usr/bin/python3"
    return [sys.executable, *argv[1:]]


def test_the_wrapper_ends_the_server_with_sigalrm_at_its_deadline():
    began = time.monotonic()
    run = subprocess.run(wrapped(0.5, "sleep", "30"), capture_output=True, timeout=20)
    took = time.monotonic() - began
    assert run.returncode == -signal.SIGALRM, run  # the exec'd server itself, killed by the kernel's timer
    assert 0.4 < took < 10, took


def test_a_server_that_exits_in_time_is_untouched_and_keeps_its_arguments_and_signals():
    run = subprocess.run(wrapped(20, "grep", "-e", "SigIgn", "-e", "Name", "/proc/self/status"),
                         capture_output=True, text=True, timeout=20)
    assert run.returncode == 0, run.stderr
    status = dict(line.split(":\t") for line in run.stdout.splitlines())
    assert status["Name"] == "grep"  # the server itself, exec'd in the wrapper's place (systemd's MainPID)
    ignored = int(status["SigIgn"], 16)
    # SIGXFSZ back to its default (Python ignores it); SIGPIPE ignored, as systemd's IgnoreSIGPIPE=yes has it.
    assert not ignored & 1 << (signal.SIGXFSZ - 1) and ignored & 1 << (signal.SIGPIPE - 1), hex(ignored)


@pytest.mark.parametrize(("anon_mib", "outcome"), [(505.0, "oom"), (497.0, "oom"), (480.0, "timeout")])
def test_a_start_still_loading_at_its_deadline_is_oom_when_the_guest_sat_at_its_limit(anon_mib, outcome):
    closest = {"limit_bytes": 512 * MIB, "anon_bytes": int(anon_mib * MIB), "usage_bytes": 512 * MIB}
    verdict = waiter.overdue(20.0, "killed at the deadline", ["loading model"], closest)
    assert verdict["outcome"] == outcome and verdict["overdue"] is True
    assert verdict["guest_memory"] == closest and verdict["lines"] == ["loading model"]
    if outcome == "oom":
        assert verdict["why"].startswith(f"thrashing at the guest's memory limit: still loading after 20s with "
                                         f"{anon_mib:.1f} of 512 MiB anonymous"), verdict["why"]
    else:
        assert verdict["why"] == "no verdict within 20s (killed at the deadline)"


def test_without_a_memory_limit_or_a_reading_it_stays_a_timeout():
    for closest in ({}, {"limit_bytes": None, "anon_bytes": 10 * MIB}, {"limit_bytes": 512 * MIB, "anon_bytes": None}):
        assert waiter.overdue(3.0, "still running", [], closest)["outcome"] == "timeout"


def test_an_alarm_exit_is_the_deadline_and_a_kill_exit_the_oom_killer(monkeypatch):
    """watch() on systemd's "Main process exited" entries, the journal and systemctl answered from a list."""
    exits = {"ALRM": "timeout", "14": "timeout", "KILL": "oom", "9": "oom"}
    for status, outcome in exits.items():
        entries = [{"_SYSTEMD_INVOCATION_ID": "inv", "MESSAGE": "load_model: loading"},
                   {"INVOCATION_ID": "inv", "EXIT_CODE": "killed", "EXIT_STATUS": status}]
        monkeypatch.setattr(waiter, "journal", lambda invocation, timeout=None, e=entries: e)
        monkeypatch.setattr(waiter, "props", lambda service, timeout=None: {"InvocationID": "inv",
                                                                            "ActiveState": "failed"})
        monkeypatch.setattr(waiter, "container_memory", lambda: {"limit_bytes": 512 * MIB, "anon_bytes": 100 * MIB})
        verdict = waiter.watch({"service": "llama-server.service", "timeout": 20}, "inv", time.monotonic())
        assert verdict["outcome"] == outcome, (status, verdict)
        assert verdict["exit"] == f"code=killed, status={status}"
        assert verdict["lines"] == ["load_model: loading"]


def test_a_start_thrashing_through_its_deadline_is_oom_from_the_memory_read_beside_the_loop(monkeypatch):
    """One look of the verdict loop can span the whole deadline on a thrashing guest (here: a journal read that
    returns only then); the guest's memory is read by a thread of its own meanwhile."""
    readings = iter([{"limit_bytes": 512 * MIB, "anon_bytes": 40 * MIB}] * 2 +
                    [{"limit_bytes": 512 * MIB, "anon_bytes": 504 * MIB}] * 1000)
    monkeypatch.setattr(waiter, "MEMORY_POLL", 0.01)
    at_limit = threading.Event()

    def memory() -> dict:
        reading = next(readings)
        if reading["anon_bytes"] > 500 * MIB:
            at_limit.set()
        return reading

    monkeypatch.setattr(waiter, "container_memory", memory)
    started = time.monotonic()

    def slow_journal(invocation: str, timeout: float | None = None) -> list:
        # Returns only once the memory thread has read the limit (however loaded the machine) and the deadline passed.
        assert at_limit.wait(30), "the memory thread never read the guest's memory at its limit"
        time.sleep(max(started + 0.5 - time.monotonic(), 0))  # the journal read that spans the whole deadline
        return [{"_SYSTEMD_INVOCATION_ID": "inv", "MESSAGE": "load_model: loading"}]

    monkeypatch.setattr(waiter, "journal", slow_journal)
    monkeypatch.setattr(waiter, "props", lambda service, timeout=None: {"InvocationID": "inv",
                                                                        "ActiveState": "active",
                                                                        "SubState": "running"})
    verdict = waiter.watch({"service": "llama-server.service", "timeout": 0.4}, "inv", started)
    assert verdict["outcome"] == "oom" and verdict["why"].startswith("thrashing at the guest's memory limit: "
                                                                     "still loading after 0.4s with 504.0 of 512 MiB")
    assert verdict["guest_memory"]["anon_bytes"] == 504 * MIB


def test_the_unit_is_killed_through_cgroup_kill_when_the_kernel_has_it(tmp_path, monkeypatch):
    unit = tmp_path / "unified" / "system.slice" / "llama-server.service"
    unit.mkdir(parents=True)
    (unit / "cgroup.kill").write_text("")
    monkeypatch.setattr(waiter, "CGROUP_ROOTS", (str(tmp_path / "v2"), str(tmp_path / "unified")))
    assert waiter.kill_unit("llama-server.service") == "cgroup"
    assert (unit / "cgroup.kill").read_text() == "1"
    assert not (tmp_path / "v2").exists()  # nothing created where the kernel has no such file


def test_without_cgroup_kill_each_process_of_the_unit_is_killed(tmp_path, monkeypatch):
    child = subprocess.Popen(["sleep", "60"])
    try:
        unit = tmp_path / "systemd" / "system.slice" / "llama-server.service"
        unit.mkdir(parents=True)
        Path(unit / "cgroup.procs").write_text(f"{child.pid}\n")
        monkeypatch.setattr(waiter, "CGROUP_ROOTS", (str(tmp_path / "systemd"),))
        assert waiter.kill_unit("llama-server.service") == 1
        assert child.wait(timeout=10) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


class StateGuest:
    """A guest whose helper answers the ``state`` request with a deployed llama-server unit."""

    name = "box"

    def __init__(self, python: bool = True):
        self.python = python

    def waiter(self, request: dict, timeout: float) -> dict:
        assert request["mode"] == "state" and request["paths"] == ["/usr/bin/python3"]
        return {"systemctl": True, "leftover": None, "paths": {"/usr/bin/python3": self.python},
                "props": {"LoadState": "loaded", "ActiveState": "active",
                          "FragmentPath": "/etc/systemd/system/llama-server.service"},
                "exec_start": "/usr/local/bin/llama-server --model /srv/m.gguf --port 8001"}

    def read_file(self, path: str) -> bytes | None:
        return None


def test_each_llamacpp_start_carries_its_deadline_and_the_dry_run_shows_the_plain_line():
    target = llamacpp_target(StateGuest(), "llama-server", cache_spec("llamacpp", "f16"))
    [probed] = target.render(8192, 20.0)
    text = base64.b64decode(probed["content_b64"]).decode()
    line = next(line for line in text.splitlines() if line.startswith("ExecStart=/"))
    assert line == (f"ExecStart={DEADLINE_WRAPPER} 20 /usr/local/bin/llama-server --model /srv/m.gguf --port 8001 "
                    "--ctx-size 8192 --cache-type-k f16 --cache-type-v f16")
    [dry] = target.render(8192)
    assert "ExecStart=/usr/local/bin/llama-server --model /srv/m.gguf --port 8001 --ctx-size 8192" in \
        base64.b64decode(dry["content_b64"]).decode()


def test_a_guest_without_usr_bin_python3_gets_the_plain_line_and_the_watchdog_alone():
    target = llamacpp_target(StateGuest(python=False), "llama-server", cache_spec("llamacpp", "f16"))
    [probed] = target.render(8192, 20.0)
    assert "ExecStart=/usr/local/bin/llama-server --model /srv/m.gguf" in base64.b64decode(
        probed["content_b64"]).decode()


# A stand-in server: holds 16 MiB (touched, so resident) and answers every request 200, on a socket the test bound
# (so it is reachable the moment it runs; the deadline counts from the wrapper's exec).
SERVER = """import socket, sys
held = bytearray(16 << 20)
for at in range(0, len(held), 4096):
    held[at] = 1
listener = socket.socket(fileno=int(sys.argv[1]))
while True:
    conn, _ = listener.accept()
    conn.recv(65536)
    conn.sendall(b"HTTP/1.0 200 OK\\r\\nContent-Length: 0\\r\\n\\r\\n")
    conn.close()
"""
SERVER_DEADLINE = 3.0


class Unit:
    """systemd's view of one start, read off a real process (there is no systemd here): our invocation running while
    the process runs, then its end as systemd's "Main process exited" journal entry (code=killed, status=ALRM)."""

    def __init__(self, child: subprocess.Popen) -> None:
        self.child = child

    def props(self, service: str, timeout: float | None = None) -> dict:
        if self.child.poll() is None:
            return {"InvocationID": "inv", "ActiveState": "active", "SubState": "running",
                    "MainPID": str(self.child.pid)}
        return {"InvocationID": "inv", "ActiveState": "failed", "SubState": "failed", "MainPID": "0"}

    def journal(self, invocation: str, timeout: float | None = None) -> list:
        entries: list[dict] = [{"_SYSTEMD_INVOCATION_ID": "inv", "MESSAGE": "main: server is listening"}]
        code = self.child.poll()
        if code is not None and code < 0:
            entries.append({"INVOCATION_ID": "inv", "EXIT_CODE": "killed",
                            "EXIT_STATUS": signal.Signals(-code).name.removeprefix("SIG")})
        elif code is not None:
            entries.append({"INVOCATION_ID": "inv", "EXIT_CODE": "exited", "EXIT_STATUS": str(code)})
        return entries


@pytest.fixture
def edge_server(monkeypatch):
    """A real server under the real DEADLINE_WRAPPER (its SIGALRM SERVER_DEADLINE s after the exec), healthy at
    once: every start judged healthy here is one the deadline's timer ends moments later, as a start near the edge
    that came up just before its deadline. Yields the process, its Unit and the health URL."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    child = subprocess.Popen(wrapped(SERVER_DEADLINE, sys.executable, "-I", "-S", "-c", SERVER,
                                     str(listener.fileno())), pass_fds=(listener.fileno(),))
    unit = Unit(child)
    monkeypatch.setattr(waiter, "props", unit.props)
    monkeypatch.setattr(waiter, "journal", unit.journal)
    monkeypatch.setattr(waiter, "container_memory", lambda: {"limit_bytes": 512 * MIB, "anon_bytes": 300 * MIB,
                                                             "usage_bytes": 400 * MIB})
    try:
        yield child, unit, f"http://127.0.0.1:{listener.getsockname()[1]}/health"
    finally:
        listener.close()
        if child.poll() is None:
            child.kill()
        child.wait(timeout=10)


def test_an_ok_start_keeps_its_peak_when_the_deadline_ends_it_right_after_it_answered(edge_server, monkeypatch):
    """The loaded suite's flake: a start came up just before its deadline, the helper saw its health, then waited on
    systemctl (slow under load) while the wrapper's SIGALRM ended the server, and only then read VmHWM: "ok" with
    peak_rss_bytes None. Here systemctl returns only once the server is gone; the peak is still there."""
    child, unit, url = edge_server
    answered = threading.Event()
    real_healthy, real_props = waiter.healthy, unit.props

    def healthy(address: str) -> bool:
        ok = real_healthy(address)
        if ok:
            answered.set()
        return ok

    def slow_props(service: str, timeout: float | None = None) -> dict:
        if answered.is_set():  # systemctl under load: answers after the deadline's SIGALRM ended the server
            child.wait(timeout=30)
        return real_props(service, timeout)

    monkeypatch.setattr(waiter, "healthy", healthy)
    monkeypatch.setattr(waiter, "props", slow_props)
    verdict = waiter.watch({"service": "llama-server.service", "timeout": 20, "health_url": url}, "inv",
                           time.monotonic())
    assert child.wait(timeout=30) == -signal.SIGALRM  # the deadline did end it, after it answered
    assert verdict["outcome"] == "ok" and verdict["why"] == "health", verdict
    assert verdict["peak_rss_bytes"] >= 16 * MIB, verdict
    assert verdict["guest_memory"]["anon_bytes"] == 300 * MIB


def test_a_start_ended_before_its_memory_was_read_is_its_deadline_not_an_ok_without_a_peak(edge_server,
                                                                                          monkeypatch):
    """The helper is descheduled right after the health answer (a guest thrashing at its limit) until the deadline's
    SIGALRM has ended the server: its memory can no longer be read, so the start is not "ok" (before: "ok" with
    peak_rss_bytes None); its exit decides, and the why says what was lost."""
    child, _, url = edge_server
    real_healthy = waiter.healthy

    def stalled_healthy(address: str) -> bool:
        ok = real_healthy(address)
        if ok:
            child.wait(timeout=30)
        return ok

    monkeypatch.setattr(waiter, "healthy", stalled_healthy)
    verdict = waiter.watch({"service": "llama-server.service", "timeout": 20, "health_url": url}, "inv",
                           time.monotonic())
    assert child.returncode == -signal.SIGALRM
    assert verdict["outcome"] == "timeout" and verdict["exit"] == "code=killed, status=ALRM", verdict
    assert "SIGALRM" in verdict["why"] and "ended before its memory could be read" in verdict["why"], verdict["why"]
    assert verdict.get("peak_rss_bytes") is None
