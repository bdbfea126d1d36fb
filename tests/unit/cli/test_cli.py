"""The CLI's contract: --help everywhere, one-line errors, exit 2 for bad input."""

from __future__ import annotations

import subprocess

import pytest

GROUPS = ["lab", "matrix", "stack", "guest", "tabbyapi", "kv", "probe", "bench", "cluster", "bios"]


def run(cli_env, *args, cwd=None):
    return subprocess.run(["labwright", *args], capture_output=True, text=True, env=cli_env, cwd=cwd)


def test_top_level_help_lists_every_group(cli_env):
    proc = run(cli_env, "--help")
    assert proc.returncode == 0
    for group in GROUPS:
        assert group in proc.stdout


@pytest.mark.parametrize("args", [[g, "--help"] for g in GROUPS] + [
    ["lab", "up", "--help"], ["lab", "status", "--help"], ["lab", "down", "--help"]])
def test_help_on_every_level(cli_env, args):
    proc = run(cli_env, *args)
    assert proc.returncode == 0, proc.stderr
    assert "Usage:" in proc.stdout


def test_version(cli_env):
    proc = run(cli_env, "--version")
    assert proc.returncode == 0 and proc.stdout.startswith("labwright ")


def test_broken_inventory_is_one_line_exit_2(cli_env, tmp_path):
    inv = tmp_path / "inv.py"
    inv.write_text("lab = [\n")
    for command in (["lab", "up"], ["lab", "status"], ["lab", "down", "--yes"], ["lab", "up", "--dry-run"]):
        proc = run(cli_env, *command, "-i", str(inv))
        assert proc.returncode == 2, (command, proc.stderr)
        assert proc.stderr.count("\n") == 1
        assert proc.stderr.startswith("labwright: error: inventory ") and "fix the Python syntax" in proc.stderr


def test_missing_default_inventory_names_the_fix(cli_env, tmp_path):
    proc = run(cli_env, "lab", "status", cwd=tmp_path)
    assert proc.returncode == 2
    assert "inventories/local.py" in proc.stderr and "pass an existing file" in proc.stderr


def test_unknown_option_is_a_usage_error(cli_env):
    proc = run(cli_env, "lab", "up", "--frobnicate")
    assert proc.returncode == 2
    assert "No such option" in proc.stderr


def test_typer_exit_codes_reach_the_shell():
    import typer

    from labwright.cli import app, main

    @app.command("zz-exit-code-probe", hidden=True)
    def probe() -> None:
        raise typer.Exit(3)

    assert main(["zz-exit-code-probe"]) == 3
