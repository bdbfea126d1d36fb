"""The @pct connector for real, against a pct double standing in for a Proxmox VE node.

No Proxmox node can run here, so the "node" is a fresh LXD lab container (sshd, the lab key) with
tests/support/doubles/pct installed as /usr/local/sbin/pct: a stand-in for Proxmox VE's pct, for tests
only, whose containers are chroots under /var/lib/pct-double. Everything between pyinfra and that
pct is real: paramiko SSH with host-key checking on (known_hosts built from the node's host key,
fetched through the LXD API), SFTP, the node's shell, and pyinfra's API and CLI.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pyinfra.api import Config, Inventory, QuoteString, State, StringCommand
from pyinfra.api.connect import connect_all
from pyinfra.api.exceptions import ConnectError
from pyinfra.api.host import Host

from labwright.lxd.client import ExecResult
from labwright.testing.lab_fixture import Lab
from labwright.testing.pyinfra_output import pyinfra_totals
from support.pct_node import pct_node
from support.pve_snapshot_sim import api, create, sim
from support.pve_snapshot_sim import cli as sim_cli
from support.snapshot_cli import assert_one_line_refusal

pytest_plugins = ["labwright.testing.lab_fixture"]
pytestmark = pytest.mark.lab
__all__ = ["api", "sim"]  # fixtures of support.pve_snapshot_sim

REPO = Path(__file__).resolve().parents[2]
PYINFRA = str(Path(sys.executable).parent / "pyinfra")
CT, STOPPED_CT, MISSING_CT = 101, 102, 999
NASTY = ["with space", "it's", 'say "hi"', "$HOME", "`id -u`", "$(id -u)", "back\\slash", "new\nline",
         "ünïcødé ✓ 日本語", "", "a; b | c && d &", "*", "/etc/*", "~root", "!!", "-n", "%s %%"]


@dataclass
class PveNode:
    """An LXD container standing in for a Proxmox VE node: sshd, the lab key, the pct double."""

    lab: Lab
    container: str
    address: str
    key: str
    known_hosts: Path

    def data(self, **extra: object) -> dict[str, object]:
        return {"pct_ssh_hostname": self.address, "pct_ssh_key": self.key,
                "pct_ssh_known_hosts_file": str(self.known_hosts), **extra}

    def cli_data(self) -> list[str]:
        return [arg for key, value in self.data().items() for arg in ("--data", f"{key}={value}")]

    def sh(self, script: str) -> ExecResult:
        """Run on the node itself (through LXD, not through the connector under test)."""
        return self.lab.client.exec(self.container, ["sh", "-c", script])

    @staticmethod
    def in_ct(vmid: int, path: str) -> str:
        """Where a path inside a double's CT lives on the node."""
        return f"/var/lib/pct-double/{vmid}/rootfs{path}"


@pytest.fixture(scope="module")
def pve_node(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PveNode]:
    create = f"pct create {CT} --start 1 && pct create {STOPPED_CT}"
    with pct_node(lab, tmp_path_factory, "lwpct", create) as (container, address, known_hosts):
        yield PveNode(lab, container, address, lab.private_key_path, known_hosts)


def make_host(node: PveNode, vmid: int = CT, **data: object) -> Host:
    name = f"@pct/pve1/{vmid}"
    inventory = Inventory(([name], node.data(**data)))
    State(inventory, Config())
    return inventory.get_host(name)


@pytest.fixture
def host(pve_node: PveNode) -> Iterator[Host]:
    inventory = Inventory(([f"@pct/pve1/{CT}"], pve_node.data()))
    state = State(inventory, Config())
    connect_all(state)
    connected = inventory.get_host(f"@pct/pve1/{CT}")
    assert connected.connected
    yield connected
    connected.disconnect()
    leftovers = pve_node.sh("ls /tmp | grep labwright-pct || true").stdout.decode()
    assert leftovers == "", f"temporary files left on the node: {leftovers}"


def connect_error(node: PveNode, vmid: int = CT, **data: object) -> str:
    with pytest.raises(ConnectError) as info:
        make_host(node, vmid, **data).connect(raise_exceptions=True)
    message = str(info.value)
    assert "\n" not in message, message
    return message


def run_cli(args: list[str], env: dict[str, str] | None = None, cwd: Path | None = None,
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PYINFRA, "-y", *args], capture_output=True, text=True, timeout=120, cwd=cwd,
                          env={**os.environ, "COLUMNS": "200", **(env or {})})


