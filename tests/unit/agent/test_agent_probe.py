"""The agent's ``probe`` subcommand, its parts that need no systemd: the restore record (written once, atomically,
before any change), the install that keeps a file someone else changed, and the subcommand running from the zipapp
in a bare interpreter as on a guest without labwright. The systemd side runs for real in
tests/integration/test_probe_faults.py."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from labwright.agent import probe as probe_waiter
from labwright.agent import zipapp
from labwright.tuning.probe import MARK


@pytest.fixture
def records(tmp_path, monkeypatch) -> Path:
    monkeypatch.setattr(probe_waiter, "RECORD_DIR", str(tmp_path / "records"))
    return tmp_path / "records"


def test_the_first_record_is_kept_and_later_probes_do_not_overwrite_it(records):
    first = {"mode": "restore", "service": "tabbyapi.service", "install": [{"path": "/x", "content_b64": "b3JpZw=="}]}
    assert probe_waiter.save_record("tabbyapi.service", first) is True
    # a second probe (which would read a candidate as "the original" after a kill) does not replace it
    assert probe_waiter.save_record("tabbyapi.service", {**first, "install": []}) is False
    assert probe_waiter.read_record("tabbyapi.service") == first
    assert probe_waiter.leftovers() == {"leftovers": {"tabbyapi.service": first}}
    assert [p.name for p in records.iterdir()] == ["tabbyapi.service.json"]  # no temporary left beside it
    assert (records / "tabbyapi.service.json").stat().st_mode & 0o777 == 0o600
    probe_waiter.drop_record("tabbyapi.service")
    assert probe_waiter.read_record("tabbyapi.service") is None and probe_waiter.leftovers() == {"leftovers": {}}


def test_an_unreadable_record_is_reported_not_run(records):
    records.mkdir()
    (records / "llama-server.service.json").write_bytes(b"\xff{half")
    assert "unreadable" in probe_waiter.read_record("llama-server.service")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_install_puts_back_the_original_over_a_candidate_but_keeps_someone_elses_edit(tmp_path):
    config = tmp_path / "config.yml"
    config.write_bytes(f"{MARK} while it probes\nmodel: {{cache_size: 4096}}\n".encode())
    os.chmod(config, 0o640)
    original = b"model:\n  cache_size: 8192\n"
    kept = probe_waiter.install([{"path": str(config), "content_b64": b64(original), "ours": MARK}])
    assert kept == [] and config.read_bytes() == original and config.stat().st_mode & 0o777 == 0o640
    users = b"model:\n  cache_size: 16384  # the user's edit\n"
    config.write_bytes(users)
    kept = probe_waiter.install([{"path": str(config), "content_b64": b64(original), "ours": MARK}])
    assert kept == [str(config)] and config.read_bytes() == users
    dropin = tmp_path / "unit.d" / "90-labwright-probe.conf"
    probe_waiter.install([{"path": str(dropin), "content_b64": b64(b"[Service]\n")}])
    assert dropin.read_bytes() == b"[Service]\n"
    probe_waiter.install([{"path": str(dropin), "remove": True}, {"path": str(dropin), "remove": True}])
    assert not dropin.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["config.yml", "unit.d"]


def test_the_probe_subcommand_runs_from_the_zipapp_in_a_bare_interpreter(tmp_path):
    """The guest has python3 only: the agent's probe (and the restart it imports) must run from the zipapp alone."""
    pyz = tmp_path / "agent.pyz"
    pyz.write_bytes(zipapp.agent()[0])
    # -I -S: isolated, no site-packages (no labwright installed), as on a guest
    proc = subprocess.run([sys.executable, "-I", "-S", str(pyz), "probe", json.dumps({"mode": "nothing"})],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"error": "unknown mode nothing"}
    assert probe_waiter.restart_unit.__module__ == "labwright.agent.service"  # labwright's one restart


@pytest.fixture
def gate(tmp_path, monkeypatch) -> Path:
    """The fence's files under tmp_path instead of /run."""
    for name in ("pid_file", "fence_file", "lock_file"):
        monkeypatch.setattr(probe_waiter, name, lambda service, n=name: str(tmp_path / f"{service}.{n}"))
    return tmp_path


def test_a_helper_of_a_restored_run_leaves_the_unit_alone(gate):
    """A loaded suite run: the candidate's exec reached the guest after the Ctrl-C restore, installed its drop-in
    over the restored original and halted the unit. The restore fences its run; that run's helpers stop at the gate
    (no pid file written, so it never becomes the unit's waiter); another run's helpers pass."""
    probe_waiter.fence("llama-server.service", "run-a")
    assert probe_waiter.enter("llama-server.service", "run-a") is False
    assert not (gate / "llama-server.service.pid_file").exists()
    assert probe_waiter.probe({"service": "llama-server.service", "run": "run-a", "timeout": 5}) == \
        probe_waiter.CANCELLED   # before any change: no record, no halt, no install
    assert probe_waiter.enter("llama-server.service", "run-b") is True
    assert (gate / "llama-server.service.pid_file").read_text() == str(os.getpid())
    assert probe_waiter.enter("other.service", "run-a") is True   # fenced per unit


def test_the_restore_kills_the_helper_that_passed_the_gate_before_it(gate):
    """The other order: a helper passed the gate first (its pid file written); the restore's fence ends it."""
    helper = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()", "agent-0.pyz", "probe", "{}"],
                              stdin=subprocess.PIPE)
    try:
        (gate / "llama-server.service.pid_file").write_text(str(helper.pid))
        probe_waiter.fence("llama-server.service", "run-a")
        assert not probe_waiter._alive(helper.pid)  # dead when fence returns (a zombie until reaped), not later
        assert helper.wait(timeout=30) == -9
    finally:
        if helper.poll() is None:
            helper.kill()
    assert probe_waiter.enter("llama-server.service", "run-a") is False


def test_a_killed_writers_temporary_file_is_removed_by_the_restore(tmp_path):
    """A suite run: Ctrl-C while the helper wrote the next candidate's drop-in; the fence killed it mid-write and
    ``90-labwright-probe.conf.labwright-probe-new`` stayed in llama-server.service.d after the restore."""
    dropin = tmp_path / "llama-server.service.d" / "90-labwright-probe.conf"
    dropin.parent.mkdir()
    dropin.write_text("[Service]\n")
    leftover = Path(f"{dropin}{probe_waiter.TMP_SUFFIX}")
    leftover.write_text("[Service]\nExecStart=half")
    probe_waiter.install([{"path": str(dropin), "remove": True}])
    assert list(dropin.parent.iterdir()) == []
    config = tmp_path / "config.yml"
    Path(f"{config}{probe_waiter.TMP_SUFFIX}").write_text("half")
    probe_waiter.install([{"path": str(config), "content_b64": b64(b"original")}])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yml", "llama-server.service.d"]
    assert config.read_bytes() == b"original"
