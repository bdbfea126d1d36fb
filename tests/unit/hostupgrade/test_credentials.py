"""Credentials never outlive their step: the resumed upgrade is failed at every point (the inventory, the
credentials, the API, each step of the plan with an error the run expects and with one it does not, the state
file's last write, a kill) and each time the env file (PROXMOX_*), the resume unit and its wants link are gone and
the secret is nowhere in the host tree. Where the node acts as root itself (pvesh) no secret is written at all.

The node is a host tree with the doubles of tests/support/host_tools first on PATH (systemctl among them), so the
unit is enabled and removed as on a node; the CLI's ``--resume`` runs in-process as the boot unit would run it."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
from pathlib import Path

import pytest

from labwright.cli import main, register
from labwright.errors import OperationFailed
from labwright.hostupgrade import state
from labwright.hostupgrade.plan import Plan, Step
from labwright.hostupgrade.pve import PveUpgrade
from labwright.hostupgrade.realhost import CommandHost
from labwright.hostupgrade.run import Upgrade
from labwright.testing.waiting import wait_for
from support.host_cli import on_tree, resume_command
from support.host_doubles import run_stop_post, tool_env
from support.host_tree import TreeHost

from .test_realhost import NEW, NEXT, OLD, host, tree

SECRET = "s3cret-token-value-4f1c"
TOKEN_ID = "root@pam!labwright"
#: After the reboot the resumed run does these (no guests here: the steps stand for the majors, the userspace,
#: the restarts and the checks, each a boundary the resume can fail at).
RESUMED = [Step("kernel", NEXT, "booted"), Step("list", "lwnode1", "no guests"), Step("kernel", NEXT, "again"),
           Step("list", "lwnode1", "last")]


def plan() -> Plan:
    return Plan("lwnode1", OLD, NEW, NEXT, [Step("host-driver", "lwnode1", ""), Step("reboot", "lwnode1", ""),
                                            *RESUMED])


def node(tmp_path: Path, monkeypatch, api: str = state.HTTPS) -> Path:
    """A node that rebooted in the middle of a Proxmox upgrade: the state saved, the credentials carried (over
    HTTPS), the resume unit enabled; PROXMOX_* in the environment as the unit's EnvironmentFile= gives them."""
    root = tree(tmp_path / "node")
    (root / "etc/hostname").write_text("lwnode1\n")
    (root / "proc/devices").write_text("Character devices:\n195 nvidia-frontend\n509 nvidia-uvm\n")
    for key, value in tool_env(root).items():
        if key in ("PATH", "LW_FAKE_ROOT", "LW_HOST_TOOLS"):
            monkeypatch.setenv(key, value)
    monkeypatch.delenv("PROXMOX_USER", raising=False)
    monkeypatch.delenv("PROXMOX_PASSWORD", raising=False)
    monkeypatch.setenv("PROXMOX_TOKEN_ID", TOKEN_ID)
    monkeypatch.setenv("PROXMOX_TOKEN_SECRET", SECRET)
    inventory = tmp_path / "lab.py"
    inventory.write_text("pve_nodes = ([('lwnode1', {'proxmox_api_url': 'https://lwnode1:8006'})], {})\n")
    saved = state.Saved("lwnode1", "pve", plan().to_dict(), 2, str(root / "var/cache/labwright/nvidia"),
                        done=[{"action": "host-driver", "target": "lwnode1", "ok": True, "detail": "", "seconds": 1.0},
                              {"action": "reboot", "target": "lwnode1", "ok": True, "detail": "", "seconds": 0.1}],
                        previous_driver=None, inventory=str(inventory), extra={"majors_before": {}},
                        started=state.now(), api=api)
    state.save(TreeHost(root), saved)
    assert state.write_env(TreeHost(root), state.carried_for(saved, os.environ)) == (api == state.HTTPS)
    host(root).enable_resume_unit(state.resume_unit_text("lwnode1", resume_command(root, "lwnode1")))
    assert state.leftovers(TreeHost(root)) == ([state.ENV_PATH] if api == state.HTTPS else []) + [
        state.RESUME_UNIT_PATH, state.RESUME_WANTS_LINK]
    return root


def resume(capsys, root: Path) -> tuple[int, str, str]:
    register(["host"])
    with on_tree(root):
        code = main(["host", "upgrade", "lwnode1", "--resume"])
    out, err = capsys.readouterr()
    return code, out, err


def secret_anywhere(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and not p.is_symlink() and SECRET.encode() in p.read_bytes()]


def assert_nothing_left(root: Path) -> None:
    assert state.leftovers(TreeHost(root)) == []
    assert secret_anywhere(root) == []


class Unforeseen(Exception):
    """Something the run does not expect (a bug, a KeyboardInterrupt's like)."""


def fail_at(monkeypatch, index: int, error: type[Exception]) -> None:
    """The resumed run's ``index``-th step (0: the first after the reboot) raises ``error``."""
    real = Upgrade._step
    calls = {"n": 0}

    def step(self, s, services):
        n = calls["n"]
        calls["n"] += 1
        if n == index:
            raise error(f"injected at step {index} ({s.action} {s.target})")
        return real(self, s, services)

    monkeypatch.setattr(PveUpgrade, "_step", step)