# --- commands ----------------------------------------------------------------------------------
def test_pct_connector_against_pct_double_node_cli_exec_runs_inside_the_container(pve_node):
    proc = run_cli([*pve_node.cli_data(), f"@pct/pve1/{CT}", "exec", "--",
                    "echo from-ct > /root/marker; cat /etc/hostname"])
    assert proc.returncode == 0, proc.stderr
    assert f"[@pct/pve1/{CT}] CT{CT}" in proc.stdout + proc.stderr
    # The file is in the CT's tree on the node, not on the node itself.
    check = pve_node.sh(f"cat {PveNode.in_ct(CT, '/root/marker')}; test ! -e /root/marker && echo not-on-node")
    assert check.stdout.decode() == "from-ct\nnot-on-node\n"


def test_pct_connector_against_pct_double_node_exit_code_stderr_and_unicode_are_faithful(host):
    ok, out = host.run_shell_command("echo out; echo 'ünïcødé ✓ 日本'; echo err >&2; printf 'no newline'; exit 7")
    assert ok is False
    assert out.stdout_lines == ["out", "ünïcødé ✓ 日本", "no newline"]
    assert out.stderr_lines == ["err"]
    ok, _ = host.run_shell_command("exit 7", _success_exit_codes=[0, 7])
    assert ok is True
    ok, out = host.run_shell_command("exit 1", _success_exit_codes=[7])
    assert ok is False


def test_pct_connector_against_pct_double_node_stdin_env_chdir_and_nasty_arguments(host):
    ok, out = host.run_shell_command("cat; pwd", _stdin=["first line", "sécond"], _chdir="/etc")
    assert ok and out.stdout_lines == ["first line", "sécond", "/etc"]
    ok, out = host.run_shell_command("wc -c", _stdin=io.StringIO("abc\n"))
    assert ok and out.stdout == "4"
    for value in NASTY:
        ok, out = host.run_shell_command(StringCommand("printf", QuoteString("%s|"), QuoteString(value)))
        assert ok and out.stdout == f"{value}|", value
    joined = "\n".join(NASTY)
    ok, out = host.run_shell_command('printf "%s" "$NASTY"', _env={"NASTY": joined})
    assert ok and out.stdout == joined


def test_pct_connector_against_pct_double_node_timeout_pty_and_big_interleaved_output(host):
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        host.run_shell_command("sleep 20", _timeout=1)
    assert time.monotonic() - started < 10
    ok, out = host.run_shell_command("tty", _get_pty=True)
    assert ok and out.stdout.startswith("/dev/pts/"), out.output
    # Several MB on stderr before stdout ends: both streams must be drained as they arrive.
    ok, out = host.run_shell_command("head -c 3000000 /dev/zero | od -v -An -tx1 >&2; echo done")
    assert ok and out.stdout_lines == ["done"]
    assert len(out.stderr_lines) == 3_000_000 // 16


# --- files -------------------------------------------------------------------------------------
def test_pct_connector_against_pct_double_node_put_get_10mb_checksum(pve_node, host, tmp_path):
    payload = os.urandom(10 * 1024 * 1024)
    digest = hashlib.sha256(payload).hexdigest()
    assert host.put_file(io.BytesIO(payload), "/root/big.bin")
    on_node = pve_node.sh(f"sha256sum {PveNode.in_ct(CT, '/root/big.bin')}").stdout.decode()
    assert on_node.split()[0] == digest
    ok, out = host.run_shell_command("sha256sum /root/big.bin; stat -c '%a %U' /root/big.bin")
    assert ok and out.stdout_lines[0].split()[0] == digest
    assert out.stdout_lines[1] == "644 root"
    back = tmp_path / "back.bin"
    assert host.get_file("/root/big.bin", str(back))
    assert hashlib.sha256(back.read_bytes()).hexdigest() == digest


def test_pct_connector_against_pct_double_node_files_with_nasty_names_keep_mode_and_owner(host):
    directory = "/root/dir with 'q' \"dq\" $x ü"
    path = f"{directory}/f;|&*? `n`"
    assert host.run_shell_command(StringCommand("mkdir", "-p", QuoteString(directory)))[0]
    assert host.put_file(io.StringIO("first ✓\n"), path)
    host.run_shell_command(StringCommand("chmod", "640", QuoteString(path), "&&", "chown", "daemon",
                                         QuoteString(path)))
    assert host.put_file(io.BytesIO(b"second\n"), path)
    ok, out = host.run_shell_command(StringCommand("stat", "-c", "'%a %U'", QuoteString(path), "&&", "cat",
                                                   QuoteString(path)))
    assert ok and out.stdout_lines == ["640 daemon", "second"]
    back = io.BytesIO()
    assert host.get_file(path, back)
    assert back.getvalue() == b"second\n"
    assert host.put_file(io.BytesIO(b"dash\n"), "-leading-dash")
    ok, out = host.run_shell_command("cat /-leading-dash")
    assert ok and out.stdout == "dash"


