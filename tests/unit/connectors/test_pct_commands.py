"""The @pct connector's node-side command lines, checked by running them.

Each command line the connector would send to a Proxmox node is run by a real local shell (sh, and
bash: Proxmox's root shell) with a fake ``pct`` on PATH. In "argv" mode the fake prints the bytes of
every argument it got, so a test can assert that an argument arrives byte-for-byte; in "run" mode it
executes what follows ``--`` (as ``pct exec`` does inside the container), so a test can assert what
the innermost command finally sees.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from pyinfra.api import QuoteString, StringCommand
from pyinfra.api.exceptions import InventoryError
from pyinfra.connectors.util import make_unix_command

from labwright.connectors._transfer import stdin_bytes
from labwright.connectors.pct import PctConnector, PctConnectorData, connector_data_meta, parse_pct_name
from labwright.connectors.pct_commands import (
    CT_PATH,
    DIGEST_SCRIPT,
    INSTALL_SCRIPT,
    format_perms,
    parse_pct_status,
    parse_size_and_sha256,
    pct_exec_command,
    pct_exec_script,
    pct_pull_command,
    pct_push_command,
    pct_status_command,
    then_remove,
)
from labwright.errors import BadInput
from labwright.hosts.options import DEPRECATED_KEYS, SSH_OPTIONS, endpoint, ssh_options

NASTY = [
    "plain",
    "with space",
    "  leading and trailing  ",
    "it's",
    'say "hi"',
    "'",
    '"',
    "''",
    '""',
    "\\'",
    "$HOME",
    "${HOME}",
    "$(id -u)",
    "`id -u`",
    "$'\\n'",
    "back\\slash",
    "trailing backslash\\",
    "\\\\double",
    "new\nline",
    "\n",
    "\n\n",
    "tab\there",
    "carriage\rreturn",
    "escape \x1b[31m red",
    "ünïcødé ✓ 日本語 🚀",
    "",
    " ",
    ";",
    "a; touch /tmp/labwright-pct-injected",
    "a | b",
    "a && b || c",
    "&",
    "a & b",
    "*",
    "?",
    "[a-z]*",
    "/etc/*",
    "~",
    "~root",
    "!",
    "!!",
    "#comment",
    "-n",
    "--",
    "-e",
    "%s %d %%",
    "{a,b}",
    ">out <in 2>&1",
    "(sub) {grp;}",
    "^caret",
    "=equals",
    "x=y z",
]
IDS = [repr(value)[:40] for value in NASTY]
SHELLS = [shell for shell in ("sh", "bash") if shutil.which(shell)]

FAKE_PCT = """#!{python}
import json, os, sys
args = sys.argv[1:]
if os.environ.get("FAKE_PCT_MODE") == "run" and args[:1] == ["exec"]:
    sys.stdout.flush()
    rest = args[args.index("--") + 1:]
    os.execvp(rest[0], rest)
