"""labwright.testing.pyinfra_fork: a pyinfra run forked from the pre-imported server behaves as the spawned one
(exit status, both streams, environment, directory, priority, stdin, timeout), and what it cannot serve is spawned."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labwright.testing import pyinfra_fork
from labwright.testing.waiting import wait_for
from support.hypothesis_budget import examples

PYINFRA = str(Path(sys.executable).parent / "pyinfra")
DEPLOY = '''
import os, sys
from pyinfra import host
from pyinfra.operations import server
INFO = (f"data: {host.data.get('value')!r} env: {os.environ.get('LW_FORK_TEST')!r} cwd: {os.getcwd()} "
        f"nice: {os.getpriority(os.PRIO_PROCESS, 0)} argv0: {sys.argv[0]} stdin: {sys.stdin.read()!r}")
print(INFO)
print(INFO, file=sys.stderr)
with open("info.txt", "w") as out:
    out.write(INFO)
server.shell(name="Say", commands=["echo said-$((6*7))"])
if host.data.get("fail"):
    server.shell(name="Fail", commands=["exit 3"])
'''


@pytest.fixture
def deploy(tmp_path: Path) -> Path:
    path = tmp_path / "deploy.py"
    path.write_text(DEPLOY)
    return path


def both(cmd: list[str], **kwargs) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    spawned = pyinfra_fork._spawn(cmd, **kwargs)
    forked = pyinfra_fork.run(cmd, **kwargs)
    return spawned, forked


@pytest.mark.parametrize("args", [["--version"], ["-y", "@local", "{deploy}"], ["-y", "--json", "@local", "{deploy}"],
                                  ["-y", "@local", "{deploy}", "--data", "fail=1"], ["-y", "@local", "missing.py"],
                                  ["--dry", "@local", "{deploy}"], ["--no-such-option"]])
def test_a_forked_run_prints_and_exits_as_the_spawned_one(args, deploy, tmp_path) -> None:
    cmd = [PYINFRA, *(a.format(deploy=deploy) for a in args)]
    spawned, forked = both(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert (forked.returncode, forked.stdout, forked.stderr) == (spawned.returncode, spawned.stdout, spawned.stderr)
    assert forked.args == cmd


@settings(max_examples=examples(8))
@given(value=st.text(st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"]), max_size=12),
       env=st.text(st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"]), min_size=1, max_size=12))
def test_data_and_environment_reach_the_run_unchanged(value, env, tmp_path_factory) -> None:
    where = tmp_path_factory.mktemp("fork")
    (where / "deploy.py").write_text(DEPLOY)
    cmd = [PYINFRA, "-y", "@local", "deploy.py", "--data", f"value={value}"]
    kwargs = {"capture_output": True, "text": True, "cwd": where, "timeout": 120,
              "env": {**os.environ, "LW_FORK_TEST": env}}
    spawned = pyinfra_fork._spawn(cmd, **kwargs)
    seen_spawned = (where / "info.txt").read_text()
    forked = pyinfra_fork.run(cmd, **kwargs)
    seen_forked = (where / "info.txt").read_text()
    assert (forked.returncode, forked.stdout, forked.stderr) == (spawned.returncode, spawned.stdout, spawned.stderr)
    assert seen_forked == seen_spawned  # pyinfra's own reading of --data (numbers, lists) included
    assert f"env: {env!r}" in seen_forked and f"cwd: {where}" in seen_forked


def test_a_run_by_name_through_path_with_stdin_and_stderr_merged(deploy, tmp_path) -> None:
    env = {**os.environ, "PATH": f"{Path(PYINFRA).parent}:{os.environ['PATH']}"}
    cmd = ["pyinfra", "-y", "@local", str(deploy)]
    spawned, forked = both(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, input=b"in\n", env=env, cwd=tmp_path,
                           timeout=120)
    assert (forked.returncode, forked.stdout, forked.stderr) == (spawned.returncode, spawned.stdout, None)
    assert forked.args == cmd
    assert f"argv0: {PYINFRA} stdin: 'in\\n'" in (tmp_path / "info.txt").read_text()  # the path PATH found


@pytest.mark.skipif(os.geteuid() != 0, reason="lowering a priority again needs root; the suite runs as root")
def test_the_callers_priority_is_the_runs(deploy, tmp_path) -> None:
    before = os.getpriority(os.PRIO_PROCESS, 0)
    try:
        os.setpriority(os.PRIO_PROCESS, 0, before + 3)
        pyinfra_fork.run([PYINFRA, "-y", "@local", str(deploy)], capture_output=True, cwd=tmp_path)
        niced = (tmp_path / "info.txt").read_text()
    finally:
        os.setpriority(os.PRIO_PROCESS, 0, before)
    pyinfra_fork.run([PYINFRA, "-y", "@local", str(deploy)], capture_output=True, cwd=tmp_path)
    assert f"nice: {before + 3} " in niced and f"nice: {before} " in (tmp_path / "info.txt").read_text()


def test_a_timeout_kills_the_run_and_raises_as_subprocess_does(tmp_path) -> None:
    pidfile = tmp_path / "pid"
    (tmp_path / "slow.py").write_text("import os, pathlib, signal\n"
                                      f"pathlib.Path({str(pidfile)!r}).write_text(str(os.getpid()))\n"
                                      "signal.pause()  # blocks until killed\n")
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        pyinfra_fork.run([PYINFRA, "-y", "@local", "slow.py"], capture_output=True, cwd=tmp_path, timeout=3)
    assert time.monotonic() - started < 30
    pid = int(pidfile.read_text())
    wait_for(f"the timed-out run (pid {pid}) to be gone", lambda: not Path(f"/proc/{pid}").exists(), timeout=30)


def test_what_it_cannot_serve_is_spawned(tmp_path) -> None:
    other = pyinfra_fork.run([sys.executable, "-c", "import os; print(os.getppid())"], capture_output=True, text=True)
    assert int(other.stdout) == os.getpid()  # another program: a child of this process, as subprocess.run makes it
    kept = pyinfra_fork.run([PYINFRA, "--version"], capture_output=True, text=True, pass_fds=())  # a keyword not served
    assert kept.returncode == 0 and kept.stdout.startswith("pyinfra: v")


def test_a_different_interpreter_start_environment_gets_a_server_of_its_own(deploy, tmp_path) -> None:
    cmd = [PYINFRA, "-y", "@local", str(deploy)]
    pyinfra_fork.run(cmd, capture_output=True, cwd=tmp_path)
    pyinfra_fork.run(cmd, capture_output=True, cwd=tmp_path, env={**os.environ, "PYTHONIOENCODING": "latin-1"})
    keys = {key[1] for key in pyinfra_fork._servers}
    assert pyinfra_fork.startup_key(os.environ) in keys
    assert pyinfra_fork.startup_key({**os.environ, "PYTHONIOENCODING": "latin-1"}) in keys
