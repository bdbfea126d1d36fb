"""What labwright.operations.systemd runs on a host, against a systemctl stand-in that records its calls and
answers as systemd does for a unit at its start limit: the agent's ``restart`` (``started_owned``,
``restarted_owned``: labwright's one restart, run here in-process as the host's python3 runs it) and
``restarted_foreign``'s shell line (run by sh)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from labwright.agent import __main__ as agent_main
from labwright.agent import service
from labwright.operations.systemd import foreign_restart_command


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    """systemctl: records "$@"; `restart`/`start`/`try-restart` fail while the file `refuse` holds a count > 0
    (each refusal decrements it), `show -p Result` says start-limit-hit after a refusal; journalctl prints a line."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "refuse").write_text("0")
    (tmp_path / "bin" / "systemctl").write_text(f"""#!/bin/sh
echo "$@" >> {tmp_path}/calls
n=$(cat {tmp_path}/refuse)
case "$1" in
  restart|start|try-restart)
    if [ "$n" -gt 0 ]; then echo $((n - 1)) > {tmp_path}/refuse; touch {tmp_path}/hit
      echo "Job for $2 failed because start of the service was attempted too often." >&2; exit 1; fi
    rm -f {tmp_path}/hit;;
  show) if [ -e {tmp_path}/hit ]; then echo start-limit-hit; else echo success; fi;;
  is-active) echo failed;;
esac
exit 0
""")
    (tmp_path / "bin" / "journalctl").write_text("#!/bin/sh\necho 'engine: some last line'\n")
    for tool in ("systemctl", "journalctl"):
        (tmp_path / "bin" / tool).chmod(0o755)
    return tmp_path


def run(command: str, bin_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{bin_dir / 'bin'}:{os.environ['PATH']}"}
    return subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=env, timeout=60)


def calls(bin_dir: Path) -> list[str]:
    return (bin_dir / "calls").read_text().splitlines()


def agent_restart(unit: str, bin_dir: Path, monkeypatch: pytest.MonkeyPatch,
                  capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``python3 AGENT restart UNIT`` with the stand-ins first on PATH: (exit status, stdout, stderr)."""
    monkeypatch.setenv("PATH", f"{bin_dir / 'bin'}:{os.environ['PATH']}")
    rc = agent_main.main(["restart", unit])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_owned_restart_resets_the_start_limit_first(bin_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = agent_restart("tabbyapi", bin_dir, monkeypatch, capsys)
    assert rc == 0, err
    assert out.strip() == "restarted tabbyapi"
    assert calls(bin_dir) == ["reset-failed tabbyapi.service", "restart tabbyapi.service"]


def test_owned_restart_refused_by_the_start_limit_is_retried_after_reset_failed(
        bin_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(service, "BACKOFF_S", (0.0, 0.0))  # no back-off sleeps here: the stand-in has no clock
    (bin_dir / "refuse").write_text("1")
    rc, out, err = agent_restart("tabbyapi", bin_dir, monkeypatch, capsys)
    assert rc == 0, err
    assert "attempt 2" in out
    assert [c for c in calls(bin_dir) if not c.startswith("show")] == ["reset-failed tabbyapi.service",
                                                                       "restart tabbyapi.service"] * 2


def test_owned_start_refused_is_one_line_with_the_commands(bin_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(service, "BACKOFF_S", (0.0, 0.0))
    (bin_dir / "refuse").write_text("5")
    rc, _, err = agent_restart("llama-server.service", bin_dir, monkeypatch, capsys)
    assert rc == 1
    last = err.strip().splitlines()[-1]
    assert last == ("labwright: llama-server.service was started too often (systemd's start limit: "
                    "Result=start-limit-hit) and is failed: run systemctl reset-failed llama-server.service && "
                    "systemctl start llama-server.service")
    assert "engine: some last line" in err   # the journal tail above it
    assert "refused by systemd's start limit 3 times" in err  # the agent's reason above that


def test_owned_start_failed_for_another_reason_names_state_and_result(
        bin_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    stand_in = bin_dir / "bin" / "systemctl"
    stand_in.write_text(stand_in.read_text().replace(
        "  restart|start|try-restart)\n",
        "  restart|start|try-restart)\n    echo \"Job for $2 failed because the control process exited.\" >&2; "
        "exit 1;;\n  nothing)\n").replace("echo success", "echo exit-code"))
    rc, _, err = agent_restart("kokoro", bin_dir, monkeypatch, capsys)
    assert rc == 1
    assert err.strip().splitlines()[-1] == ("labwright: kokoro.service did not start (state failed, "
                                            "Result=exit-code); its journal is above: fix it, then run "
                                            "systemctl start kokoro.service")
    assert "engine: some last line" in err
    assert [c for c in calls(bin_dir) if c.startswith(("reset-failed", "restart"))] == [
        "reset-failed kokoro.service", "restart kokoro.service"]   # not retried: not the start limit


def test_foreign_restart_backs_off_and_never_resets_the_packagers_limit(bin_dir: Path) -> None:
    (bin_dir / "refuse").write_text("2")
    result = run(foreign_restart_command("xrdp", running_only=False, wait=60), bin_dir)
    assert result.returncode == 0, result.stderr
    made = calls(bin_dir)
    assert [c for c in made if not c.startswith("show")] == ["restart xrdp.service"] * 3
    assert not any(c.startswith("reset-failed") for c in made)


def test_foreign_restart_gives_up_after_its_wait(bin_dir: Path) -> None:
    (bin_dir / "refuse").write_text("1000")
    result = run(foreign_restart_command("ollama", running_only=True, wait=0), bin_dir)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith("labwright: ollama.service was started too often")
    assert calls(bin_dir)[0] == "try-restart ollama.service"