# Hex of the raw bytes: nothing (locale, JSON escaping) can smooth over a difference.
print(json.dumps([os.fsencode(arg).hex() for arg in args]))
"""


@pytest.fixture
def fake_pct(tmp_path: Path) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "pct"
    script.write_text(FAKE_PCT.format(python=sys.executable))
    script.chmod(0o755)
    return bindir


def run_node(shell: str, command: str, bindir: Path, mode: str = "argv", cwd: Path | None = None,
             ) -> subprocess.CompletedProcess[bytes]:
    """Run a node command line the way sshd does: ``$SHELL -c COMMAND``."""
    env = {"PATH": f"{bindir}:{os.environ['PATH']}", "FAKE_PCT_MODE": mode, "HOME": "/nonexistent-home",
           "LC_ALL": "C.UTF-8"}
    return subprocess.run([shell, "-c", command], env=env, capture_output=True, cwd=cwd, timeout=30)


def pct_argv(shell: str, command: str, bindir: Path) -> list[bytes]:
    proc = run_node(shell, command, bindir)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    return [bytes.fromhex(arg) for arg in json.loads(proc.stdout)]


# --- pct exec --------------------------------------------------------------------------------
@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("inner", NASTY, ids=IDS)
def test_exec_delivers_the_inner_command_byte_for_byte(shell, inner, fake_pct):
    argv = pct_argv(shell, pct_exec_command(101, inner), fake_pct)
    assert argv == [b"exec", b"101", b"--", b"env", f"PATH={CT_PATH}".encode(), b"sh", b"-c", inner.encode()]


@pytest.mark.parametrize("shell", SHELLS)
def test_exec_delivers_all_nasty_strings_in_one_command(shell, fake_pct):
    inner = "\x00".join(NASTY).replace("\x00", " ; ")
    argv = pct_argv(shell, pct_exec_command(999_999_999, inner), fake_pct)
    assert argv[-1] == inner.encode()
    assert argv[1] == b"999999999"


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("value", NASTY, ids=IDS)
def test_pyinfra_argument_reaches_the_container_command_unchanged(shell, value, fake_pct, tmp_path):
    """pyinfra's quoting, then pct exec's, then the container's ``sh -c``: printf sees the value itself."""
    unix = make_unix_command(StringCommand("printf", "%s", QuoteString(value))).get_raw_value()
    proc = run_node(shell, pct_exec_command(101, unix), fake_pct, mode="run", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == value.encode()
    assert not Path("/tmp/labwright-pct-injected").exists()


@pytest.mark.parametrize("shell", SHELLS)
def test_env_and_chdir_survive_both_shell_levels(shell, fake_pct, tmp_path):
    nasty = "\n".join(NASTY)
    workdir = tmp_path / "dir with 'quotes' \"dq\" $x `y` ü"
    workdir.mkdir()
    unix = make_unix_command(StringCommand('printf "%s|" "$NASTY"; pwd'), _env={"NASTY": nasty},
                             _chdir=str(workdir)).get_raw_value()
    proc = run_node(shell, pct_exec_command(101, unix), fake_pct, mode="run")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"{nasty}|{workdir}\n".encode()


@pytest.mark.parametrize("shell", SHELLS)
def test_exit_code_and_stderr_pass_through_the_command_line(shell, fake_pct):
    proc = run_node(shell, pct_exec_command(101, "echo out; echo 'ërr' >&2; exit 42"), fake_pct, mode="run")
    assert (proc.returncode, proc.stdout, proc.stderr) == (42, b"out\n", "ërr\n".encode())


# --- pct push / pull / status ----------------------------------------------------------------
@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("path", [p for p in NASTY if p and not p.startswith("-")], ids=lambda p: repr(p)[:40])
def test_push_and_pull_paths_arrive_byte_for_byte(shell, path, fake_pct):
    node_tmp = "/tmp/labwright-pct.abc/1"
    assert pct_argv(shell, pct_push_command(101, node_tmp, path), fake_pct) == [
        b"push", b"101", node_tmp.encode(), path.encode()]
    assert pct_argv(shell, pct_pull_command(101, path, node_tmp), fake_pct) == [
        b"pull", b"101", path.encode(), node_tmp.encode()]


@pytest.mark.parametrize("shell", SHELLS)
def test_paths_starting_with_a_dash_cannot_become_options(shell, fake_pct):
    argv = pct_argv(shell, pct_push_command(101, "-node", "--perms=7777"), fake_pct)
    assert argv == [b"push", b"101", b"./-node", b"./--perms=7777"]
    argv = pct_argv(shell, pct_pull_command(101, "-rf", "/tmp/x"), fake_pct)
    assert argv == [b"pull", b"101", b"./-rf", b"/tmp/x"]


@pytest.mark.parametrize("shell", SHELLS)
def test_push_options(shell, fake_pct):
    command = pct_push_command(101, "/tmp/n", "/etc/x y", perms=0o640, user="nobody", group="my group")
    assert pct_argv(shell, command, fake_pct) == [
        b"push", b"101", b"/tmp/n", b"/etc/x y", b"--perms", b"0640", b"--user", b"nobody", b"--group", b"my group"]
    assert pct_argv(shell, pct_pull_command(101, "/a", "/b", perms="600"), fake_pct)[-2:] == [b"--perms", b"0600"]


@pytest.mark.parametrize(("perms", "expected"), [
    (0o644, "0644"), (0o600, "0600"), (0o4755, "04755"), (0, "00"), ("644", "0644"), ("0755", "0755"), ("7", "07"),
])
def test_format_perms(perms, expected):
    assert format_perms(perms) == expected


@pytest.mark.parametrize("perms", ["abc", "999", "0x1ff", "-644", "0644 ", "64400", 0o17777, -1])
def test_format_perms_refuses_non_octal(perms):
    with pytest.raises(ValueError):
        format_perms(perms)


@pytest.mark.parametrize("shell", SHELLS)
def test_status_command(shell, fake_pct):
    assert pct_argv(shell, pct_status_command(123456), fake_pct) == [b"status", b"123456"]


@pytest.mark.parametrize(("stdout", "status"), [
    ("status: running\n", "running"),
    ("status: stopped\n", "stopped"),
    ("cpus: 1\nname: CT101\nstatus: running\nvmid: 101\n", "running"),
    ("", None),
    ("nothing here\n", None),
])
def test_parse_pct_status(stdout, status):
    assert parse_pct_status(stdout) == status


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("code", [0, 3])
def test_then_remove_keeps_exit_code_and_removes_the_file(shell, code, fake_pct, tmp_path):
    victim = tmp_path / "node tmp 'q' $x"
    victim.write_text("secret")
    proc = run_node(shell, then_remove(f"(exit {code})", str(victim)), fake_pct)
    assert proc.returncode == code
    assert not victim.exists()


# --- names -----------------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "expected"), [
    ("pve1/101", ("pve1", 101)),
    ("pve-1.example.org/100", ("pve-1.example.org", 100)),
    ("127.0.0.1/999999999", ("127.0.0.1", 999_999_999)),
    ("node_alias/4242", ("node_alias", 4242)),
])
def test_parse_pct_name(name, expected):
    assert parse_pct_name(name) == expected


