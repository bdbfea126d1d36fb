"""The verify suites' lxc:// reads: a ``stat -c`` whose output LXD lost (exit 0, nothing printed) is asked again;
any other command, and a stat that printed or failed, is taken as it came."""

from __future__ import annotations

from testinfra.backend.base import CommandResult

from labwright.verify.conftest import LXC_STAT_TRIES, steady_lxc_stat


class Backend:
    @staticmethod
    def decode(data: bytes) -> str:  # what CommandResult asks its backend for stdout as text
        return data.decode()

    def __init__(self, answers: list[tuple[int, str]]):
        self.answers = answers
        self.asked: list[str] = []

    def run(self, command: str, *args: str, **kwargs: object) -> CommandResult:
        self.asked.append(command)
        rc, out = self.answers.pop(0)
        return CommandResult(self, rc, command.encode(), out.encode(), b"")


def steady(backend: Backend, command: str) -> CommandResult:
    return steady_lxc_stat(Backend.run)(backend, command)


def test_a_lost_stat_answer_is_asked_again():
    backend = Backend([(0, ""), (0, "ops\n")])
    assert steady(backend, "stat -c %U /home/ops/.ssh/authorized_keys").stdout == "ops\n"
    assert len(backend.asked) == 2


def test_lost_every_time_is_given_up_after_the_last_try():
    backend = Backend([(0, "")] * LXC_STAT_TRIES)
    assert steady(backend, "stat -c %a /etc/x").stdout == ""
    assert len(backend.asked) == LXC_STAT_TRIES


def test_other_commands_and_failed_stats_are_taken_as_they_came():
    for command, answer in (("test -f /etc/x", (0, "")), ("stat -c %U /missing", (1, "")),
                            ("stat -c %U /etc/x", (0, "root\n"))):
        backend = Backend([answer, (0, "again")])
        assert steady(backend, command).rc == answer[0]
        assert backend.asked == [command]