def fake_api(monkeypatch) -> None:
    import labwright.guests.proxmox_api as proxmox_api

    monkeypatch.setattr(proxmox_api, "connect", lambda credentials, node, data, timeout=30: object())


# --- failing the resume at each point -----------------------------------------------------------------------------
SETUP_FAILURES = ["inventory missing", "inventory raises", "no credentials", "API unreachable"]


@pytest.mark.parametrize("where", SETUP_FAILURES)
def test_a_resume_that_fails_before_its_steps_removes_the_credentials_and_the_unit(tmp_path, monkeypatch, capsys,
                                                                                  where):
    root = node(tmp_path, monkeypatch)
    saved = state.load(TreeHost(root))
    assert saved is not None and saved.inventory is not None
    if where == "inventory missing":
        Path(saved.inventory).unlink()
    elif where == "inventory raises":
        Path(saved.inventory).write_text("raise RuntimeError('a broken inventory')\n")
    elif where == "no credentials":
        monkeypatch.delenv("PROXMOX_TOKEN_ID")
        monkeypatch.delenv("PROXMOX_TOKEN_SECRET")
    else:
        import labwright.guests.proxmox_api as proxmox_api

        def unreachable(*args, **kwargs):
            raise OperationFailed("cannot reach Proxmox at https://lwnode1:8006: ConnectionError")

        monkeypatch.setattr(proxmox_api, "connect", unreachable)
    code, out, err = resume(capsys, root)
    assert code in (1, 2) and len(err.splitlines()) == 1, err
    assert_nothing_left(root)
    after = state.load(TreeHost(root))
    assert after is not None and after.phase == state.REBOOTING and after.resume_failed
    # resumable by hand, and the plan says so (not that a boot unit will)
    assert "nothing resumes it at boot any more" in after.summary()
    assert "--resume` as root with PROXMOX_* exported" in after.summary()


@pytest.mark.parametrize("index", range(len(RESUMED)))
@pytest.mark.parametrize("error", [OperationFailed, Unforeseen], ids=["expected", "unforeseen"])
def test_a_resume_that_fails_at_any_step_removes_the_credentials_and_the_unit(tmp_path, monkeypatch, capsys, index,
                                                                             error):
    root = node(tmp_path, monkeypatch)
    fake_api(monkeypatch)
    fail_at(monkeypatch, index, error)
    code, _, err = resume(capsys, root)
    assert code != 0 and f"injected at step {index}" in err  # unforeseen: the CLI's internal error, one line
    assert_nothing_left(root)
    after = state.load(TreeHost(root))
    assert after is not None
    if error is Unforeseen:  # not restored by the run: left to be resumed by hand, saying why
        assert after.phase == state.REBOOTING
        assert after.resume_failed.startswith(f"Unforeseen: injected at step {index}")
    else:  # the run's own failure path: restored, finished as failed
        assert after.phase == state.FAILED and after.outcome is not None and not after.outcome["ok"]


def test_a_resume_that_succeeds_removes_them_too(tmp_path, monkeypatch, capsys):
    root = node(tmp_path, monkeypatch)
    fake_api(monkeypatch)
    code, out, err = resume(capsys, root)
    assert code == 0, err
    assert_nothing_left(root)
    after = state.load(TreeHost(root))
    assert after is not None and after.phase == state.DONE


def test_the_last_write_of_the_state_failing_still_removes_them(tmp_path, monkeypatch, capsys):
    root = node(tmp_path, monkeypatch)
    fake_api(monkeypatch)
    real = state.save

    def save(where, saved):
        if saved.phase != state.REBOOTING:
            raise OSError(28, "No space left on device")
        real(where, saved)

    monkeypatch.setattr(state, "save", save)
    code, _, err = resume(capsys, root)
    assert code == 1 and err.startswith(f"labwright: error: {state.STATE_PATH} not written (No space left on "
                                        "device); the upgrade finished: node lwnode1: ")
    assert_nothing_left(root)


