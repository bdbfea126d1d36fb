"""No benchmark or Python script starts one of the venv's console scripts by its bare name (a static check).

The benchmarks and scripts run as their docstrings say, ``.venv/bin/python benchmarks/NAME.py``: the venv is not
activated, so ``.venv/bin`` is not on PATH and ``subprocess.run(["labwright", ...])`` fails with
``FileNotFoundError: 'labwright'`` (benchmarks/matrix_refresh.py did), or worse runs another install's ``pytest``
or ``python3``. They name this interpreter instead: ``[sys.executable, "-m", "labwright", ...]`` or
``Path(sys.executable).parent / "labwright"``.

The scan parses each file and looks at every call of subprocess's functions (``run``, ``Popen``, ``call``,
``check_call``, ``check_output``; ``os.exec*p*`` / ``os.spawn*p*``; ``asyncio.create_subprocess_exec``/``_shell``):
the program is the first word of the argv list (through ``[*base, ...]``, ``a + b``, ``x if c else y`` and a
name assigned a list in the same file) or of a shell string. A bare word naming a console script of this venv (the
installed distributions' ``console_scripts``, labwright's own, the files in ``.venv/bin``) is reported with its
file and line.
"""

from __future__ import annotations

import ast
import sys
import tomllib
from importlib.metadata import distributions
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SUBPROCESS_FUNCTIONS = {"run", "Popen", "call", "check_call", "check_output"}
OS_FUNCTIONS = {"execlp", "execlpe", "execvp", "execvpe", "spawnlp", "spawnlpe", "spawnvp", "spawnvpe", "system",
                "popen"}
ASYNCIO_FUNCTIONS = {"create_subprocess_exec", "create_subprocess_shell"}
#: Always venv programs whatever this interpreter has installed (a bare one finds another install, or none).
ALWAYS = {"labwright", "pyinfra", "pytest", "py.test", "ruff", "mypy", "pip", "pip3", "python", "python3", "hf",
          "huggingface-cli", "uvicorn", "playwright"}


def console_scripts() -> set[str]:
    names = set(ALWAYS)
    names |= {ep.name for dist in distributions() for ep in dist.entry_points if ep.group == "console_scripts"}
    names |= set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"].get("scripts", {}))
    for venv_bin in {REPO / ".venv" / "bin", Path(sys.executable).parent}:
        if venv_bin.is_dir() and (venv_bin.parent / "pyvenv.cfg").is_file():  # a venv's bin, not /usr/bin
            names |= {p.name for p in venv_bin.iterdir()
                      if p.is_file() and not p.name.startswith(("activate", "Activate"))}
    return names


def python_files() -> list[Path]:
    """benchmarks/*.py and the Python files of scripts/ (by suffix, or a python shebang on an extensionless file)."""
    found = sorted((REPO / "benchmarks").glob("*.py"))
    for path in sorted((REPO / "scripts").rglob("*")):
        if not path.is_file():
            continue
        if path.suffix == ".py":
            found.append(path)
        elif not path.suffix:
            with path.open("rb") as stream:
                first = stream.readline()
            if first.startswith(b"#!") and b"python" in first:
                found.append(path)
    return found


class _Calls(ast.NodeVisitor):
    """Calls that start a program, and what the module binds names to (``x = [...]``)."""

    def __init__(self) -> None:
        self.subprocess_names: set[str] = set()  # from subprocess import run as ...
        self.calls: list[ast.Call] = []
        self.assigned: dict[str, list[ast.expr]] = {}

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module == "subprocess":
            self.subprocess_names |= {a.asname or a.name for a in node.names if a.name in SUBPROCESS_FUNCTIONS}
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            if isinstance(target, ast.Name):
                self.assigned.setdefault(target.id, []).append(node.value)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if isinstance(node.target, ast.Name) and node.value is not None:
            self.assigned.setdefault(node.target.id, []).append(node.value)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            owner, name = func.value.id, func.attr
            if (owner == "subprocess" and name in SUBPROCESS_FUNCTIONS) or (owner == "os" and name in OS_FUNCTIONS) \
                    or (owner == "asyncio" and name in ASYNCIO_FUNCTIONS):
                self.calls.append(node)
        elif isinstance(func, ast.Name) and func.id in self.subprocess_names:
            self.calls.append(node)
        self.generic_visit(node)


