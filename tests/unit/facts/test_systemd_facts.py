"""labwright.facts.systemd: the SystemdUnits and SystemdServiceState commands run by sh (a systemctl stand-in, the
/run/systemd/system check pointed at a scratch directory), the readers of systemd fact answers in every shape pyinfra
gives, and which (ActiveState, SubState, NRestarts) count as a running unit."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labwright.facts.systemd import (
    SystemdServiceState,
    SystemdUnits,
    runs_since_started,
    systemd_init,
    systemd_refusal,
    unit_active,
    unit_flag,
)
from support.hypothesis_budget import examples


def run(tmp_path: Path, systemctl: bool, booted: bool, units: Any = "tabbyapi.service") -> dict[str, Any]:
    """The fact's command as sh runs it: ``systemctl`` on PATH or not, systemd booted (the directory sd_booted
    looks for exists) or not; then what ``process`` makes of its output."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    if systemctl:
        (bin_dir / "systemctl").write_text('#!/bin/sh\n[ "$1" = is-active ] && case "$2" in tabbyapi.service) '
                                           "echo active;; *) echo inactive; exit 3;; esac\n")
        (bin_dir / "systemctl").chmod(0o755)
    run_dir = tmp_path / "run-systemd-system"
    if booted:
        run_dir.mkdir(exist_ok=True)
    command = SystemdUnits().command(units=units).replace("/run/systemd/system", str(run_dir))
    shell = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, timeout=30,
                           env={**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"} if systemctl else
                           {**os.environ, "PATH": str(bin_dir)})
    assert shell.returncode == 0, shell.stderr
    return SystemdUnits().process(shell.stdout.splitlines())


def test_the_command_tells_running_offline_and_absent_apart(tmp_path: Path) -> None:
    assert run(tmp_path, systemctl=True, booted=True, units=["tabbyapi.service", "gone.service"]) == {
        "init": "running", "units": {"tabbyapi.service": "active", "gone.service": "inactive"}}
    assert run(tmp_path / "a", systemctl=True, booted=False) == {"init": "offline", "units": {}}
    assert run(tmp_path / "b", systemctl=False, booted=True) == {"init": "absent", "units": {}}


@pytest.mark.parametrize("answer", [None, {}, [], "active", {"init": "sideways"}, {"units": {"x": "active"}}])
def test_an_answer_of_another_shape_says_nothing(answer: Any) -> None:
    assert systemd_init(answer) == "unknown"
    assert not unit_active(answer, "x") and not unit_flag(answer, "x")
    assert systemd_refusal(answer, "h", "x needs it") is None  # nothing refused on a guess


def test_pyinfras_systemd_answers_read_only_for_the_unit_asked() -> None:
    assert unit_flag({"tabbyapi.service": True}, "tabbyapi.service")
    assert not unit_flag({"ssh.service": True}, "tabbyapi.service")  # a unit systemd does not list
    assert not unit_flag({"tabbyapi.service": False}, "tabbyapi.service")
    assert not unit_flag({}, "tabbyapi.service")  # pyinfra's default: no systemctl, or a failed fact
    assert not unit_flag(None, "tabbyapi.service")


def test_a_refusal_is_one_line_naming_the_host_and_what_needs_systemd() -> None:
    line = systemd_refusal({"init": "offline", "units": {}}, "@lxd/llm1", "tabbyAPI runs as a systemd unit")
    assert line is not None and "\n" not in line
    assert line.startswith("@lxd/llm1: systemd is not running there (PID 1 is not systemd: no /run/systemd/system), "
                           "and tabbyAPI runs as a systemd unit;")
    assert systemd_refusal({"init": "running", "units": {}}, "h", "x") is None


# What systemctl prints: a unit's ActiveState, and a service's SubState (systemd's src/core/service.c,
# state_translation_table, systemd/systemd at 000d6582), plus other units' running sub-states pyinfra knows.
ACTIVE_STATES = ["active", "reloading", "inactive", "failed", "activating", "deactivating", "maintenance",
                 "refreshing"]
SUB_STATES = ["dead", "condition", "start-pre", "start", "start-post", "running", "exited", "reload", "reload-signal",
              "reload-notify", "stop", "stop-watchdog", "stop-sigterm", "stop-sigkill", "stop-post", "final-watchdog",
              "final-sigterm", "final-sigkill", "failed", "dead-before-auto-restart", "failed-before-auto-restart",
              "dead-resources-pinned", "auto-restart", "auto-restart-queued", "cleaning", "waiting", "listening",
              "mounted", "active"]


