"""The CLI's one vocabulary (docs/cli.md), held for every command of the app: the app is walked (labwright.cli.register
then every command typer built), not listed by hand, so a new command that breaks a rule fails here.

Rules: every command is classified (it acts or it only reads); one that acts has --dry; a destructive one has -y/--yes
and stays dry without it; --yes always has -y; no visible --dry-run/--plan (the old spellings still work, hidden, with
a deprecation line); the inventory is -i/--inventory on every command that reads one (never positional); --json on
every command (verify's too: its other arguments are pytest's); -h as well as --help; docs/cli.md documents each
command's JSON; --dry with --yes is refused in one line; a failure under --json is a JSON object on stdout.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer

from labwright.cli import main, register
from labwright.cli.vocab import DEPRECATED_FLAGS
from support.cli_walk import leaf_commands

DOCS = Path(__file__).resolve().parents[3] / "docs" / "cli.md"

#: Commands that change something (a host, a guest, the lab, files): --dry on each.
ACTS = {"lab up", "lab down", "matrix refresh", "stack switch", "stack rollback", "guest apply", "guest start",
        "guest stop", "guest destroy", "guest snapshot", "guest restore", "tabbyapi ngram", "probe ceiling",
        "probe restore", "cluster rejoin", "cluster ghosts", "bios restore", "kokoro patch", "host upgrade",
        "build llamacpp", "model fetch", "model tiny", "wheelhouse litellm", "wheelhouse openwebui",
        "wheelhouse requirements", "wheelhouse stack"}
#: Of those, the destructive ones (and the one that asks, lab down): -y/--yes; all but lab down stay dry without it.
DESTRUCTIVE = {"lab down", "guest destroy", "guest restore", "cluster rejoin", "cluster ghosts", "bios restore",
               "host upgrade"}
#: Commands that only read and report (bios backup reads the chip and writes only the new image under --out;
#: bench writes only the --csv/--plot files asked for).
READS = {"lab status", "matrix inspect", "matrix resolve", "matrix check", "matrix show", "matrix stacks",
         "stack verify", "stack show", "guest plan", "guest show", "guest snapshots", "gpu check", "gpu arch",
         "kv plan", "kv fit", "kv bandwidth", "model plan", "bench llm", "bench compare", "bench tts", "cluster doctor",
         "bios backup", "desktop check", "verify"}


@dataclass
class Command:
    path: str
    options: dict[str, list[str]]  # visible options: parameter name -> every spelling
    hidden_options: dict[str, list[str]]
    arguments: list[str]  # visible positional parameter names
    hidden_arguments: list[str]


def walk() -> list[Command]:
    found: list[Command] = []
    for path, command in leaf_commands():
        options: dict[str, list[str]] = {}
        hidden_options: dict[str, list[str]] = {}
        arguments: list[str] = []
        hidden_arguments: list[str] = []
        for param in command.params:
            hidden = bool(getattr(param, "hidden", False))
            if param.param_type_name == "option":
                (hidden_options if hidden else options)[param.name] = [*param.opts, *param.secondary_opts]
            else:
                (hidden_arguments if hidden else arguments).append(param.name)
        found.append(Command(path, options, hidden_options, arguments, hidden_arguments))
    return found


COMMANDS = walk()
IDS = [c.path for c in COMMANDS]


def spellings(command: Command) -> set[str]:
    return {flag for flags in command.options.values() for flag in flags}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_walk_finds_the_whole_app():
    assert len(COMMANDS) >= 40 and {"lab up", "guest destroy", "cluster doctor", "verify"} <= set(IDS)


@pytest.mark.parametrize("command", COMMANDS, ids=IDS)
def test_every_command_is_classified_and_holds_the_vocabulary(command: Command):
    path, flags = command.path, spellings(command)
    assert (path in ACTS) != (path in READS), f"{path}: classify it in ACTS (it changes something) or READS"
    if path in ACTS:
        assert "--dry" in flags, f"{path} changes something: give it --dry (say what would change, change nothing)"
    if path in DESTRUCTIVE:
        assert {"-y", "--yes"} <= flags, f"{path} is destructive: give it -y/--yes"
    if "--yes" in flags:
        assert "-y" in flags, f"{path}: --yes without -y"
    for old in DEPRECATED_FLAGS:
        assert old not in flags, f"{path}: {old} is the old spelling of {DEPRECATED_FLAGS[old]}; spell it --dry"
    assert "--json" in flags, f"{path}: every command that reports or acts takes --json"
    assert "inventory" not in command.arguments, f"{path}: the inventory is -i/--inventory, not positional"
    if "inventory" in command.options:
        assert sorted(command.options["inventory"]) == ["--inventory", "-i"], \
            f"{path}: the inventory option is spelled -i/--inventory, got {command.options['inventory']}"
    for name in command.options:
        assert "inventory" not in name or name == "inventory", f"{path}: a second inventory option {name}"


@pytest.mark.parametrize("command", COMMANDS, ids=IDS)
def test_short_h_is_help(command: Command, capsys):
    code, out, err = run(capsys, *command.path.split(), "-h")
    assert code == 0 and "Usage:" in out and err == "", (command.path, code, err)
    usage = " ".join(next(line for line in out.splitlines() if "Usage:" in line).split())
    for hidden in command.hidden_arguments:  # the old positional inventory: taken, never advertised
        shown = {hidden, hidden.upper(), hidden.removeprefix("old_").upper()}
        assert not [word for word in shown if word in usage], f"{command.path}: usage shows {usage!r}"


@pytest.mark.parametrize("command", [c for c in COMMANDS if {"--dry", "--yes"} <= spellings(c)],
                         ids=lambda c: c.path)
def test_dry_with_yes_is_refused_in_one_line(command: Command, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for yes in ("--yes", "-y"):
        code, out, err = run(capsys, *command.path.split(), "--dry", yes)
        assert code == 2 and out == "", (command.path, code, out)
        assert err.count("\n") == 1 and "--dry and --yes contradict" in err, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", [c for c in COMMANDS if c.path in ACTS], ids=lambda c: c.path)
def test_old_dry_spellings_still_work_with_one_deprecation_line(command: Command, capsys):
    # The unknown option after it is what the parser refuses: --dry-run/--plan were taken (as --dry).
    for old in DEPRECATED_FLAGS:
        code, out, err = run(capsys, *command.path.split(), old, "--no-such-option-x")
        lines = err.splitlines()
        assert code == 2 and out == "", (command.path, old, code, out)
        assert lines[0] == f"labwright: deprecated: {old} is --dry now; the old spelling goes in the next release"
        assert len(lines) == 2 and "--no-such-option-x" in lines[1] and old not in lines[1], err


@pytest.mark.parametrize("path", ["cluster doctor", "cluster ghosts", "guest plan", "guest apply", "guest show",
                                  "guest start", "guest stop", "guest destroy"])
def test_old_positional_inventory_still_works_with_one_deprecation_line(path, capsys, tmp_path):
    missing = tmp_path / "no-such-inventory.py"
    code, out, err = run(capsys, *path.split(), str(missing))
    lines = err.splitlines()
    assert code == 2 and out == "" and len(lines) == 2, (path, code, err)
    assert lines[0].startswith("labwright: deprecated: the positional inventory") and "-i/--inventory" in lines[0]
    assert lines[1] == (f"labwright: error: inventory {missing}: no such file; pass an existing file with "
                        "-i/--inventory FILE (or set LABWRIGHT_INVENTORY)")


@pytest.mark.parametrize("path", [p for p in ("lab status", "lab up", "cluster doctor", "guest show")])
def test_a_missing_default_inventory_is_one_line_naming_the_option(path, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LABWRIGHT_INVENTORY", raising=False)
    monkeypatch.delenv("LABWRIGHT_CLUSTER_INVENTORY", raising=False)
    code, out, err = run(capsys, *path.split())
    assert code == 2 and out == "" and err.count("\n") == 1, (path, err)
    assert "inventories/local.py" in err and "-i/--inventory FILE" in err


def test_the_json_of_every_command_is_documented():
    text = DOCS.read_text()
    for command in COMMANDS:
        heading = f"### `labwright {command.path}`"
        assert heading in text, f"docs/cli.md: no section {heading}"
        section = text.split(heading, 1)[1].split("\n### ", 1)[0]
        assert "--json" in section, f"docs/cli.md {heading}: document the shape of its --json"


def test_a_failure_under_json_is_a_json_error_object(capsys, tmp_path):
    missing = tmp_path / "missing.py"
    code, out, err = run(capsys, "lab", "status", "-i", str(missing), "--json")
    assert code == 2
    assert json.loads(out) == {"error": f"inventory {missing}: no such file; pass an existing file with "
                                        "-i/--inventory FILE (or set LABWRIGHT_INVENTORY)", "exit_code": 2}
    assert err.count("\n") == 1 and err.startswith("labwright: error: inventory ")
    # a usage error too (click's), and the conflict refused before the command runs
    code, out, err = run(capsys, "lab", "status", "--json", "--jsno")
    assert code == 2 and json.loads(out)["exit_code"] == 2 and "--jsno" in json.loads(out)["error"]
    code, out, err = run(capsys, "guest", "destroy", "--json", "--dry", "--yes")
    assert code == 2 and json.loads(out) == {"error": "--dry and --yes contradict each other: --dry changes nothing, "
                                                      "--yes acts; give one of them", "exit_code": 2}
    # without --json stdout stays empty
    code, out, err = run(capsys, "lab", "status", "-i", str(missing))
    assert code == 2 and out == ""


def test_a_report_already_printed_gets_no_second_json_document(capsys):
    # gpu arch with a CUDA that has no kernels for the GPU: its report says so, exit 1, stdout one JSON document
    code, out, err = run(capsys, "gpu", "arch", "12.0", "--cuda", "12.6", "--json")
    assert code == 1
    report = json.loads(out)
    assert report["capability"] == "12.0" and report["cuda_has_kernels"] is False and report["reason"]


@pytest.mark.parametrize("argv, wanted", [
    (["lab", "stauts"], "No such command 'stauts'. Did you mean 'status'?"),
    (["labb"], "No such command 'labb'. Did you mean 'lab'?"),
    (["lab", "status", "--jsn"], "No such option: --jsn. Did you mean --json?"),
    (["guest", "destroy", "--ye"], "No such option: --ye. Did you mean --yes?"),
])
def test_a_misspelling_suggests_the_nearest_in_one_line(argv, wanted, capsys):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith("labwright: error: ") and wanted in err, err


def test_shell_completion_is_one_documented_command(capsys):
    root = typer.main.get_command(register())
    names = {flag for p in root.params for flag in p.opts}
    assert {"--install-completion", "--show-completion"} <= names
    assert "labwright --install-completion" in DOCS.read_text()
    # The installed entry point, started from bash: typer names the shell by walking up to the parent process
    # (shellingham), not from its argument, so the parent must be the shell asked for (a `sh -c` or a job runner above
    # pytest would be "Shell  not supported"). `; true` keeps bash from exec-ing the command in its own place.
    script = Path(sys.executable).with_name("labwright")
    proc = subprocess.run(["bash", "-c", '"$0" --show-completion bash; rc=$?; true; exit $rc', str(script)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert "complete -o default -F" in proc.stdout and "_LABWRIGHT_COMPLETE" in proc.stdout, proc.stdout[:300]


def test_version_and_completion_load_no_group():
    # `labwright --version` and `--show-completion` import none of the command groups (seconds of imports)
    code = ("import sys; from labwright.cli import main; rc = main(['--version']); "
            "print(rc, sorted(m for m in sys.modules if m.startswith('labwright.cli.')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "0 ['labwright.cli.vocab']", proc.stdout
