"""labwright.facts.systemd: the SystemdUnits command run by sh (a systemctl stand-in, the /run/systemd/system
check pointed at a scratch directory), and the readers of systemd fact answers in every shape pyinfra gives."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from labwright.facts.systemd import SystemdUnits, systemd_init, systemd_refusal, unit_active, unit_flag


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
