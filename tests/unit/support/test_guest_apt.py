"""support.guest_apt, the tests' own apt calls in a guest: they wait for another apt as labwright's deploys do
(stop 43: a test's ``apt-get remove`` met a fresh guest's unattended-upgrades). Run by sh here against the apt-get
stand-in of support.apt_stand_in; the lock holders are real processes of the test's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from labwright.testing.waiting import wait_for
from support import guest_apt
from support.apt_stand_in import calls, stand_in, tail_waiting_on


def test_an_apt_command_in_a_script_waits_for_the_holder_and_the_script_goes_on(tmp_path: Path) -> None:
    holder = subprocess.Popen(["cat"], stdin=subprocess.PIPE)
    try:
        (tmp_path / "holder").write_text(str(holder.pid))
        script = "echo before; " + guest_apt.command("remove -y -q libgomp1") + " >/dev/null; echo after"
        run = subprocess.Popen(["sh", "-c", script], env=stand_in(tmp_path), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        wait_for("the test's apt-get to wait on the holder", lambda: tail_waiting_on(holder.pid), timeout=30)
        assert run.poll() is None
    finally:
        holder.stdin.close()  # type: ignore[union-attr]
        holder.wait()
    out, err = run.communicate(timeout=30)
    assert run.returncode == 0, err
    assert out.split() == ["before", "after"]  # the subshell's exit does not end the test's script
    assert calls(tmp_path) == ["remove -y -q libgomp1"] * 2


def test_a_failing_apt_command_fails_the_script_that_checks_it(tmp_path: Path) -> None:
    script = guest_apt.command("install -y nosuch") + " || echo failed"
    run = subprocess.run(["sh", "-c", script], env=stand_in(tmp_path, BROKEN="1"), capture_output=True, text=True,
                         timeout=30)
    assert run.stdout.strip() == "failed" and "Unable to locate package nosuch" in run.stderr


def test_a_change_to_apts_files_waits_until_no_apt_holds_its_locks(tmp_path: Path) -> None:
    locks = tuple(str(tmp_path / name) for name in ("lock-frontend", "lists-lock"))
    # the holder takes the second lock as apt does (fcntl), then waits on its stdin
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, sys\nh = open(sys.argv[1], 'a')\n"
                               "fcntl.lockf(h, fcntl.LOCK_EX)\nprint('held', flush=True)\nsys.stdin.read()",
                               locks[1]], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"  # type: ignore[union-attr]
        marker = tmp_path / "changed"
        run = subprocess.Popen(["sh", "-c", guest_apt.while_apt_idle(f"touch {marker}; exit 7", locks)])
        wait_for("the wrapper to hold the first lock and wait on the second",
                 lambda: _blocked_on(run.pid) or run.poll() is not None, timeout=30)
        assert run.poll() is None and not marker.exists()
    finally:
        holder.stdin.close()  # type: ignore[union-attr]
        holder.wait()
    assert run.wait(timeout=30) == 7  # the script's own exit status
    assert marker.exists()


def _blocked_on(pid: int) -> bool:
    """A process under ``pid`` sleeps in the kernel's POSIX-lock wait (``wchan`` fcntl_setlk: F_SETLKW)."""
    parents = {}
    for path in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(path.parent.name)] = int(path.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    tree, grew = {pid}, True
    while grew:
        more = {child for child, parent in parents.items() if parent in tree} - tree
        tree |= more
        grew = bool(more)
    for member in tree:
        try:
            if "setlk" in Path(f"/proc/{member}/wchan").read_text():
                return True
        except OSError:
            continue
    return False