def test_a_killed_resume_is_cleaned_up_by_the_units_exec_stop_post(tmp_path, monkeypatch):
    """SIGKILL leaves no ``finally`` to run: systemd's ExecStopPost= lines remove the credentials and the unit."""
    root = node(tmp_path, monkeypatch)
    saved = state.load(TreeHost(root))
    assert saved is not None and saved.inventory is not None
    started = tmp_path / "started"
    Path(saved.inventory).write_text(f"import pathlib, threading\npathlib.Path({str(started)!r}).touch()\n"
                                    "threading.Event().wait()\n")  # a resume that hangs until it is killed
    text = (root / state.RESUME_UNIT_PATH.lstrip("/")).read_text()
    assert [line for line in text.splitlines() if line.startswith("ExecStopPost=")] == [
        f"ExecStopPost=-/bin/rm -f {state.ENV_PATH}",
        f"ExecStopPost=-/bin/rm -f {state.RESUME_WANTS_LINK} {state.RESUME_UNIT_PATH}"]
    argv = state.unit_exec_start(text)
    assert argv == resume_command(root, "lwnode1")  # labwright on the tree (support.host_cli)
    child = subprocess.Popen(argv, env=dict(os.environ), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for("the resume to reach the inventory", started.exists, timeout=60, every=0.05)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
    assert state.leftovers(TreeHost(root))  # killed: nothing of its own cleanup ran
    run_stop_post(root, text)
    assert_nothing_left(root)


# --- where the node acts as root itself, no secret is written ---------------------------------------------------
def test_through_pvesh_no_secret_is_written_and_the_inventory_is_not_read(tmp_path, monkeypatch, capsys):
    root = node(tmp_path, monkeypatch, api=state.PVESH)
    assert secret_anywhere(root) == [] and not (root / state.ENV_PATH.lstrip("/")).exists()
    saved = state.load(TreeHost(root))
    assert saved is not None and saved.inventory is not None
    Path(saved.inventory).write_text("raise RuntimeError('read at boot')\n")  # never exec'd on this path
    monkeypatch.delenv("PROXMOX_TOKEN_ID")
    monkeypatch.delenv("PROXMOX_TOKEN_SECRET")
    import labwright.hostupgrade.pve as pve

    used: list[str] = []

    def pvesh_api(timeout: float = pve.PVESH_TIMEOUT) -> object:
        used.append("pvesh")
        return object()

    monkeypatch.setattr(pve, "pvesh_api", pvesh_api)
    code, out, err = resume(capsys, root)
    assert code == 0, err
    assert used == ["pvesh"]
    assert_nothing_left(root)


def test_the_api_mode_is_pvesh_only_for_root_on_the_node_itself(monkeypatch):
    from labwright.hostupgrade.pve import node_api_mode

    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert node_api_mode() == state.HTTPS  # not root: pvesh would refuse


def test_only_an_upgrade_over_https_carries_credentials(tmp_path):
    env = {"PROXMOX_TOKEN_ID": TOKEN_ID, "PROXMOX_TOKEN_SECRET": SECRET, "HOME": "/root"}
    https = state.Saved("n", "pve", {}, 0, "/r", api=state.HTTPS)
    assert state.carried_for(https, env) == {"PROXMOX_TOKEN_ID": TOKEN_ID, "PROXMOX_TOKEN_SECRET": SECRET}
    assert state.carried_for(dataclasses.replace(https, api=state.PVESH), env) == {}
    assert state.carried_for(dataclasses.replace(https, kind="lxd"), env) == {}
    assert state.write_env(TreeHost(tmp_path), {}) is False and not (tmp_path / state.ENV_PATH.lstrip("/")).exists()


def test_pvesh_api_speaks_the_same_interface_through_the_local_pvesh(tmp_path, monkeypatch):
    """proxmoxer's local backend: ``api.nodes(n).lxc.get()`` is ``pvesh get /nodes/n/lxc --output-format json``,
    a task's log lines ahead of the JSON skipped; a failure is a ResourceException as over HTTPS."""
    from proxmoxer import ResourceException

    from labwright.hostupgrade.pve import pvesh_api

    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "calls"
    (bindir / "pvesh").write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {log}\n'
        'case "$1 $2" in\n'
        '"get /nodes/pve1/lxc") echo \'[{"vmid": "201", "status": "running"}]\';;\n'
        '"create /nodes/pve1/lxc/201/snapshot") echo "snapshotting..."; '
        'echo \'"UPID:pve1:00001234:00005678:65000000:vzsnapshot:201:root@pam:"\';;\n'
        '*) echo "Configuration file \'nodes/pve1/lxc/999.conf\' does not exist" >&2; exit 2;;\n'
        "esac\n")
    (bindir / "pvesh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    api = pvesh_api()
    assert api.nodes("pve1").lxc.get() == [{"vmid": "201", "status": "running"}]
    upid = api.nodes("pve1").lxc(201).snapshot.post(snapname="labwright-host-upgrade-1")
    assert upid.startswith("UPID:pve1:")
    with pytest.raises(ResourceException):
        api.nodes("pve1").lxc(999).config.get()
    assert log.read_text().splitlines()[:2] == [
        "get /nodes/pve1/lxc --output-format json",
        "create /nodes/pve1/lxc/201/snapshot -snapname labwright-host-upgrade-1 --output-format json"]


def test_the_resume_unit_is_run_isolated_and_cleans_up_after_itself():
    text = state.resume_unit_text("lwnode1", state.resume_command("lwnode1"))
    assert state.unit_exec_start(text)[1:3] == ["-I", "-m"]
    assert "UMask=0077" in text.splitlines()
    assert text.index("ExecStart=") < text.index("ExecStopPost=")


def test_a_command_host_without_the_unit_has_nothing_to_remove(tmp_path, monkeypatch):
    root = node(tmp_path, monkeypatch)
    h = CommandHost(TreeHost(root), root / "var/cache/labwright/nvidia")
    from labwright.hostupgrade.run import remove_credentials_and_unit

    assert remove_credentials_and_unit(TreeHost(root), h) == []
    assert remove_credentials_and_unit(TreeHost(root), h) == []  # twice: nothing there, nothing said
    assert_nothing_left(root)