@pytest.mark.parametrize("name", [
    None, "", "pve1", "pve1/", "/101", "pve1/99", "pve1/0", "pve1/1000000000", "pve1/abc", "pve1/0101",
    "pve1/+101", "pve1/ 101", "pve1/101 ", "pve1/1e3", "a/b/101", "pve 1/101", "pve1/-101", "pve1/١٠١",
])
def test_bad_names_raise_one_clear_line(name):
    with pytest.raises(InventoryError) as info:
        parse_pct_name(name)
    message = str(info.value)
    assert "\n" not in message
    assert "@pct" in message


def test_make_names_data_yields_host_name_data_and_group():
    assert list(PctConnector.make_names_data("pve1/101")) == [
        ("@pct/pve1/101", {"pct_node": "pve1", "pct_vmid": 101}, ["@pct"])]
    with pytest.raises(InventoryError, match="VMID '42'"):
        list(PctConnector.make_names_data("pve1/42"))


def test_every_data_key_is_documented():
    keys = set(PctConnectorData.__annotations__)
    assert keys == set(connector_data_meta)
    doc = PctConnector.__doc__ or ""
    for key in keys - {"pct_node", "pct_vmid"}:
        assert f"``{key}``" in doc, key  # the deprecated pct_ssh_* keys, each named
        assert connector_data_meta[key].description == f"Deprecated: use {DEPRECATED_KEYS[key]}"
    for key in ("ssh_hostname", "ssh_user", "ssh_key", "ssh_known_hosts_file", "ssh_strict_host_key_checking"):
        assert f"``{key}``" in doc, key
    assert SSH_OPTIONS["ssh_strict_host_key_checking"].default == "yes"


# --- the node's SSH options (labwright.hosts.options) ---------------------------------------------
def test_node_options_default_to_the_node_name_root_and_strict_host_keys(tmp_path):
    config = tmp_path / "config"
    config.write_text("")
    options = ssh_options({"ssh_config_file": str(config)}, "pve1")
    assert options["ssh_hostname"] == "pve1" and options["ssh_user"] == "root"
    assert options["ssh_strict_host_key_checking"] == "yes"


def test_node_options_leave_user_and_strictness_to_the_ssh_config_alias(tmp_path):
    config = tmp_path / "config"
    config.write_text(f"Host pve1\n  HostName 127.0.0.2\n  Port 2222\n  User admin\n  StrictHostKeyChecking no\n"
                      f"  UserKnownHostsFile {tmp_path}/kh\n  ProxyJump jump.example\n")
    options = ssh_options({"ssh_config_file": str(config)}, "pve1")
    assert "ssh_user" not in options and "ssh_strict_host_key_checking" not in options
    target = endpoint(options)
    assert (target.hostname, target.port, target.user) == ("127.0.0.2", 2222, "admin")
    assert target.known_hosts_file == f"{tmp_path}/kh"


def test_deprecated_pct_ssh_keys_map_with_a_warning_and_ssh_keys_win(tmp_path):
    config = tmp_path / "config"
    config.write_text("")
    warned: list[tuple[str, str]] = []
    data = {"pct_ssh_hostname": "10.0.0.5", "pct_ssh_port": "2200", "pct_ssh_key": "/k",
            "pct_ssh_strict_host_key_checking": False, "ssh_key": "/new", "ssh_config_file": str(config)}
    options = ssh_options(data, "pve1", warn=lambda old, new: warned.append((old, new)))
    assert options["ssh_hostname"] == "10.0.0.5" and options["ssh_port"] == 2200
    assert options["ssh_key"] == "/new" and options["ssh_strict_host_key_checking"] == "no"
    assert ("pct_ssh_hostname", "ssh_hostname") in warned and len(warned) == 4


