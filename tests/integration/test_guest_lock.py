"""One run at a time per guest, on the real lab: a pyinfra deploy against a guest another labwright run holds waits
(one line naming the holder) or refuses (one line naming pid, controller host, command, since when); a lock left by
a SIGKILLed run is found stale and released by the next run, which completes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from labwright import guestlock
from labwright.testing.lab_fixture import Lab
from labwright.testing.pyinfra_output import run_pyinfra, tool_env
from labwright.testing.waiting import wait_for
from support.guest_lock import holding

pytest_plugins = ["labwright.testing.lab_fixture"]
pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]


def lock_in(lab: Lab, name: str) -> dict | None:
    result = lab.client.exec(name, ["cat", guestlock.LOCK_PATH])
    return json.loads(result.stdout.decode()) if result.exit_code == 0 else None


@pytest.fixture
def holder(lab: Lab, lab_container: str) -> Iterator[subprocess.Popen[str]]:
    """A labwright run outside pyinfra that holds the guest (support.guest_lock)."""
    with holding(lab_container) as proc:
        yield proc


def key_data(lab: Lab) -> str:
    return f"admin_ssh_public_key_file={Path(lab.private_key_path).with_suffix('.pub')}"


def base_deploy(lab: Lab, name: str, *data: str):
    return run_pyinfra(f"@lxd/{name}", "deploys/base.py", key_data(lab), *data, cwd=REPO)


def test_second_run_refuses_naming_the_holder(lab: Lab, lab_container: str,
                                              holder: subprocess.Popen[str]) -> None:
    held = lock_in(lab, lab_container)
    assert held is not None and held["pid"] == holder.pid
    run = base_deploy(lab, lab_container, "labwright_lock_wait=0")
    assert run.rc != 0, run.output
    line = next(line for line in run.output.splitlines() if "another labwright run holds this guest" in line)
    assert f"pid {holder.pid} on {held['host']} (test holder:" in line, line
    assert "since 20" in line and guestlock.LOCK_PATH in line, line
    assert "Traceback" not in run.output
    # nothing of the deploy ran; the holder's lock is untouched
    assert lock_in(lab, lab_container) == held


def test_second_run_waits_then_completes(lab: Lab, lab_container: str, holder: subprocess.Popen[str]) -> None:
    cmd = [str(Path(sys.executable).parent / "pyinfra"), "-y", f"@lxd/{lab_container}", "deploys/base.py",
           "--data", key_data(lab), "--data", "labwright_lock_wait=300"]
    second = subprocess.Popen(cmd, cwd=REPO, env=tool_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
    assert second.stdout is not None
    # the second run says whom it waits for, then waits while the first holds the guest
    waited = []
    for line in second.stdout:
        waited.append(line)
        if "waiting up to 300s for the run lock" in line:
            break
    assert f"held by pid {holder.pid}" in waited[-1], "".join(waited)
    assert lock_in(lab, lab_container)["pid"] == holder.pid
    assert second.poll() is None
    holder.stdin.close()  # the first run ends and gives the guest back
    rest, _ = second.communicate(timeout=600)
    assert second.returncode == 0, "".join(waited) + rest
    assert lock_in(lab, lab_container) is None, "the deploy left its lock behind"
    # the lock is not a change: a re-run of the same deploy still reports none
    again = base_deploy(lab, lab_container)
    assert again.rc == 0 and again.totals.changed == 0, again.output[-3000:]


def test_lock_of_a_killed_run_is_released_by_the_next(lab: Lab, lab_container: str,
                                                      holder: subprocess.Popen[str]) -> None:
    dead_pid = holder.pid
    os.kill(dead_pid, signal.SIGKILL)
    holder.wait()
    assert lock_in(lab, lab_container)["pid"] == dead_pid        # a killed run cannot clean up
    started = time.monotonic()
    run = base_deploy(lab, lab_container, "labwright_lock_wait=0")
    assert run.rc == 0, run.output
    assert f"released a stale run lock (pid {dead_pid} is no longer running" in run.output, run.output
    assert lock_in(lab, lab_container) is None
    print(f"\nre-run after a killed holder: {time.monotonic() - started:.1f}s")


def test_killed_pyinfra_deploy_leaves_a_stale_lock_the_rerun_releases(lab: Lab, lab_container: str) -> None:
    cmd = [str(Path(sys.executable).parent / "pyinfra"), "-y", f"@lxd/{lab_container}", "deploys/base.py",
           "--data", key_data(lab)]
    first = subprocess.Popen(cmd, cwd=REPO, env=tool_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        held = wait_for(f"the deploy (pid {first.pid}) to take the lock in {lab_container}",
                        lambda: (lock := lock_in(lab, lab_container)) and lock["pid"] == first.pid and lock)
    finally:
        first.kill()
        first.wait()
    assert "Base" in held["purpose"] and "pyinfra" in held["command"]
    run = base_deploy(lab, lab_container, "labwright_lock_wait=0")
    assert run.rc == 0, run.output
    assert f"released a stale run lock (pid {first.pid} is no longer running" in run.output, run.output
    assert lock_in(lab, lab_container) is None


# A labwright deploy of the user's own (composed with guestlock.locked, as the shipped ones are) that holds the
# guest until the test lets it go: the file /tmp/go in the guest.
HOLDING_DEPLOY = '''
from pyinfra.operations import server
from labwright.guestlock import locked

@locked("waits for /tmp/go")
def hold():
    server.shell(name="wait for /tmp/go", commands=["until [ -e /tmp/go ]; do sleep 0.1; done"])

hold()
'''


def test_two_pyinfra_deploys_one_waits_for_the_other(lab: Lab, lab_container: str, tmp_path: Path) -> None:
    deploy_file = tmp_path / "holding.py"
    deploy_file.write_text(HOLDING_DEPLOY)
    pyinfra = str(Path(sys.executable).parent / "pyinfra")
    first = subprocess.Popen([pyinfra, "-y", f"@lxd/{lab_container}", str(deploy_file)], cwd=REPO, env=tool_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    second = None
    try:
        wait_for(f"the first deploy (pid {first.pid}) to hold {lab_container}",
                 lambda: (lock := lock_in(lab, lab_container)) and lock["pid"] == first.pid)
        refused = base_deploy(lab, lab_container, "labwright_lock_wait=0")
        assert refused.rc != 0
        line = next(x for x in refused.output.splitlines() if "another labwright run holds this guest" in x)
        assert f"pid {first.pid} on " in line and "(waits for /tmp/go: pyinfra -y" in line, line
        second = subprocess.Popen([pyinfra, "-y", f"@lxd/{lab_container}", "deploys/base.py", "--data",
                                   key_data(lab)], cwd=REPO, env=tool_env(), stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
        assert second.stdout is not None
        seen = []
        for out_line in second.stdout:
            seen.append(out_line)
            if "waiting up to 300s for the run lock" in out_line:
                break
        assert f"held by pid {first.pid}" in seen[-1], "".join(seen)
        assert first.poll() is None and second.poll() is None   # one runs, the other waits
        lab.client.exec(lab_container, ["touch", "/tmp/go"])
        first_out, _ = first.communicate(timeout=300)
        assert first.returncode == 0, first_out[-3000:]
        rest, _ = second.communicate(timeout=600)
        assert second.returncode == 0, "".join(seen) + rest
        assert lock_in(lab, lab_container) is None
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()


def test_probe_restore_takes_the_guest_lock(lab: Lab, lab_container: str, holder: subprocess.Popen[str]) -> None:
    """`labwright probe` changes an engine's config in the guest: it takes the same run lock as the deploys, refuses
    naming the holder (exit 1, one line, nothing touched), and runs once the holder is gone."""
    held = lock_in(lab, lab_container)
    assert held is not None and held["pid"] == holder.pid
    cli = [str(Path(sys.executable).parent / "labwright"), "probe", "restore", "--guest", lab_container]
    refused = subprocess.run([*cli, "--lock-wait", "0"], capture_output=True, text=True, env=tool_env(), timeout=300)
    assert refused.returncode == 1, refused.stderr
    errors = [line for line in refused.stderr.splitlines() if line.startswith("labwright: error:")]
    assert len(errors) == 1 and "another labwright run holds this guest" in errors[0], refused.stderr
    assert f"pid {holder.pid} on {held['host']} (test holder:" in errors[0], errors[0]
    assert "nothing to restore" not in refused.stdout  # refused before it looked at the guest's probe records
    assert lock_in(lab, lab_container) == held
    holder.kill()
    holder.wait()
    # The holder died without giving the lock back: the next run (same controller, pid gone) releases it and runs.
    ran = subprocess.run([*cli, "--lock-wait", "0"], capture_output=True, text=True, env=tool_env(), timeout=300)
    assert ran.returncode == 0, ran.stderr
    assert "released a stale run lock" in ran.stdout + ran.stderr
    assert "nothing to restore: no interrupted probe" in ran.stdout
    assert lock_in(lab, lab_container) is None  # given back at the end


def test_guest_restore_of_a_running_guest_waits_for_the_run_holding_it(lab: Lab, lab_container: str,
                                                                       holder: subprocess.Popen[str]) -> None:
    """Restoring a running guest stops it and discards everything since the snapshot: never under a deploy or stack
    switch still running in it. Refused naming the holder (exit 1, one line, the guest untouched and running), then
    done once the holder is gone."""
    held = lock_in(lab, lab_container)
    assert held is not None and held["pid"] == holder.pid
    cli = [str(Path(sys.executable).parent / "labwright"), "guest"]
    taken = subprocess.run([*cli, "snapshot", lab_container, "--name", "before-restore-test"], capture_output=True,
                           text=True, env=tool_env(), timeout=300)
    assert taken.returncode == 0, taken.stderr
    lab.client.exec(lab_container, ["touch", "/root/after-the-snapshot"])
    restore = [*cli, "restore", lab_container, "before-restore-test", "--force", "--yes", "--lock-wait", "0"]
    refused = subprocess.run(restore, capture_output=True, text=True, env=tool_env(), timeout=300)
    assert refused.returncode == 1, refused.stderr
    errors = [line for line in refused.stderr.splitlines() if line.startswith("labwright: error:")]
    assert len(errors) == 1 and "another labwright run holds this guest" in errors[0], refused.stderr
    assert f"pid {holder.pid} on {held['host']} (test holder:" in errors[0], errors[0]
    assert lab.client.instance(lab_container)["status"] == "Running"
    assert lab.client.exec(lab_container, ["test", "-e", "/root/after-the-snapshot"]).exit_code == 0  # untouched
    holder.kill()
    holder.wait()
    done = subprocess.run(restore, capture_output=True, text=True, env=tool_env(), timeout=300)
    assert done.returncode == 0, done.stderr
    assert lab.client.exec(lab_container, ["test", "-e", "/root/after-the-snapshot"]).exit_code != 0  # restored
    assert lab.client.instance(lab_container)["status"] == "Running"
