"""The verify suites' lxc:// commands: an answer LXD lost (no end mark on stderr) is asked again; a command's own
answer (stdout, stderr, exit status, nothing printed at all) reaches testinfra exactly as the command gave it.

The commands run for real through ``sh`` here: only ``lxc exec NAME --mode=non-interactive --`` is taken off, and a
lost answer is LXD's (exit 0, nothing on either stream)."""

from __future__ import annotations

import os
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from testinfra.backend.base import CommandResult
from testinfra.backend.lxc import LxcBackend

from labwright.verify.conftest import END_MARK, LXC_TRIES, steady_lxc_run

PREFIX = "lxc exec %s --mode=non-interactive -- "


class Local(LxcBackend):
    """LxcBackend whose ``lxc exec`` runs the command here; the first ``lose`` answers are lost, as LXD loses them."""

    def __init__(self, lose: int = 0, lose_stdout: int = 0):
        super().__init__("g1")
        self.lose, self.lose_stdout, self.asked = lose, lose_stdout, 0

    def run_local(self, command: str, *args: str) -> CommandResult:
        assert command.startswith(PREFIX)
        self.asked += 1
        if self.lose:
            self.lose -= 1
            return self.result(0, b"", b"", b"")
        line = self.quote(command.removeprefix(PREFIX), *args[1:])
        done = subprocess.run(line, shell=True, capture_output=True, timeout=30)
        if self.lose_stdout:   # one stream's websocket lost, the other delivered
            self.lose_stdout -= 1
            return self.result(done.returncode, line.encode(), b"", done.stderr)
        return self.result(done.returncode, line.encode(), done.stdout, done.stderr)


def run(backend: Local, command: str, *args: str) -> CommandResult:
    return steady_lxc_run(backend, command, *args)


def test_a_lost_answer_is_asked_again():
    backend = Local(lose=1)
    out = run(backend, "ps -o user= -p %s", "1")
    assert backend.asked == 2 and out.rc == 0 and out.stdout.strip() and out.stderr == ""


def test_lost_every_time_is_one_clear_error_after_the_last_try(monkeypatch):
    """Not an empty answer: testinfra read an empty ``uname -s`` as an unknown system and raised
    NotImplementedError from its service module, which named nothing of what happened."""
    monkeypatch.setattr("labwright.verify.conftest.LXC_RETRY_PAUSE", 0.001)
    backend = Local(lose=LXC_TRIES)
    with pytest.raises(RuntimeError, match=r"lxc exec g1: the daemon lost the answer to .*stat -c .* "
                                           rf"{LXC_TRIES} times in a row"):
        run(backend, "stat -c %%a /etc")
    assert backend.asked == LXC_TRIES


def test_answers_lost_in_a_burst_shorter_than_the_tries_are_waited_out(monkeypatch):
    monkeypatch.setattr("labwright.verify.conftest.LXC_RETRY_PAUSE", 0.001)
    backend = Local(lose=LXC_TRIES - 1)
    out = run(backend, "uname -s")
    assert backend.asked == LXC_TRIES and out.stdout.strip() == "Linux"


def test_a_command_that_prints_nothing_or_fails_or_exits_is_taken_once_as_it_came():
    for command, rc, stdout, stderr in (("true", 0, "", ""), ("test -f /no/such/file", 1, "", ""),
                                        ("echo out; echo err >&2; exit 3", 3, "out\n", "err\n"),
                                        ("printf 'no newline'", 0, "no newline", "")):
        backend = Local()
        out = run(backend, command)
        assert (backend.asked, out.rc, out.stdout, out.stderr) == (1, rc, stdout, stderr), command
        assert out.command == command.encode() and END_MARK not in out.stderr


@settings(max_examples=40, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), max_size=30),
       st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), max_size=30), st.integers(0, 255))
def test_any_answer_reaches_testinfra_unchanged(stdout, stderr, rc):
    backend = Local()
    out = run(backend, "printf %%s %s; printf %%s %s >&2; exit " + str(rc), stdout, stderr)
    assert (out.rc, out.stdout, out.stderr) == (rc, stdout, stderr)


def test_a_lost_stdout_with_stderr_delivered_is_asked_again(monkeypatch):
    """A loaded full run read ``stat -Lc %a`` as '' while stderr's mark came through: both streams carry the mark."""
    monkeypatch.setattr("labwright.verify.conftest.LXC_RETRY_PAUSE", 0.001)
    backend = Local(lose_stdout=1)
    out = run(backend, "stat -Lc %a /etc")
    assert backend.asked == 2 and out.stdout.strip() == f"{os.stat('/etc').st_mode & 0o7777:o}"
