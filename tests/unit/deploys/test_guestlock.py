"""labwright.guestlock's core on this machine: real files, real flock, real processes (the lab tests run it in
guests through pyinfra)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from labwright import guestlock
from labwright.agent import zipapp


def paths(tmp_path: Path) -> dict[str, str]:
    return {"path": str(tmp_path / "labwright.lock"), "guard": str(tmp_path / "labwright.guard")}


def test_take_then_second_owner_refused_and_release(tmp_path: Path) -> None:
    p = paths(tmp_path)
    first, second = guestlock.owner_record("first"), guestlock.owner_record("second")
    assert guestlock.take(first, **p)["taken"]
    assert guestlock.take(first, **p) == {"taken": True, "nested": True}
    refused = guestlock.take(second, **p)
    assert not refused["taken"] and refused["holder"]["token"] == first["token"]
    assert not guestlock.release(second["token"], **p)          # not ours: left alone
    assert guestlock.release(first["token"], **p)
    assert not Path(p["path"]).exists()
    assert guestlock.take(second, **p)["taken"]


def test_owner_of_a_killed_process_is_stale_here(tmp_path: Path) -> None:
    p = paths(tmp_path)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    dead = guestlock.owner_record("killed run")
    dead.update(pid=child.pid, start=guestlock.start_time(child.pid))
    assert guestlock.take(dead, **p)["taken"]
    assert guestlock.stale_here(dead) == ""                      # still running: not stale
    assert not guestlock.take(guestlock.owner_record("next"), **p)["taken"]
    child.kill()
    child.wait()
    result = guestlock.take(guestlock.owner_record("next"), **p)
    assert result["taken"] and result["replaced"]["token"] == dead["token"]
    assert "no longer running" in result["why"]


def test_reused_pid_is_not_the_holder(tmp_path: Path) -> None:
    record = guestlock.owner_record("x")
    record["start"] = "1"                                        # this pid, but another process's start time
    assert "no longer running" in guestlock.stale_here(record)


def test_expired_lease_of_another_machine_is_stale(tmp_path: Path) -> None:
    record = guestlock.owner_record("elsewhere", lease=10)
    record.update(boot_id="another-boot", host="another-controller")
    assert guestlock.stale_here(record) == ""
    assert guestlock.stale_here(record, now=time.time() + 11) == "its lease expired"


def test_hold_local_waits_then_refuses_naming_the_holder(tmp_path: Path) -> None:
    p = paths(tmp_path)
    holder = guestlock.owner_record("stack switch")
    guestlock.take(holder, **p)
    said: list[str] = []
    with pytest.raises(guestlock.GuestBusy) as caught, guestlock.hold_local("probe", wait=1.5, say=said.append, **p):
        pass
    message = str(caught.value)
    assert f"pid {holder['pid']}" in message and "stack switch" in message and p["path"] in message
    assert len(said) == 1 and said[0].startswith("labwright: waiting up to 1.5s")


def test_hold_local_nested_in_the_holding_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = paths(tmp_path)
    holder = guestlock.owner_record("deploy")
    guestlock.take(holder, **p)
    monkeypatch.setenv(guestlock.ENV, holder["token"])
    with guestlock.hold_local("stack switch", wait=0, **p) as seen:
        assert seen["token"] == holder["token"]
    assert json.loads(Path(p["path"]).read_text())["token"] == holder["token"]   # still the deploy's


def test_hold_local_takes_and_releases(tmp_path: Path) -> None:
    p = paths(tmp_path)
    with guestlock.hold_local("switch", wait=0, **p) as owner:
        assert json.loads(Path(p["path"]).read_text())["token"] == owner["token"]
        assert os.environ[guestlock.ENV] == owner["token"]
    assert not Path(p["path"]).exists() and guestlock.ENV not in os.environ


def test_guest_script_runs_standalone_without_labwright(tmp_path: Path) -> None:
    """The guest runs this file from labwright's agent (its lock subcommand) and no labwright installed."""
    owner = guestlock.owner_record("script")
    agent = tmp_path / "agent.pyz"
    agent.write_bytes(zipapp.agent()[0])
    command = guestlock.guest_command("read", {}, str(agent))
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": "", "HOME": str(tmp_path)}
    result = subprocess.run(["sh", "-c", command.replace("python3 ", f"{sys.executable} -I -S ", 1)
                             .replace("command -v python3", f"command -v {sys.executable}")],
                            capture_output=True, text=True, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] in ("null", json.dumps(guestlock.read_lock()))
    assert owner["pid"] == os.getpid()


@pytest.mark.parametrize("wrong", [
    {"since": "yesterday"}, {"since": 1e400}, {"since": float("nan")}, {"pid": "42"}, {"pid": [42]},
    {"pid": 10**30}, {"pid": True}, {"expires": "never"}, {"host": 7}, {"token": None}, {"command": ["rm"]},
])
def test_an_owner_record_of_another_shape_reads_as_unreadable(tmp_path: Path, wrong: dict) -> None:
    """A lock whose record is not what owner_record writes reads as {} (as broken JSON does): describe() and the
    staleness check give one phrase, never a ValueError or an OverflowError."""
    p = paths(tmp_path)
    record = {**guestlock.owner_record("first"), **wrong}
    Path(p["path"]).write_text(json.dumps(record))
    holder = guestlock.read_lock(p["path"])
    assert holder == {}
    assert guestlock.describe(holder).startswith("pid None on ?")
    assert guestlock.stale_here(holder) == "its owner record is unreadable"
    assert guestlock.read_lock(p["path"]) == {} and guestlock.take(guestlock.owner_record("second"), **p)["taken"]


def test_an_owner_record_as_written_reads_back_whole(tmp_path: Path) -> None:
    p = paths(tmp_path)
    record = guestlock.owner_record("first", lease=None)
    Path(p["path"]).write_text(json.dumps(record))
    assert guestlock.read_lock(p["path"]) == record
