"""tests/support/cli_child.py: a forked ``labwright`` sees its own environment as a new process would, whatever the
test process made before it."""

from __future__ import annotations

from pathlib import Path

from labwright import ui
from support.cli_child import run_cli

SEED = str(Path(__file__).resolve().parents[1] / "tuning" / "configs" / "qwen3.5-9b.json")


def test_the_childs_columns_are_its_own_not_the_consoles_this_process_made(cli_env, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")  # an earlier test (or this worker) had 80 when the console was made
    monkeypatch.setattr(ui, "_consoles", {})
    assert ui.__getattr__("stdout").width == 80  # made here first, with 80 columns
    monkeypatch.setattr(ui, "plain_lines", True)  # as a --json command run in this process would leave it
    proc = run_cli(["kv", "plan", "--config", SEED, "--budget", "2.4GiB"], env={**cli_env, "COLUMNS": "250"})
    assert proc.returncode == 0, proc.stderr
    assert "8 of 32 layers keep a KV cache" in proc.stdout  # one line: 250 columns, not wrapped at 80
    assert max(len(line) for line in proc.stdout.splitlines()) > 80
    assert ui.__getattr__("stdout").width == 80 and ui.plain_lines is True  # this process unchanged
