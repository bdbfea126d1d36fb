"""The @lxd connector against real LXD containers: through pyinfra's API and its CLI."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess

import pytest
from pyinfra.api import Config, Inventory, State
from pyinfra.api.connect import connect_all
from pyinfra.api.exceptions import ConnectError

from labwright.testing.pyinfra_output import pyinfra_totals

pytestmark = pytest.mark.lab


def connect(name: str, data: dict | None = None):
    inventory = Inventory(([f"@lxd/{name}"], data or {}))
    state = State(inventory, Config())
    connect_all(state)
    host = inventory.get_host(f"@lxd/{name}")
    assert host.connected, f"could not connect to @lxd/{name}"
    return host


def test_exec_output_exit_code_and_stderr_are_faithful(lab_container):
    host = connect(lab_container)
    ok, out = host.run_shell_command("echo out; echo 'ünïcødé ✓'; echo err >&2; exit 7")
    assert ok is False
    assert out.stdout_lines == ["out", "ünïcødé ✓"]
    assert out.stderr_lines == ["err"]
    ok, _ = host.run_shell_command("exit 7", _success_exit_codes=[7])
    assert ok is True


def test_recorded_outputs_are_tidied_on_disconnect(lab, lab_container):
    def exec_logs() -> set[str]:
        return {p for p in lab.client.request("GET", f"/1.0/instances/{lab_container}/logs") if "/exec_" in p}

    before = exec_logs()
    host = connect(lab_container)
    for i in range(70):  # more than one batch of deletions
        assert host.run_shell_command(f"echo {i}")[1].stdout == str(i)
    assert len(exec_logs() - before) < 70 * 2, "a full batch should have been deleted already"
    host.disconnect()
    assert exec_logs() - before == set()


def test_stdin_chdir_env_and_nasty_arguments(lab_container):
    host = connect(lab_container)
    ok, out = host.run_shell_command("cat; pwd", _stdin=["first line", "sécond"], _chdir="/etc")
    assert ok and out.stdout_lines == ["first line", "sécond", "/etc"]
    nasty = "a b 'q' \"d\" $HOME `x` \\ ; | & * \n end"
    ok, out = host.run_shell_command('printf "%s" "$NASTY"', _env={"NASTY": nasty})
    assert ok and out.stdout == nasty
    # stdin staging leaves nothing behind in /tmp
    ok, out = host.run_shell_command("ls -a /tmp | grep -c labwright-stdin || true")
    assert out.stdout == "0"


def test_sudo_and_su_run_as_other_user(lab_container):
    host = connect(lab_container)
    ok, out = host.run_shell_command("id -un", _sudo=True, _sudo_user="nobody")
    assert ok and out.stdout == "nobody"
    ok, out = host.run_shell_command("id -un", _su_user="daemon", _su_shell="/bin/sh")
    assert ok and out.stdout == "daemon", out.output


def test_put_get_10mb_checksum_and_sudo_upload(lab_container, tmp_path):
    host = connect(lab_container)
    payload = os.urandom(10 * 1024 * 1024)
    assert host.put_file(io.BytesIO(payload), "/root/big.bin")
    ok, out = host.run_shell_command("sha256sum /root/big.bin")
    assert out.stdout.split()[0] == hashlib.sha256(payload).hexdigest()
    target = tmp_path / "back.bin"
    assert host.get_file("/root/big.bin", str(target))
    assert hashlib.sha256(target.read_bytes()).digest() == hashlib.sha256(payload).digest()
    # As another user: the file lands owned by that user, the temp copy is gone.
    host.run_shell_command("install -d -o nobody /srv/nb")
    assert host.put_file(io.StringIO("from sudo\n"), "/srv/nb/f", _sudo=True, _sudo_user="nobody")
    ok, out = host.run_shell_command("stat -c %U /srv/nb/f; cat /srv/nb/f")
    assert out.stdout_lines == ["nobody", "from sudo"]


def test_upload_keeps_existing_mode_and_owner(lab_container):
    host = connect(lab_container)
    host.run_shell_command("echo old > /etc/keep && chmod 640 /etc/keep && chown daemon /etc/keep")
    host.put_file(io.BytesIO(b"new\n"), "/etc/keep")
    ok, out = host.run_shell_command("stat -c '%a %U' /etc/keep; cat /etc/keep")
    assert out.stdout_lines == ["640 daemon", "new"]


def test_get_missing_file_raises_and_timeout_raises(lab_container):
    host = connect(lab_container)
    with pytest.raises(OSError, match="/nope"):
        host.get_file("/nope", io.BytesIO())
    with pytest.raises(TimeoutError):
        host.run_shell_command("sleep 10", _timeout=1)


def unconnected_host(name: str):
    inventory = Inventory(([f"@lxd/{name}"], {}))
    State(inventory, Config())
    return inventory.get_host(f"@lxd/{name}")


def test_connect_refuses_missing_and_stopped_containers(lab, make_lab_container):
    with pytest.raises(ConnectError, match="no such container"):
        unconnected_host("lwt-does-not-exist").connect(raise_exceptions=True)
    name = make_lab_container()
    lab.client.set_state(name, "stop", force=True)
    with pytest.raises(ConnectError, match="Stopped; start it first"):
        unconnected_host(name).connect(raise_exceptions=True)


def test_pyinfra_cli_operation_is_idempotent(lab_container, cli_env, tmp_path):
    deploy = tmp_path / "deploy.py"
    deploy.write_text(
        "from pyinfra.operations import files\n"
        "files.put(name='motd', src=__file__.replace('deploy.py', 'motd'), dest='/etc/motd', mode='644')\n"
        "files.directory(name='dir', path='/srv/app', user='daemon', mode='750')\n"
    )
    (tmp_path / "motd").write_text("labwright lab ✓\n")
    target = f"@lxd/{lab_container}"
    first = subprocess.run(["pyinfra", "-y", target, str(deploy)], capture_output=True, text=True,
                           env=cli_env, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert pyinfra_totals(first.stderr).changed == 2
    second = subprocess.run(["pyinfra", "-y", target, str(deploy)], capture_output=True, text=True,
                            env=cli_env, cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    totals = pyinfra_totals(second.stderr)
    assert (totals.changed, totals.no_change, totals.error) == (0, 2, 0)
    check = subprocess.run(["pyinfra", "-y", target, "exec", "--", "cat /etc/motd; stat -c %U:%a /srv/app"],
                           capture_output=True, text=True, env=cli_env, cwd=tmp_path)
    assert "labwright lab ✓" in check.stdout + check.stderr
    assert "daemon:750" in check.stdout + check.stderr