def test_pct_connector_against_pct_double_node_missing_paths_raise(host):
    with pytest.raises(OSError, match="/nope"):
        host.get_file("/nope", io.BytesIO())
    with pytest.raises(OSError, match="/no/such/dir/f"):
        host.put_file(io.BytesIO(b"x"), "/no/such/dir/f")


def test_pct_connector_against_pct_double_node_sudo_and_su(host, tmp_path):
    ok, out = host.run_shell_command("id -u", _sudo=True)
    assert ok and out.stdout == "0", out.output
    ok, out = host.run_shell_command("id -un", _sudo=True, _sudo_user="nobody")
    assert ok and out.stdout == "nobody", out.output
    ok, out = host.run_shell_command("id -un", _su_user="daemon", _su_shell="/bin/sh")
    assert ok and out.stdout == "daemon", out.output
    # Uploads as another user land owned by that user, like pyinfra's SSH connector.
    host.run_shell_command("install -d -o nobody -m 700 /srv/nb")
    assert host.put_file(io.StringIO("from sudo\n"), "/srv/nb/f", _sudo=True, _sudo_user="nobody")
    ok, out = host.run_shell_command("stat -c %U /srv/nb/f; cat /srv/nb/f; ls /tmp | grep -c pyinfra- || true")
    assert out.stdout_lines == ["nobody", "from sudo", "0"]
    host.run_shell_command("echo secret > /root/secret && chmod 600 /root/secret")
    target = tmp_path / "secret"
    assert host.get_file("/root/secret", str(target), _sudo=True)
    assert target.read_text() == "secret\n"
    assert host.put_file(io.BytesIO(b"as root\n"), "/root/by-sudo", _sudo=True)
    ok, out = host.run_shell_command("stat -c %U /root/by-sudo")
    assert out.stdout == "root"


# --- connection errors -------------------------------------------------------------------------
def test_pct_connector_against_pct_double_node_missing_and_stopped_ct_fail_clearly(pve_node):
    message = connect_error(pve_node, MISSING_CT)
    assert f"CT {MISSING_CT} does not exist on node pve1" in message
    assert f"lxc/{MISSING_CT}.conf' does not exist" in message
    assert f"CT {STOPPED_CT} on node pve1 is stopped" in connect_error(pve_node, STOPPED_CT)
    proc = run_cli([*pve_node.cli_data(), f"@pct/pve1/{MISSING_CT}", "exec", "--", "echo", "hi"])
    assert proc.returncode != 0
    assert f"[@pct/pve1/{MISSING_CT}] CT {MISSING_CT} does not exist on node pve1" in proc.stderr


def test_pct_connector_against_pct_double_node_ssh_errors_fail_clearly(pve_node, tmp_path):
    other_key = tmp_path / "other_ed25519"
    other_key.write_bytes(Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()))
    assert "refused" in connect_error(pve_node, pct_ssh_key=str(other_key))
    assert "No such private key file" in connect_error(pve_node, pct_ssh_key=str(tmp_path / "absent"))
    empty = tmp_path / "known_hosts_empty"
    empty.write_text("")
    assert "is not in" in connect_error(pve_node, pct_ssh_known_hosts_file=str(empty))
    wrong = tmp_path / "known_hosts_wrong"
    fake_key = Ed25519PrivateKey.generate().public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    wrong.write_text(f"{pve_node.address} {fake_key}\n")
    assert "does NOT match" in connect_error(pve_node, pct_ssh_known_hosts_file=str(wrong))
    # With checking explicitly off the same unknown key is accepted.
    lenient = make_host(pve_node, pct_ssh_known_hosts_file=str(empty), pct_ssh_strict_host_key_checking=False)
    lenient.connect(raise_exceptions=True)
    assert lenient.run_shell_command("true")[0]
    lenient.disconnect()
    assert "cannot reach node pve1" in connect_error(pve_node, pct_ssh_hostname="127.0.0.1", pct_ssh_port=1)


