"""Start-up: the top-level group imports a command group's module only when that group runs (labwright.cli.LazyGroup),
so `labwright --help`, `--version` and completing a group's name import none of them (benchmarks/cli_startup.py
measures the time; these tests hold the structure that makes it fast)."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import pytest

from labwright.cli import GROUP_HELP, GROUPS


def run_main(args: list[str], env: dict[str, str] | None = None) -> tuple[int, str, str, list[str]]:
    """labwright's main in a fresh interpreter: (exit code, stdout, stderr, the labwright.cli.* and pyinfra modules
    it imported)."""
    code = ("import json, sys\nfrom labwright.cli import main\nargs, sys.argv[:] = sys.argv[1:], ['labwright']\n"
            "rc = main(args)\nsys.stdout.flush()\n"
            "mods = sorted(m for m in sys.modules if m.startswith('labwright.cli.') or m.split('.')[0] == 'pyinfra')\n"
            "print(json.dumps([rc, mods]), file=sys.stderr)\n")
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})}, check=False)
    *err, last = proc.stderr.splitlines()
    rc, modules = json.loads(last)
    return rc, proc.stdout, "\n".join(err), modules


@pytest.mark.parametrize("name", GROUPS)
def test_the_help_kept_for_each_group_is_its_modules_own(name):
    module = importlib.import_module(f"labwright.cli.{name}")
    assert name == module.NAME
    assert GROUP_HELP[name] == module.HELP, f"GROUP_HELP[{name!r}] in labwright/cli/__init__.py differs from " \
                                             f"labwright/cli/{name}.py's HELP: copy it"


def test_every_group_module_is_in_groups():
    from pathlib import Path

    import labwright.cli as cli

    here = Path(cli.__file__).parent
    modules = {p.stem for p in here.glob("*.py") if p.stem != "__init__" and hasattr(
        importlib.import_module(f"labwright.cli.{p.stem}"), "HELP")}
    assert modules == set(GROUPS)


@pytest.mark.parametrize("args", [["--help"], ["-h"], []])
def test_top_level_help_lists_every_group_and_imports_none(args):
    rc, out, err, modules = run_main(args)
    assert rc == (0 if args else 2), err  # bare `labwright` prints the help as a usage error does (click)
    for name, help_text in GROUP_HELP.items():
        assert f" {name} " in out, out
        assert help_text.split()[0] in out
    assert modules == ["labwright.cli.vocab"], modules  # no group, and no pyinfra


def test_a_group_s_help_imports_that_group_only():
    rc, out, err, modules = run_main(["kv", "--help"])
    assert rc == 0 and "plan" in out and "fit" in out, err
    assert modules == ["labwright.cli.kv", "labwright.cli.vocab"], modules


def test_a_misspelled_group_is_suggested_without_importing_one():
    rc, out, err, modules = run_main(["gest", "show"])
    assert rc == 2 and out == ""
    assert err == "labwright: error: No such command 'gest'. Did you mean 'guest'? (see `labwright --help`)", err
    assert modules == ["labwright.cli.vocab"], modules


def test_completing_a_group_name_imports_none_and_a_subcommand_its_group():
    env = {"_LABWRIGHT_COMPLETE": "complete_bash", "COMP_WORDS": "labwright ", "COMP_CWORD": "1"}
    rc, out, err, modules = run_main([], env)
    assert rc == 0 and err == "", err
    assert out.split() == list(GROUPS)
    assert modules == ["labwright.cli.vocab"], modules
    env = {"_LABWRIGHT_COMPLETE": "complete_bash", "COMP_WORDS": "labwright lab st", "COMP_CWORD": "2"}
    rc, out, err, modules = run_main([], env)
    assert rc == 0 and err == "" and out.split() == ["status"], (out, err)
    assert [m for m in modules if m.startswith("labwright.")] == ["labwright.cli.lab", "labwright.cli.vocab"]


def test_completion_through_the_installed_script_exits_0_with_no_error_line():
    script = os.path.join(os.path.dirname(sys.executable), "labwright")
    env = {**os.environ, "_LABWRIGHT_COMPLETE": "complete_zsh", "COMP_WORDS": "labwright gu", "COMP_CWORD": "1"}
    proc = subprocess.run([script], capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert "guest" in proc.stdout and GROUP_HELP["guest"].split()[0] in proc.stdout


def test_a_command_runs_through_the_lazily_loaded_group(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                                  "hidden_size": 64, "max_position_embeddings": 4096}))
    rc, out, err, modules = run_main(["kv", "plan", "--config", str(config), "--json"])
    assert rc == 0, err
    assert json.loads(out)[0]["bytes_per_token"] == 256  # 2 layers x 2 KV heads x 16 dims x (K + V) x 2 bytes
    assert "labwright.cli.kv" in modules and "labwright.cli.lab" not in modules
