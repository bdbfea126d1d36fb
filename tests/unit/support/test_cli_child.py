"""tests/support/cli_child.py: a forked ``labwright`` sees its own environment as a new process would, whatever the
test process made before it."""

from __future__ import annotations

from pathlib import Path

from labwright import ui
from support.cli_child import run_cli

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
