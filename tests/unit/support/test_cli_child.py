"""tests/support/cli_child.py: a forked ``labwright`` sees its own environment as a new process would, whatever the
test process made before it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from labwright import ui
from support.cli_child import ForkServer, run_cli

SEED = str(Path(__file__).resolve().parents[1] / "tuning" / "configs" / "qwen3.5-9b.json")


def test_the_childs_columns_are_its_own_not_the_consoles_this_process_made(cli_env, monkeypatch):
    stdout = ui.__getattr__("stdout")  # the console the command modules hold (from labwright.ui import stdout)
    monkeypatch.setenv("COLUMNS", "80")  # this process made its consoles with 80 columns
    ui.remake_consoles()
    try:
        assert stdout.width == 80
        monkeypatch.setattr(ui, "plain_lines", True)  # as a --json command run in this process would leave it
        proc = run_cli(["kv", "plan", "--config", SEED, "--budget", "2.4GiB"], env={**cli_env, "COLUMNS": "250"})
        assert proc.returncode == 0, proc.stderr
        assert "8 of 32 layers keep a KV cache" in proc.stdout  # one line: 250 columns, not wrapped at 80
        assert max(len(line) for line in proc.stdout.splitlines()) > 80
        assert stdout.width == 80 and ui.plain_lines is True  # this process unchanged
    finally:
        monkeypatch.undo()
        ui.remake_consoles()  # as they were made, for the tests after this one in the same process


def test_the_fork_servers_child_has_the_callers_environment_cwd_and_files_and_is_killed_at_its_timeout(tmp_path,
                                                                                                     monkeypatch):
    """support.cli_child.ForkServer (the bad-input sweep's): the environment is this process's at the call (set after
    the server started), then env_changes; the cwd given (a relative path resolves there); stdout, stderr and the exit
    code come back; a child blocked past its timeout (opening a named pipe nobody writes) is killed: None."""
    server = ForkServer(("kv",), matrix=False)  # what kv plan needs; the sweep's imports every group
    try:
        shutil.copy(SEED, tmp_path / "config.json")
        out, err = tmp_path / "out", tmp_path / "err"
        monkeypatch.setenv("COLUMNS", "80")
        code = server.fork_main(["kv", "plan", "--config", "config.json", "--budget", "2.4GiB"], stdin=os.devnull,
                                stdout=out, stderr=err, timeout=60, cwd=tmp_path, env_changes={"COLUMNS": "250"})
        assert code == 0, err.read_text()
        assert "8 of 32 layers keep a KV cache" in out.read_text() and max(map(len, out.read_text().splitlines())) > 80
        (tmp_path / "elsewhere").mkdir()
        code = server.fork_main(["kv", "plan", "--config", "config.json", "--budget", "2.4GiB"], stdin=os.devnull,
                                stdout=out, stderr=err, timeout=60, cwd=tmp_path / "elsewhere")
        assert code == 2 and err.read_text().startswith("labwright: "), err.read_text()
        os.mkfifo(tmp_path / "fifo")
        assert server.fork_main(["--version"], stdin=tmp_path / "fifo", stdout=out, stderr=err, timeout=0.5) is None
        proc = server._proc
    finally:
        server.close()
    assert proc is not None and proc.returncode == 0
