"""Every value that reaches a shell goes through labwright.shell (issue 31, safe defaults): a path with shell
characters is refused in one line naming its data key, and what is accepted reaches the command as exactly one
argument equal to the value. Proved with a real ``sh``: the rendered commands run with ``python3`` and pip
replaced by stand-ins that print their arguments NUL-separated."""

from __future__ import annotations

import ast
import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from pyinfra.api.exceptions import DeployError

from labwright.deploys import kokoro, litellm
from labwright.deploys.common import pip_install, venv_create
from labwright.shell import join, path_problem, quote
from support.hypothesis_budget import examples

REPO = Path(__file__).resolve().parents[3]
META = list(";|&<>$`'\"\\ \t\n\r*?[]{}()#~!^=,%-.:@+aZ9é\u2028")
# Any text but NUL (argv cannot carry it) and lone surrogates (not encodable); META-heavy half the time.
ANY = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
TEXT = st.one_of(st.text(ANY, min_size=1, max_size=30), st.text(st.sampled_from(META), min_size=1, max_size=30))
# One path segment (no "/"), so a value stays inside the test's directory.
SEGMENT = TEXT.filter(lambda s: "/" not in s and s not in (".", "..") and len(s.encode()) < 200)
PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                           HealthCheck.filter_too_much])

STUBS = r"""
python3() {
    printf '%s\0' python3 "$@" >> "$LOG"
    if [ "$1" = -m ]; then mkdir -p "$3/bin" && cp "$PIP_STUB" "$3/bin/pip"; else echo LITELLM_MASTER_KEY=sk-stub; fi
}
"""


