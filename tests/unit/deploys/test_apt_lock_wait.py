"""``lw_apt`` (labwright.aptlock), run by sh against an apt-get stand-in that answers as apt 2.6 does while another
process holds a lock: ``E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process PID (NAME)`` and
exit 100 (apt-pkg/contrib/fileutl.cc GetLock's message; checked on apt 2.6.1 in the lab guest, see the module's
docstring). The holder is a real process of the test's; the wait ends when it exits, not after a time."""

from __future__ import annotations

import ast
import re
import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labwright import aptlock
from labwright.testing.waiting import wait_for
from support.apt_stand_in import calls, stand_in, tail_waiting_on


def test_an_install_waits_for_the_holder_to_exit_then_runs(tmp_path: Path) -> None:
    holder = subprocess.Popen(["cat"], stdin=subprocess.PIPE)
    try:
        (tmp_path / "holder").write_text(str(holder.pid))
        run = subprocess.Popen(["sh", "-c", aptlock.install(["git"], wait_s=120)], env=stand_in(tmp_path),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_for("lw_apt to wait on the lock holder", lambda: tail_waiting_on(holder.pid), timeout=30)
        assert run.poll() is None  # still waiting: the holder lives
    finally:
        holder.stdin.close()  # type: ignore[union-attr]
        holder.wait()
    out, err = run.communicate(timeout=30)
    assert run.returncode == 0, err
    assert err.splitlines() == [f"labwright: apt-get install waits for process {holder.pid} (unattended-upgr) "
                                "(/var/lib/dpkg/lock-frontend) to release the apt lock (up to 120 s)"]
    assert "Setting up" in out and len(calls(tmp_path)) == 2


def test_a_lock_never_released_ends_in_one_line_naming_the_holder(tmp_path: Path) -> None:
    holder = subprocess.Popen(["cat"], stdin=subprocess.PIPE)
    try:
        (tmp_path / "holder").write_text(str(holder.pid))
        started = time.monotonic()
        run = subprocess.run(["sh", "-c", aptlock.command("update -q", wait_s=1)], env=stand_in(tmp_path),
                             capture_output=True, text=True, timeout=60)
        took = time.monotonic() - started
    finally:
        holder.stdin.close()  # type: ignore[union-attr]
        holder.wait()
    assert run.returncode == 3
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith(f"labwright: apt-get update: the apt lock is still held by process {holder.pid} "
                           "(unattended-upgr) (/var/lib/dpkg/lock-frontend) after 1 s: let it finish"), last
    assert "re-run" in last
    assert took < 30  # bounded by the wait, not by the holder


def test_another_failure_is_not_retried(tmp_path: Path) -> None:
    run = subprocess.run(["sh", "-c", aptlock.install(["nosuch"], wait_s=60)], env=stand_in(tmp_path, BROKEN="1"),
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 1
    assert "Unable to locate package nosuch" in run.stderr and "waits for" not in run.stderr
    assert len(calls(tmp_path)) == 1


def test_the_wait_is_bounded_when_asked_for_a_nonsense_limit() -> None:
    for bad in (0, -5, 86_401):
        with pytest.raises(ValueError, match="apt lock wait"):
            aptlock.function(bad)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(old_format=st.booleans(), holder_gone=st.booleans(),
       args=st.sampled_from(["update -q", "install -y curl", "install --no-install-recommends a b"]))
def test_any_lock_message_shape_is_waited_out(tmp_path: Path, old_format: bool, holder_gone: bool, args: str) -> None:
    """Whatever apt's lock line looks like (apt < 1.9 names no process; the holder may exit before lw_apt looks),
    lw_apt retries until the lock is free and says so once; it never fails on a lock it could wait for."""
    case = tmp_path / f"{int(old_format)}{int(holder_gone)}{args.replace(' ', '_')}"
    case.mkdir(exist_ok=True)
    (case / "calls").unlink(missing_ok=True)
    holder = subprocess.Popen(["cat"], stdin=subprocess.PIPE)
    (case / "holder").write_text(str(holder.pid))
    env = stand_in(case, **({"OLD_FORMAT": "1"} if old_format else {}))
    run = subprocess.Popen(["sh", "-c", aptlock.command(args, wait_s=120)], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    if not holder_gone:
        wait_for("lw_apt to try once", lambda: len(calls(case)) >= 1, timeout=30)
    holder.stdin.close()  # type: ignore[union-attr]
    holder.wait()
    out, err = run.communicate(timeout=60)
    assert run.returncode == 0, err
    waits = [line for line in err.splitlines() if "waits for" in line]
    assert len(waits) <= 1 and len(err.splitlines()) == len(waits)
    assert calls(case)[-1] == args


SRC = Path(aptlock.__file__).parent
TESTS = Path(__file__).resolve().parents[2]
# apt-get where a shell runs it (a line's or string's start, after ; & | { ( $( or `timeout N`, with VAR=value or
# sudo before it) doing something that takes apt's locks: update/clean/check always, any other command with -y (a
# message telling the user what to type has no -y; an install without -y aborts when no one answers; an update or a
# clean ends where a shell command ends: "apt-get update, then check again" is a message)
APT_COMMAND = re.compile(
    r"(?m)(^\s*|[;&|{(]\s*|\$\(|\btimeout\s+[0-9]+[smh]?\s+)(sudo\s+)?([A-Za-z_]+=\S*\s+)*apt-get\s+"
    r"(-\S+\s+)*((update|clean|autoclean|check)(?=\s*($|[;&|)}>]|-))|[a-z-]+\b[^`\n]*\s-(y|-yes|qq?y)\b)")

# dpkg changing what is installed (it takes dpkg's locks and fails at once when apt holds them)
DPKG_COMMAND = re.compile(r"(?m)(^\s*|[;&|{(]\s*|\$\()(sudo\s+)?([A-Za-z_]+=\S*\s+)*dpkg\s+(-\S+\s+)*"
                          r"(-[a-zA-Z]*[riPa]\b|--(remove|install|purge|configure|unpack)\b)")


def _strings_and_argvs(tree: ast.AST) -> tuple[list[str], list[str]]:
    """The string constants (docstrings left out) and the argv literals' first words of a module."""
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, ast.Module | ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef)
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    strings = [node for node in ast.walk(tree)
               if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]
    # the label beside a command that goes through aptlock (``_run(aptlock.argv([...]), "apt-get update")``)
    labels = {id(arg) for node in ast.walk(tree) if isinstance(node, ast.Call)
              and any(isinstance(a, ast.Call) and isinstance(a.func, ast.Attribute) and a.func.attr == "argv"
                      and isinstance(a.func.value, ast.Name) and a.func.value.id == "aptlock" for a in node.args)
              for arg in node.args if isinstance(arg, ast.Constant)}
    texts = [s.value for s in strings if id(s) not in labels]
    argvs = [node.elts[0].value for node in ast.walk(tree)
             if isinstance(node, ast.List | ast.Tuple) and node.elts and isinstance(node.elts[0], ast.Constant)
             and isinstance(node.elts[0].value, str)]
    return texts, argvs


def test_no_apt_get_runs_without_the_lock_wait() -> None:
    """The class, not the case: no module of labwright runs apt-get itself (an argv starting with apt-get, a
    command string with ``apt-get ... -y``, pyinfra's apt operations, a data script's apt-get line); each goes
    through labwright.aptlock. Messages that tell the user what to type (no ``-y``) are not commands."""
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        if path.name == "aptlock.py":
            continue
        text = path.read_text()
        tree = ast.parse(text)
        strings, argvs = _strings_and_argvs(tree)
        rel = path.relative_to(SRC)
        offenders += [f"{rel}: argv {word!r}" for word in argvs if word == "apt-get"]
        offenders += [f"{rel}: {s[:60]!r}" for s in strings if APT_COMMAND.search(s)]
        offenders += [f"{rel}: pyinfra apt operation" for node in ast.walk(tree)
                      if isinstance(node, ast.ImportFrom) and node.module == "pyinfra.operations"
                      and any(alias.name == "apt" for alias in node.names)]
    for script in sorted((SRC / "data").glob("*.sh")):
        offenders += [f"data/{script.name}: {line.strip()[:60]!r}" for line in script.read_text().splitlines()
                      if re.match(r"\s*(sudo\s+)?apt-get\b", line)]
    assert offenders == []


def test_the_build_box_script_gets_the_function() -> None:
    from labwright.llamacpp.buildbox import script_text

    text = script_text().decode()
    assert "lw_apt() {" in text and aptlock.SCRIPT_PLACEHOLDER.decode() not in text
    assert subprocess.run(["sh", "-n", "-c", text], capture_output=True).returncode == 0
    with pytest.raises(ValueError, match="placeholder"):
        aptlock.in_script(b"#!/bin/sh\napt-get update\n")


def test_no_test_runs_apt_get_in_a_guest_without_the_lock_wait() -> None:
    """CI (stop 43): a test's own ``apt-get remove`` in a fresh guest met the guest's unattended-upgrades holding
    dpkg's lock and failed. Test code's apt commands go through support.guest_apt (labwright.aptlock's wait); this
    file's apt-get stand-ins are the only exception."""
    offenders = []
    for path in sorted(TESTS.rglob("*.py")):
        if path.name in ("guest_apt.py", Path(__file__).name):
            continue
        strings, argvs = _strings_and_argvs(ast.parse(path.read_text()))
        rel = path.relative_to(TESTS)
        offenders += [f"{rel}: argv {word!r}" for word in argvs if word == "apt-get"]
        offenders += [f"{rel}: {s[:60]!r}" for s in strings if APT_COMMAND.search(s) or DPKG_COMMAND.search(s)]
    assert offenders == []


@pytest.mark.parametrize("text", ["dpkg -r --force-depends x11-utils >/dev/null", "x; dpkg --configure -a",
                                  "sudo dpkg -i /tmp/x.deb", "DEBIAN_FRONTEND=noninteractive dpkg --purge x"])
def test_the_scan_sees_a_dpkg_that_changes_packages(text: str) -> None:
    assert DPKG_COMMAND.search(text), text


@pytest.mark.parametrize("text", ["dpkg -s x11-utils | grep -q ok", "dpkg-query -W libgomp1", "dpkg -l",
                                  "dpkg -S /bin/sh", "dpkg --print-architecture", "dpkg -L x"])
def test_the_scan_leaves_dpkg_queries_alone(text: str) -> None:
    assert not DPKG_COMMAND.search(text), text


@pytest.mark.parametrize("text", [
    "timeout 60 apt-get update -qq", "DEBIAN_FRONTEND=noninteractive apt-get remove -y -q libgomp1 >/dev/null",
    "set -e\n  apt-get install -y --no-install-recommends corosync >/tmp/apt.log", "apt-get clean; rm -rf /tmp/*",
    "x && { apt-get update -q >/dev/null && true; }", "$(apt-get -qq check)", "sudo apt-get purge --yes sudo"])
def test_the_scan_sees_each_shape_of_an_apt_command(text: str) -> None:
    assert APT_COMMAND.search(text), text


@pytest.mark.parametrize("text", [
    "apt-get install mesa-vulkan-drivers vulkan-tools in the guest", "run `sudo apt-get install lxd -y`",
    "the deploy's apt-get install waits", "labwright: apt-get $1 waits for $lw_who",
    "the apt lists are empty (apt-get clean'd image?)", "apt-get update, then check again"])
def test_the_scan_leaves_messages_alone(text: str) -> None:
    assert not APT_COMMAND.search(text), text
