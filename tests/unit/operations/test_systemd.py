"""labwright.operations.systemd's shell lines, run by sh against a systemctl stand-in that records its calls and
answers as systemd does for a unit at its start limit."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from labwright.operations.systemd import foreign_restart_command, start_command


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


def test_owned_restart_resets_the_start_limit_first(bin_dir: Path) -> None:
    result = run(start_command("tabbyapi", restart=True), bin_dir)
    assert result.returncode == 0, result.stderr
    assert calls(bin_dir) == ["reset-failed tabbyapi.service", "restart tabbyapi.service"]


def test_owned_start_refused_is_one_line_with_the_commands(bin_dir: Path) -> None:
    (bin_dir / "refuse").write_text("5")
    result = run(start_command("llama-server.service", restart=False), bin_dir)
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last == ("labwright: llama-server.service was started too often (systemd's start limit: "
                    "Result=start-limit-hit) and is failed: run systemctl reset-failed llama-server.service && "
                    "systemctl start llama-server.service")
    assert "engine: some last line" in result.stderr   # the journal tail above it


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