def test_a_missing_explicit_ssh_config_or_a_bad_strictness_word_is_bad_input(tmp_path):
    with pytest.raises(BadInput, match="does not exist"):
        ssh_options({"ssh_config_file": str(tmp_path / "absent")}, "pve1")
    config = tmp_path / "config"
    config.write_text("")
    with pytest.raises(BadInput, match="ssh_strict_host_key_checking"):
        ssh_options({"ssh_config_file": str(config), "ssh_strict_host_key_checking": "maybe"}, "pve1")


# --- stdin -----------------------------------------------------------------------------------
@pytest.mark.parametrize(("stdin", "expected"), [
    ("one", b"one\n"),
    ("one\n", b"one\n"),
    (["a", "b\n", "ü"], "a\nb\nü\n".encode()),
    (b"raw", b"raw\n"),
    (io.StringIO("l1\nl2"), b"l1\nl2\n"),
    (("x",), b"x\n"),
])
def test_stdin_bytes_match_pyinfra_line_semantics(stdin, expected):
    assert stdin_bytes(stdin) == expected


# --- transfer verification scripts (run in the CT by pct exec) -------------------------------------
def digest_line(data: bytes) -> str:
    return f"{len(data)} {hashlib.sha256(data).hexdigest()}"


@pytest.mark.parametrize("shell", SHELLS)
def test_digest_script_reports_size_and_sha256(shell, fake_pct, tmp_path):
    target = tmp_path / "f; 'q' $x"
    target.write_bytes(b"payload\n")
    proc = run_node(shell, pct_exec_script(101, DIGEST_SCRIPT, str(target)), fake_pct, mode="run")
    assert proc.returncode == 0, proc.stderr
    assert parse_size_and_sha256(proc.stdout.decode()) == (8, hashlib.sha256(b"payload\n").hexdigest())
    proc = run_node(shell, pct_exec_script(101, DIGEST_SCRIPT, str(tmp_path / "absent")), fake_pct, mode="run")
    assert proc.returncode != 0 and parse_size_and_sha256(proc.stdout.decode()) is None


@pytest.mark.parametrize("shell", SHELLS)
def test_install_script_moves_a_verified_copy_over_the_target_keeping_its_mode(shell, fake_pct, tmp_path):
    target, staged = tmp_path / "dir 'x'" / "conf", tmp_path / "dir 'x'" / ".conf.labwright-1"
    target.parent.mkdir()
    target.write_bytes(b"old\n")
    target.chmod(0o640)
    staged.write_bytes(b"new\n")
    staged.chmod(0o600)
    command = pct_exec_script(101, INSTALL_SCRIPT, str(staged), str(target), digest_line(b"new\n"), "1", "1")
    proc = run_node(shell, command, fake_pct, mode="run")
    assert proc.returncode == 0, proc.stderr
    assert target.read_bytes() == b"new\n" and (target.stat().st_mode & 0o7777) == 0o640
    assert not staged.exists()


@pytest.mark.parametrize("shell", SHELLS)
def test_install_script_refuses_a_mismatch_and_leaves_the_target_alone(shell, fake_pct, tmp_path):
    target, staged = tmp_path / "conf", tmp_path / ".conf.labwright-1"
    target.write_bytes(b"old\n")
    staged.write_bytes(b"ne")  # a short copy, as pct's ignored copy failure leaves it
    command = pct_exec_script(101, INSTALL_SCRIPT, str(staged), str(target), digest_line(b"new\n"), "1", "1")
    proc = run_node(shell, command, fake_pct, mode="run")
    assert proc.returncode == 3
    assert parse_size_and_sha256(proc.stdout.decode()) == (2, hashlib.sha256(b"ne").hexdigest())
    assert target.read_bytes() == b"old\n" and not staged.exists()
    missing = pct_exec_script(101, INSTALL_SCRIPT, str(staged), str(target), digest_line(b"new\n"), "1", "1")
    assert run_node(shell, missing, fake_pct, mode="run").returncode == 3


@pytest.mark.parametrize("shell", SHELLS)
def test_install_script_never_moves_a_copy_into_a_directory(shell, fake_pct, tmp_path):
    target, staged = tmp_path / "d", tmp_path / ".d.labwright-1"
    target.mkdir()
    staged.write_bytes(b"x")
    proc = run_node(shell, pct_exec_script(101, INSTALL_SCRIPT, str(staged), str(target), digest_line(b"x"), "1", "1"),
                    fake_pct, mode="run")
    assert proc.returncode == 4 and b"is a directory" in proc.stderr
    assert list(target.iterdir()) == [] and not staged.exists()