def test_pct_connector_against_pct_double_node_without_pct_fails_clearly(pve_node):
    moved = pve_node.sh("mv /usr/local/sbin/pct /usr/local/sbin/pct.away")
    assert moved.exit_code == 0
    try:
        assert "has no `pct` command" in connect_error(pve_node)
    finally:
        assert pve_node.sh("mv /usr/local/sbin/pct.away /usr/local/sbin/pct").exit_code == 0


def test_pct_connector_against_pct_double_node_via_ssh_config_alias(pve_node, tmp_path):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text(
        f"Host pve-alias\n  HostName {pve_node.address}\n  User root\n  IdentityFile {pve_node.key}\n")
    (home / ".ssh" / "known_hosts").write_text(pve_node.known_hosts.read_text())
    proc = run_cli([f"@pct/pve-alias/{CT}", "exec", "--", "cat", "/etc/hostname"], env={"HOME": str(home)},
                   cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"[@pct/pve-alias/{CT}] CT{CT}" in proc.stdout + proc.stderr


# --- pyinfra operations ------------------------------------------------------------------------
def changed_and_unchanged(proc: subprocess.CompletedProcess[str]) -> tuple[int, int]:
    """(changed, no change) from pyinfra's --json results (labwright.testing.pyinfra_output), not its screen."""
    totals = pyinfra_totals(proc.stdout)
    return totals.changed, totals.no_change


def test_pct_connector_against_pct_double_node_operations_then_second_run_changes_nothing(pve_node, tmp_path):
    (tmp_path / "app.conf").write_text("labwright ✓\n")
    deploy = tmp_path / "deploy.py"
    deploy.write_text(
        "from pyinfra.operations import files\n"
        "files.put(name='put', src='app.conf', dest='/opt/app/app.conf', mode='640', create_remote_dir=True)\n"
        "files.directory(name='dir', path='/srv/app', user='daemon', mode='750')\n"
        "files.file(name='file', path='/srv/app/flag', user='daemon', mode='600')\n"
        "files.line(name='line', path='/etc/app.ini', line='key=value')\n"
    )
    args = [*pve_node.cli_data(), f"@pct/pve1/{CT}", str(deploy)]
    first = run_cli(["--json", *args], cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert changed_and_unchanged(first) == (4, 0)
    second = run_cli(["--json", *args], cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    assert changed_and_unchanged(second) == (0, 4)
    rootfs = PveNode.in_ct(CT, "")
    check = pve_node.sh(f"cd {rootfs} && cat opt/app/app.conf && stat -c '%a %U %n' opt/app/app.conf srv/app "
                        "srv/app/flag && cat etc/app.ini")
    assert check.stdout.decode().splitlines() == [
        "labwright ✓", "640 root opt/app/app.conf", "750 daemon srv/app", "600 daemon srv/app/flag", "key=value"]


# --- transfers pct reports as successes -----------------------------------------------------------
@pytest.fixture
def fault(pve_node: PveNode) -> Iterator[Callable[[str], None]]:
    """Switch on a failure mode of real pct in the double (tests/support/doubles/pct, PCT_DOUBLE_FAULT)."""
    path = "/var/lib/pct-double/fault"

    def set_fault(name: str) -> None:
        assert pve_node.sh(f"echo {name} > {path}").exit_code == 0

    yield set_fault
    assert pve_node.sh(f"rm -f {path}").exit_code == 0


def staging_leftovers(node: PveNode, directory: str) -> str:
    return node.sh(f"ls -a {PveNode.in_ct(CT, directory)} | grep labwright || true").stdout.decode()


def test_pct_connector_against_pct_double_node_push_that_fails_with_exit_0_is_an_error(pve_node, host, fault):
    assert host.put_file(io.BytesIO(b"old contents\n"), "/root/kept.conf")
    fault("push-fails-exit0")
    # Real pct's behaviour, reproduced by the double: half the file, no message, exit 0.
    raw = pve_node.sh(f"head -c 1000 /dev/zero > /tmp/k && pct push {CT} /tmp/k /root/raw && "
                      f"stat -c %s {PveNode.in_ct(CT, '/root/raw')}")
    assert (raw.exit_code, raw.stdout, raw.stderr) == (0, b"500\n", b"")
    payload = os.urandom(1024 * 1024)
    with pytest.raises(OSError) as info:
        host.put_file(io.BytesIO(payload), "/root/kept.conf")
    message = str(info.value)
    assert "/root/kept.conf" in message and "although pct reported success" in message, message
    assert "\n" not in message
    ok, out = host.run_shell_command("cat /root/kept.conf")
    assert ok and out.stdout == "old contents"
    assert staging_leftovers(pve_node, "/root") == ""


def test_pct_connector_against_pct_double_node_push_error_printed_with_exit_0_is_an_error(pve_node, host):
    raw = pve_node.sh(f"pct push {CT} /etc/hostname /no/such/dir/f")
    assert (raw.exit_code, raw.stderr) == (0, b"failed to create file: /no/such/dir/f: No such file or directory\n")
    with pytest.raises(OSError, match="failed to create file"):
        host.put_file(io.BytesIO(b"x"), "/no/such/dir/f")


def test_pct_connector_against_pct_double_node_pull_of_a_missing_file_is_an_error_not_an_empty_file(
        pve_node, host, fault, tmp_path):
    # Real pct's behaviour, reproduced by the double: the local file is created empty, exit 0.
    raw = pve_node.sh(f"rm -f /tmp/n; pct pull {CT} /nope /tmp/n; echo rc=$?; stat -c %s /tmp/n")
    assert raw.stdout == b"rc=0\n0\n"
    assert raw.stderr == b"failed to open /nope: No such file or directory\n"
    local = tmp_path / "local.conf"
    local.write_text("keep me\n")
    with pytest.raises(OSError) as info:
        host.get_file("/nope", str(local))
    assert "/nope" in str(info.value) and "\n" not in str(info.value)
    assert local.read_text() == "keep me\n"
    fresh = tmp_path / "fresh.conf"
    with pytest.raises(OSError):
        host.get_file("/nope", str(fresh))
    assert not fresh.exists()
    # A copy cut short with exit 0: caught by size and sha256, nothing written locally.
    assert host.put_file(io.BytesIO(os.urandom(100_000)), "/root/pulled.bin")
    fault("pull-fails-exit0")
    with pytest.raises(OSError, match="although pct reported success") as info:
        host.get_file("/root/pulled.bin", str(local))
    assert "/root/pulled.bin" in str(info.value)
    assert local.read_text() == "keep me\n"
    buffer = io.BytesIO()
    with pytest.raises(OSError, match="although pct reported success"):
        host.get_file("/root/pulled.bin", buffer)
    assert buffer.getvalue() == b""
    assert sorted(path.name for path in tmp_path.iterdir()) == ["local.conf"]


# --- the double itself ---------------------------------------------------------------------------
def test_pct_double_refuses_a_stopped_ct_and_an_unknown_vmid_like_real_pct(pve_node):
    result = pve_node.sh(f"pct exec {STOPPED_CT} -- true")
    assert (result.exit_code, result.stderr) == (255, f"container '{STOPPED_CT}' not running!\n".encode())
    result = pve_node.sh(f"PCT_DOUBLE_VERSION=4.0-1 pct exec {STOPPED_CT} -- true")
    assert result.exit_code == 1
    assert b"Failed to get init pid" in result.stderr
    result = pve_node.sh(f"pct push {STOPPED_CT} /etc/hostname /tmp/x")
    assert (result.exit_code, result.stderr) == (255, b"can only push files to a running CT\n")
    result = pve_node.sh(f"pct push {MISSING_CT} /etc/hostname /tmp/x")
    assert (result.exit_code, result.stderr) == (255, b"can only push files to a running CT\n")
    result = pve_node.sh(f"pct pull {STOPPED_CT} /etc/hostname /tmp/x")
    assert result.exit_code == 255
    assert result.stderr == b"can only pull files from a running VM at /usr/share/perl5/PVE/CLI/pct.pm line 664.\n"
    result = pve_node.sh(f"pct status {MISSING_CT}")
    assert result.exit_code == 2
    assert re.fullmatch(rb"Configuration file 'nodes/[^/]+/lxc/999\.conf' does not exist\n", result.stderr)
    result = pve_node.sh(f"pct status {CT}; pct status {STOPPED_CT}")
    assert result.stdout == b"status: running\nstatus: stopped\n"


def test_pct_double_exec_uses_pct_s_own_path(pve_node):
    result = pve_node.sh(f"PATH=/usr/local/bin:$PATH pct exec {CT} -- sh -c 'echo $PATH'")
    assert result.stdout == b"/sbin:/bin:/usr/sbin:/usr/bin\n"
    result = pve_node.sh(f"pct exec {CT} --keep-env 0 -- sh -c 'echo $PATH'")
    assert result.stdout == b"/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"


def test_pct_connector_finds_tools_in_usr_local_bin_as_ssh_would(pve_node, host):
    """Real pct exec's PATH has no /usr/local (above); the connector gives commands Debian's root PATH, so a tool a
    deploy installed in /usr/local/bin is found through @pct exactly as over SSH."""
    tool = PveNode.in_ct(CT, "/usr/local/bin/lw-local-tool")
    made = pve_node.sh(f"mkdir -p $(dirname {tool}) && printf '#!/bin/sh\\necho local-tool-ran\\n' > {tool} && "
                       f"chmod 755 {tool}")
    assert made.exit_code == 0, made.stderr
    ok, out = host.run_shell_command("lw-local-tool; echo $PATH")
    assert ok, out.stderr_lines
    assert out.stdout_lines == ["local-tool-ran", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
    ok, out = host.run_shell_command("echo $PATH", _env={"PATH": "/opt/mine/bin:/usr/bin:/bin"})
    assert ok and out.stdout_lines == ["/opt/mine/bin:/usr/bin:/bin"]


# --- guest restore of a running Proxmox container: its run lock taken over the node's SSH -------------------------
def test_guest_restore_of_a_running_container_waits_for_its_run_lock_over_the_nodes_ssh(pve_node, sim, api):
    # The restore goes through the API (the PVE simulator); the container's run lock is in its /run/lock, reached
    # as pyinfra's @pct connector reaches it (the node's SSH, pct exec): here the node is the pct double's, whose
    # CT 101 a deploy from another controller holds (its lease still running).
    guest = f"@pct/pve1/{CT}"
    create(api, "lxc", CT, True, ostemplate="local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst",
           rootfs="local-lvm:8", hostname="llm1")
    assert sim_cli(sim, "guest", "snapshot", guest, "--name", "before").returncode == 0
    ssh = [f"--data=ssh_hostname={pve_node.address}", f"--data=ssh_key={pve_node.key}",
           f"--data=ssh_known_hosts_file={pve_node.known_hosts}"]
    lock = PveNode.in_ct(CT, "/run/lock/labwright.lock")
    holder = {"token": "t-other", "pid": 4242, "start": "1", "boot_id": "b", "machine_id": "m",
              "host": "controller-b", "user": "root", "command": "pyinfra inventories/lab.py deploys/stack.py",
              "purpose": "labwright stack", "since": time.time(), "expires": time.time() + 3600}
    written = pve_node.sh(f"mkdir -p {os.path.dirname(lock)} && cat > {lock} <<'END'\n{json.dumps(holder)}\nEND")
    assert written.exit_code == 0, written.stderr
    before = len(sim.writes)

    busy = sim_cli(sim, "guest", "restore", guest, "before", "--force", "-y", "--lock-wait", "0", *ssh)
    assert busy.returncode == 1, (busy.stdout, busy.stderr)
    assert f"{guest}: another labwright run holds this guest (pid 4242 on controller-b" in busy.stderr, busy.stderr
    assert sim.writes[before:] == [] and sim.is_running(CT)  # not stopped, not rolled back

    # The node's SSH not reachable (nothing listens on 127.0.0.1:1): one line naming the way out, nothing done.
    unreachable = sim_cli(sim, "guest", "restore", guest, "before", "--force", "-y", "--data=ssh_hostname=127.0.0.1",
                          "--data=ssh_port=1")
    assert_one_line_refusal(unreachable, f"{guest} is running and its run lock is reached over the node's SSH",
                            "--no-lock")
    assert sim.writes[before:] == []

    # --no-lock: restored without asking the node (the holder's lock is left where it is).
    forced = sim_cli(sim, "guest", "restore", guest, "before", "--force", "-y", "--no-lock", "--json")
    assert forced.returncode == 0, forced.stderr
    assert json.loads(forced.stdout)["steps"] == ["stop", "restore", "start"]
    assert json.loads(pve_node.sh(f"cat {lock}").stdout)["token"] == "t-other"

    # The holder gone: the restore takes the lock over SSH, restores, and gives the lock back.
    assert pve_node.sh(f"rm {lock}").exit_code == 0
    before = len(sim.writes)
    done = sim_cli(sim, "guest", "restore", guest, "before", "--force", "-y", "--lock-wait", "0", *ssh)
    assert done.returncode == 0, done.stderr
    assert [w.path for w in sim.writes[before:]] == [f"/nodes/pve1/lxc/{CT}/status/stop",
                                                     f"/nodes/pve1/lxc/{CT}/snapshot/before/rollback",
                                                     f"/nodes/pve1/lxc/{CT}/status/start"]
    assert pve_node.sh(f"test -e {lock} && echo left || echo gone").stdout.decode().strip() == "gone"