def counts_as_running(active: str, sub: str, restarts: int | None) -> bool:
    """The rule, said once here: active in a running sub-state, and not restarted by systemd since its last start."""
    if restarts:
        return False  # systemd restarted it since labwright last started it: it crashed at least once
    return active == "active" and sub in ("running", "exited", "waiting", "listening", "mounted")


def show_output(active: str, sub: str, restarts: int | None, order: list[int]) -> list[str]:
    """``systemctl show -p ...`` as systemd prints it, in any order; no NRestarts line for a unit without one."""
    lines = [f"ActiveState={active}", f"SubState={sub}"]
    if restarts is not None:
        lines.append(f"NRestarts={restarts}")
    return [lines[i] for i in sorted(range(len(lines)), key=lambda i: order[i % len(order)])]


@settings(max_examples=examples(200), deadline=None)
@given(active=st.sampled_from(ACTIVE_STATES), sub=st.sampled_from(SUB_STATES),
       restarts=st.none() | st.integers(min_value=0, max_value=2**32 - 1), order=st.permutations(range(3)))
def test_only_a_unit_running_since_its_last_start_counts_as_running(
        active: str, sub: str, restarts: int | None, order: list[int]) -> None:
    answer = SystemdServiceState().process(show_output(active, sub, restarts, order))
    assert answer == {"active_state": active, "sub_state": sub, "n_restarts": restarts}
    assert runs_since_started(answer) is counts_as_running(active, sub, restarts)


@pytest.mark.parametrize(("active", "sub", "restarts", "running"), [
    ("active", "running", 0, True),            # started by labwright, never crashed: no change on a re-run
    ("active", "running", 1, False),           # a crash loop caught between a restart and its next crash
    ("active", "running", 30, False),
    ("activating", "auto-restart", 0, False),  # after its first crash, waiting out RestartSec
    ("activating", "auto-restart", 4, False),
    ("activating", "start", 0, False),
    ("failed", "failed", 0, False),            # start limit hit
    ("inactive", "dead", 0, False),
    ("reloading", "reload", 0, False),
    ("deactivating", "stop-sigterm", 0, False),
    ("active", "waiting", None, True),         # a timer: no NRestarts, its states decide
])
def test_which_states_count_as_running(active: str, sub: str, restarts: int | None, running: bool) -> None:
    assert runs_since_started({"active_state": active, "sub_state": sub, "n_restarts": restarts}) is running


@pytest.mark.parametrize("answer", [None, {}, [], "active", {"active_state": "active", "sub_state": "running",
                                                             "n_restarts": "0"},
                                    {"active_state": "active", "sub_state": "running", "n_restarts": True},
                                    {"active_state": "active", "sub_state": "running", "n_restarts": 0.0},
                                    SystemdServiceState.default()])
def test_a_service_state_of_another_shape_is_not_running(answer: Any) -> None:
    assert runs_since_started(answer) is False


def test_the_service_state_command_as_sh_runs_it(tmp_path: Path) -> None:
    """The command with a systemctl stand-in that prints what systemd 252 printed for a held crash loop, and with
    no systemctl at all (nothing printed, exit 0: the fact never fails the host)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text(
        '#!/bin/sh\n[ "$*" = "show -p NRestarts,ActiveState,SubState '
        "it's.service\" ] || exit 1\nprintf 'NRestarts=3\\nActiveState=active\\nSubState=running\\n'\n")
    (bin_dir / "systemctl").chmod(0o755)
    command = SystemdServiceState().command("it's.service")
    held = ["NRestarts=3", "ActiveState=active", "SubState=running"]
    for path, lines in ((f"{bin_dir}:/usr/bin:/bin", held), (str(tmp_path / "empty"), [])):
        shell = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, timeout=30,
                               env={**os.environ, "PATH": path})
        assert (shell.returncode, shell.stdout.splitlines()) == (0, lines), shell.stderr
    assert SystemdServiceState().process(held) == {"active_state": "active", "sub_state": "running", "n_restarts": 3}
    assert not runs_since_started(SystemdServiceState().process(held))