def _program_words(node: ast.expr, assigned: dict[str, list[ast.expr]], depth: int = 0) -> list[str]:
    """The string constants that can be the program of argv expression ``node``."""
    if depth > 8:
        return []
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        words = node.value.split()
        return words[:1]
    if isinstance(node, (ast.List, ast.Tuple)) and node.elts:
        first = node.elts[0]
        return _program_words(first.value if isinstance(first, ast.Starred) else first, assigned, depth + 1)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _program_words(node.left, assigned, depth + 1)
    if isinstance(node, ast.IfExp):
        return _program_words(node.body, assigned, depth + 1) + _program_words(node.orelse, assigned, depth + 1)
    if isinstance(node, ast.Name):
        return [w for value in assigned.get(node.id, []) for w in _program_words(value, assigned, depth + 1)]
    return []


def bare_console_scripts(source: str, names: set[str], filename: str = "<source>") -> list[str]:
    """``FILE:LINE: NAME`` for each program start by a bare console-script name in ``source``."""
    tree = ast.parse(source, filename=filename)
    calls = _Calls()
    calls.visit(tree)
    found = []
    for call in calls.calls:
        argv = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "args"), None)
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr.startswith("spawn") and len(call.args) > 1:
            argv = call.args[1]  # os.spawn*p*(mode, file, ...)
        if argv is None:
            continue
        for word in _program_words(argv, calls.assigned):
            if "/" not in word and word in names:
                found.append(f"{filename}:{call.lineno}: {word}")
    return found


NAMES = console_scripts()


@pytest.mark.parametrize("path", python_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_bare_console_script_is_started(path):
    found = bare_console_scripts(path.read_text(encoding="utf-8"), NAMES, str(path.relative_to(REPO)))
    assert not found, ("started by a bare name, looked up on PATH (no .venv/bin there when run as "
                       "`.venv/bin/python FILE`): use [sys.executable, \"-m\", \"labwright\", ...] or "
                       "str(Path(sys.executable).parent / NAME): " + "; ".join(found))


def test_the_scan_covers_the_benchmarks_and_the_scripts():
    names = {str(p.relative_to(REPO)) for p in python_files()}
    assert {"benchmarks/matrix_refresh.py", "benchmarks/bios_backup.py", "benchmarks/guest_apply.py",
            "scripts/docs_pictures.py", "scripts/record-registry"} <= names
    assert {"labwright", "pyinfra", "pytest"} <= NAMES and "git" not in NAMES and "lxc" not in NAMES


@pytest.mark.parametrize(("source", "expected"), [
    ('import subprocess\nsubprocess.run(["labwright", "matrix", "refresh"], capture_output=True)\n', ["labwright"]),
    ('import subprocess\ncmd = ["pyinfra", "-y"]\nsubprocess.Popen([*cmd, "deploy.py"])\n', ["pyinfra"]),
    ('import subprocess\nsubprocess.check_output("pytest -q tests", shell=True)\n', ["pytest"]),
    ('from subprocess import run as go\ngo(args=["ruff", "check"])\n', ["ruff"]),
    ('import subprocess\nsubprocess.call(["mypy"] + extra if x else ["git", "status"])\n', ["mypy"]),
    ('import os\nos.execvp("labwright", ["labwright", "--help"])\n', ["labwright"]),
    ('import os\nos.spawnvp(os.P_WAIT, "pytest", ["pytest"])\n', ["pytest"]),
    ('import subprocess, sys\nsubprocess.run([sys.executable, "-m", "labwright", "matrix"])\n', []),
    ('import subprocess, sys\nfrom pathlib import Path\n'
     'subprocess.run([str(Path(sys.executable).parent / "labwright"), "--help"])\n', []),
    ('import subprocess\nsubprocess.run(["git", "status"]); subprocess.run(["/usr/bin/python3", "-V"])\n', []),
    ('deploy = ["pyinfra", "-y"]\nprint(" ".join(deploy))\n', []),  # shown, never started
])
def test_the_scan_finds_what_it_should(source, expected):
    found = bare_console_scripts(source, NAMES)
    assert [line.rsplit(": ", 1)[1] for line in found] == expected, found


def test_the_scan_finds_the_matrix_refresh_bug_as_it_was():
    """benchmarks/matrix_refresh.py before the fix (``FileNotFoundError: 'labwright'`` when run as documented)."""
    before = ('import subprocess\n\ndef _refresh(out, index):\n'
              '    proc = subprocess.run(["labwright", "matrix", "refresh", "--out", str(out), "--index", index],\n'
              '                          capture_output=True, text=True, timeout=600)\n')
    assert bare_console_scripts(before, NAMES, "benchmarks/matrix_refresh.py") == [
        "benchmarks/matrix_refresh.py:4: labwright"]