def run_sh(command: str, log: Path, pip_stub: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LOG": str(log), "PIP_STUB": str(pip_stub)}
    return subprocess.run(["sh", "-c", STUBS + command], capture_output=True, text=True, env=env, timeout=30)


def argv_log(log: Path) -> list[str]:
    return log.read_bytes().decode().split("\0")[:-1] if log.exists() else []


def make_pip_stub(where: Path) -> Path:
    stub = where / "pip-stub"
    stub.write_text('#!/bin/sh\nprintf \'%s\\0\' "$0" "$@" >> "$LOG"\n')
    stub.chmod(0o755)
    return stub


@given(st.lists(TEXT, min_size=1, max_size=4))
@settings(max_examples=200, deadline=None)
def test_quote_and_join_give_sh_exactly_the_values(values: list[str]) -> None:
    """``sh -c "printf '%s\\0' WORDS"``: the words sh sees are the values, byte for byte, one argument each."""
    out = subprocess.run(["sh", "-c", f"printf '%s\\0' {join(values)}"], capture_output=True, timeout=30)
    assert out.returncode == 0 and out.stdout.decode().split("\0")[:-1] == values
    one = subprocess.run(["sh", "-c", f"printf '%s\\0' {quote(values[0])}"], capture_output=True, timeout=30)
    assert one.stdout.decode() == values[0] + "\0"


@given(TEXT)
@settings(max_examples=300, deadline=None)
def test_a_path_with_shell_characters_is_refused_in_one_line_naming_the_key(value: str) -> None:
    bad = any(c in value for c in ";|&<>$`'\"\\") or any(c.isspace() or ord(c) < 32 or 127 <= ord(c) <= 159
                                                          for c in value)  # control: C0, DEL and C1
    for keys, key in ((litellm.KEYS, "venv"), (litellm.KEYS, "config_dir"), (kokoro.KEYS, "dir"),
                      (kokoro.KEYS, "venv"), (litellm.KEYS, "find_links")):
        path = "/" + value
        try:
            assert keys.path_of(key, path) == path
        except DeployError as refused:
            message = str(refused)
            assert message.startswith(f"{keys.prefix}_{key}: ") and "\n" not in message and "\r" not in message
            assert bad, message
        else:
            assert not bad
    assert path_problem("/srv/ok-path_1.2/x") is None and path_problem("relative/x") is not None


def fresh_dir(tmp_path: Path) -> Path:
    return Path(tempfile.mkdtemp(dir=tmp_path))


@given(SEGMENT, SEGMENT)
@PROPERTY
def test_litellm_install_and_master_key_reach_sh_as_one_argument_each(tmp_path: Path, name: str, links: str) -> None:
    where = fresh_dir(tmp_path)
    venv, find_links, config_dir = f"{where}/{name}", f"{where}/{links}", f"{where}/{name}"
    try:
        litellm.KEYS.path_of("venv", venv)
        litellm.KEYS.path_of("find_links", find_links, absolute=False)
    except DeployError as refused:
        assert str(refused).startswith(("litellm_venv: ", "litellm_find_links: ")) and "\n" not in str(refused)
        event("refused")
        return
    event("run by sh")
    log, stub = where / "argv.log", make_pip_stub(where)
    for command in litellm.install_commands(venv, "1.80.0", find_links, "@lxd/gw"):
        result = run_sh(command, log, stub)
        assert result.returncode == 0, (command, result.stderr)
    assert argv_log(log) == ["python3", "-m", "venv", venv,
                             f"{venv}/bin/pip", "install", "-q", "--disable-pip-version-check", "--no-index",
                             "--find-links", find_links, "--require-hashes", "-r", f"{find_links}/requirements.lock"]
    master = f"{config_dir}/master.env"
    result = run_sh(litellm.master_key_command(master), log, stub)
    assert result.returncode == 0, result.stderr
    assert Path(master).read_text() == "LITELLM_MASTER_KEY=sk-stub\n" and not Path(f"{master}.new").exists()
    assert stat.S_IMODE(os.stat(master).st_mode) == 0o600


@given(SEGMENT, SEGMENT, st.lists(TEXT, min_size=1, max_size=3))
@PROPERTY
def test_kokoro_install_reaches_sh_as_one_argument_each(tmp_path: Path, name: str, marker: str,
                                                        wanted: list[str]) -> None:
    assume("\n" not in marker and "\r" not in marker)
    where = fresh_dir(tmp_path)
    venv = f"{where}/{name}"
    try:
        kokoro.KEYS.path_of("venv", venv)
    except DeployError as refused:
        assert str(refused).startswith("kokoro_venv: ") and "\n" not in str(refused)
        event("refused")
        return
    event("run by sh")
    log, stub = where / "argv.log", make_pip_stub(where)
    for command in kokoro.install_commands(venv, wanted, "reqs", "", "https://example.invalid/simple", marker, "h"):
        result = run_sh(command, log, stub)
        assert result.returncode == 0, (command, result.stderr)
    assert argv_log(log) == ["python3", "-m", "venv", venv,
                             f"{venv}/bin/pip", "install", "-q", "--disable-pip-version-check", "--extra-index-url",
                             "https://example.invalid/simple", *wanted]
    assert Path(f"{venv}/{kokoro.MARKER}").read_text() == marker + "\n"


def test_venv_and_pip_lines_quote_the_path() -> None:
    assert venv_create("/opt/a b") == "test -x '/opt/a b/bin/pip' || python3 -m venv '/opt/a b'"
    assert pip_install("/opt/x;y/bin/pip", "z", "z", "PyPI", "k", where="h").startswith("out=$('/opt/x;y/bin/pip' ")


@pytest.mark.parametrize("deploy, item, key", [
    ("litellm", "litellm_venv=/opt/litellm;reboot", "litellm_venv"),
    ("litellm", "litellm_config_dir=/etc/litellm|x", "litellm_config_dir"),
    ("kokoro", "kokoro_venv=/opt/kokoro&&id", "kokoro_venv"),
    ("kokoro", "kokoro_dir=/opt/k$(id)", "kokoro_dir"),
])
def test_a_deploy_refuses_a_path_with_shell_characters_in_one_line_before_anything(cli_env, deploy, item, key):
    proc = subprocess.run([str(Path(sys.executable).parent / "pyinfra"), "-y", "@local", f"deploys/{deploy}.py",
                           "--data", item], capture_output=True, text=True, env=cli_env, cwd=REPO, timeout=120)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    lines = [line for line in output.splitlines() if f"{key}: " in line]
    assert len(lines) == 1 and "give a path without shell characters" in lines[0], output
    assert "Traceback" not in output and "Beginning operation run" not in output


def test_deploys_and_operations_quote_through_the_one_helper() -> None:
    """No deploy or operation quotes for a shell on its own: labwright.shell is the one helper."""
    src = REPO / "src" / "labwright"
    found = [str(path.relative_to(src)) for folder in ("deploys", "operations", "base")
             for path in sorted((src / folder).glob("*.py")) if "shlex" in path.read_text()]
    assert found == [], f"use labwright.shell.quote / join instead of shlex in {found}"


#: Where shlex may still be used in code: the helper itself; shlex.split parses (a unit's ExecStart=, a flag list),
#: it quotes nothing. lxd/session.py's only shlex is inside the helper script it runs on a guest (a string, where
#: labwright is not installed), which the AST walk below does not see as code.
SHLEX_QUOTING = {"quote", "join"}


def test_the_whole_package_quotes_through_the_one_helper() -> None:
    """Nowhere in src/labwright does code call shlex.quote / shlex.join (or import them) but labwright.shell: every
    value that reaches a shell is quoted by the one helper. Read as code (ast), so remote scripts held in strings
    and comments do not count."""
    src = REPO / "src" / "labwright"
    found = []
    for path in sorted(src.rglob("*.py")):
        if path == src / "shell.py":
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            attr = (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "shlex"
                    and node.attr in SHLEX_QUOTING)
            imported = (isinstance(node, ast.ImportFrom) and node.module == "shlex"
                        and any(a.name in SHLEX_QUOTING for a in node.names))
            if attr or imported:
                found.append(f"{path.relative_to(src)}:{node.lineno}")
    assert found == [], f"use labwright.shell.quote / join instead of shlex in {found}"


#: Modules whose own source runs on a guest, where labwright is not installed (labwright's agent carries guestlock.py
#: beside only labwright.errors; deploys/model.py sends models/fetch.py): their top level imports the standard
#: library only, so they import labwright.shell inside the controller-side function that quotes.
SHIPPED = ("guestlock.py", "models/fetch.py")


@pytest.mark.parametrize("name", SHIPPED)
def test_a_module_that_runs_on_a_guest_imports_no_labwright_at_its_top(name: str) -> None:
    tree = ast.parse((REPO / "src" / "labwright" / name).read_text())
    top = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
    found = [a.name for n in top if isinstance(n, ast.Import) for a in n.names if a.name.split(".")[0] == "labwright"]
    found += [n.module for n in top if isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == "labwright"]
    assert found == [], f"{name} runs on guests without labwright; import {found} inside a function"


# --- the helper where it leaves deploys: command builders of facts, checks and hosts, run by a real sh ----------
CANARY = "lw-canary"
INJECTIONS = [f";touch {CANARY}", f"$(touch {CANARY})", f"`touch {CANARY}`", f"\ntouch {CANARY}",
              f"|touch {CANARY}", f"&&touch {CANARY}", f"' ; touch {CANARY}; '", f'" ; touch {CANARY}; "',
              f">{CANARY}", f"<{CANARY}"]
HOSTILE = st.builds(lambda a, i, b: a + i + b, SEGMENT, st.sampled_from(INJECTIONS), SEGMENT).filter(
    lambda s: "/" not in s and len(s.encode()) < 200)


def sh_in(where: Path, command: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    return subprocess.run(["sh", "-c", command], cwd=where, capture_output=True, text=True, env=env, timeout=30)


@given(HOSTILE)
@settings(max_examples=examples(40), deadline=None)  # four sh runs each
def test_fact_and_check_commands_keep_shell_characters_inert(value: str) -> None:
    """Facts (a venv's state, a unit's process), the GPU check and the userspace listing, given values full of shell
    metacharacters (and an injection that would create a file): run by a real sh, nothing is executed from the
    value, and the value is read as the one path it is."""
    from labwright.facts.python_stack import PythonStack
    from labwright.gpu.check import engine_command
    from labwright.gpu.nvidia.driver import userspace_listing

    with tempfile.TemporaryDirectory() as scratch:
        where = Path(scratch)
        venv = where / value
        commands = [PythonStack().command(str(venv), root=str(where / "root")), engine_command(value),
                    userspace_listing(str(where / value))]
        for command in commands:
            sh_in(where, command)
            assert not (where / CANARY).exists(), (value, command)
        (venv).mkdir()
        (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
        out = sh_in(where, PythonStack().command(str(venv), root=str(where / "root"))).stdout
        assert "venv" in out.split(), out  # the directory named by the value, exactly
        assert sorted(p.name for p in where.iterdir()) == sorted([value])


@given(HOSTILE, st.binary(max_size=64), st.sampled_from([None, 0o600, 0o640]))
@settings(max_examples=examples(40), deadline=None)
def test_put_over_a_shell_writes_exactly_that_path(value: str, data: bytes, mode: int | None) -> None:
    """``hosts.put_with_cat`` (the upload of every host seam that only runs commands: pct, LXD exec, SSH) given a
    file name full of shell characters: the bytes land at exactly that path, nothing else is made or run."""
    from labwright.hosts import get_with_cat, put_with_cat
    from labwright.hosts.local import LocalHost

    with tempfile.TemporaryDirectory() as scratch:
        where = Path(scratch)
        target = where / value
        host = LocalHost()
        put_with_cat(host, data, str(target), mode)
        assert target.read_bytes() == data and get_with_cat(host, str(target)) == data
        if mode is not None:
            assert stat.S_IMODE(target.stat().st_mode) == mode
        assert sorted(p.name for p in where.iterdir()) == [value]
        assert not (Path.cwd() / CANARY).exists()
