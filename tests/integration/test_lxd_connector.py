"""The @lxd connector against real LXD containers: through pyinfra's API and its CLI.

Every behaviour is asserted both ways commands can run: in the persistent agent session
(``agent``, the default) and as one REST exec per command (``rest``, host data lxd_agent=False).
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import subprocess
import time

import pytest
from pyinfra.api import Config, Inventory, State
from pyinfra.api.connect import connect_all
from pyinfra.api.exceptions import ConnectError

from labwright.lxd.session import AgentSession
from labwright.testing.pyinfra_output import pyinfra_totals

pytestmark = pytest.mark.lab

# Prints how the command was started: walks up the process tree looking for the agent (whose command
# line holds its source, "labwright-agent" included); a REST exec's ancestors end outside the container.
# "[-]" keeps the pattern from matching the shells that run these very lines.
HOW = ("p=$$; while [ \"$p\" -gt 1 ]; do "
       "if grep -q 'labwright[-]agent' /proc/$p/cmdline 2>/dev/null; then echo via-agent; exit 0; fi; "
       "p=$(cut -d' ' -f4 /proc/$p/stat); done; echo via-rest")
KILL_AGENT = "pkill -9 -f 'labwright[-]agent'"


def connect_host(name: str, data: dict | None = None):
    inventory = Inventory(([f"@lxd/{name}"], data or {}))
    state = State(inventory, Config())
    connect_all(state)
    host = inventory.get_host(f"@lxd/{name}")
    assert host.connected, f"could not connect to @lxd/{name}"
    return host


def how(host) -> str:
    ok, out = host.run_shell_command(HOW)
    assert ok, out.output
    return out.stdout


@pytest.fixture(scope="module")
def shared_container(lab):
    """One container for the tests that only run commands and write files of their own in it (their output, stdin,
    users, uploads): a fresh one each cost ~2 s of copy, boot and removal (x16). Tests that kill the agent, stop
    processes, count exec records, move python3 or leave a background process keep their own (``lab_container``)."""
    name = lab.fresh("lwconn")
    try:
        yield name
    finally:
        lab.remove(name)


@pytest.fixture(params=[True, False], ids=["agent", "rest"])
def lxd_agent(request) -> bool:
    return request.param


@pytest.fixture
def connect(lxd_agent):
    """connect(name, data=None) -> a connected pyinfra host, in this test's mode (checked)."""

    def make(name: str, data: dict | None = None):
        host = connect_host(name, {"lxd_agent": lxd_agent, **(data or {})})
        session = host.connector.session
        assert (session is not None and session.alive) == lxd_agent
        assert how(host) == ("via-agent" if lxd_agent else "via-rest")
        return host

    return make


@pytest.mark.smoke  # the @lxd connector on the real LXD: scripts/test --quick
def test_exec_output_exit_code_and_stderr_are_faithful(shared_container, connect):
    host = connect(shared_container)
    ok, out = host.run_shell_command("echo out; echo 'ünïcødé ✓'; echo err >&2; exit 7")
    assert ok is False
    assert out.stdout_lines == ["out", "ünïcødé ✓"]
    assert out.stderr_lines == ["err"]
    ok, _ = host.run_shell_command("exit 7", _success_exit_codes=[7])
    assert ok is True


def test_recorded_outputs_are_tidied_on_disconnect(lab, lab_container, connect, lxd_agent):
    def exec_logs() -> set[str]:
        return {p for p in lab.client.request("GET", f"/1.0/instances/{lab_container}/logs") if "/exec_" in p}

    before = exec_logs()
    host = connect(lab_container)
    for i in range(70):  # more than one batch of deletions
        assert host.run_shell_command(f"echo {i}")[1].stdout == str(i)
    if lxd_agent:
        assert exec_logs() - before == set(), "the agent records nothing"
    else:
        assert len(exec_logs() - before) < 70 * 2, "a full batch should have been deleted already"
    host.disconnect()
    assert exec_logs() - before == set()


def test_stdin_chdir_env_and_nasty_arguments(shared_container, connect):
    host = connect(shared_container)
    ok, out = host.run_shell_command("cat; pwd", _stdin=["first line", "sécond"], _chdir="/etc")
    assert ok and out.stdout_lines == ["first line", "sécond", "/etc"]
    ok, out = host.run_shell_command("wc -c", _stdin=b"raw\x00bytes\xff")
    assert ok and out.stdout == "11"
    nasty = "a b 'q' \"d\" $HOME `x` \\ ; | & * \n end"
    ok, out = host.run_shell_command('printf "%s" "$NASTY"', _env={"NASTY": nasty})
    assert ok and out.stdout == nasty
    # stdin staging leaves nothing behind in /tmp
    ok, out = host.run_shell_command("ls -a /tmp | grep -c labwright-stdin || true")
    assert out.stdout == "0"


def test_sudo_and_su_run_as_other_user(shared_container, connect):
    host = connect(shared_container)
    ok, out = host.run_shell_command("id -un", _sudo=True, _sudo_user="nobody")
    assert ok and out.stdout == "nobody"
    ok, out = host.run_shell_command("id -un", _su_user="daemon", _su_shell="/bin/sh")
    assert ok and out.stdout == "daemon", out.output


def test_put_get_10mb_checksum_and_sudo_upload(shared_container, connect, tmp_path):
    host = connect(shared_container)
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


def test_upload_keeps_existing_mode_and_owner(shared_container, connect):
    host = connect(shared_container)
    host.run_shell_command("echo old > /etc/keep && chmod 640 /etc/keep && chown daemon /etc/keep")
    host.put_file(io.BytesIO(b"new\n"), "/etc/keep")
    ok, out = host.run_shell_command("stat -c '%a %U' /etc/keep; cat /etc/keep")
    assert out.stdout_lines == ["640 daemon", "new"]


def test_get_missing_file_raises_and_timeout_raises(lab_container, connect, lxd_agent):
    host = connect(lab_container)
    with pytest.raises(OSError, match="/nope"):
        host.get_file("/nope", io.BytesIO())
    session = host.connector.session
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        host.run_shell_command("sleep 10", _timeout=1)
    assert time.monotonic() - started < 5
    # The command is gone (its whole process group), and the connection goes on as before.
    ok, out = host.run_shell_command("for i in 1 2 3 4 5 6 7 8 9 10; do pgrep -x sleep || break; sleep 0.2; done; "
                                     "pgrep -x sleep || echo none")
    assert out.stdout == "none"
    assert how(host) == ("via-agent" if lxd_agent else "via-rest")
    assert host.connector.session is session
    with pytest.raises(TimeoutError):
        host.run_shell_command("trap '' TERM; sleep 30", _timeout=1)  # TERM ignored: KILL 5 s later


def test_environment_cwd_and_signals_are_the_same_both_ways(shared_container):
    """The agent's commands see exactly what a REST exec's see."""
    probe = ("env | sort; pwd; umask; id; ulimit -n; test -t 0 && echo tty || echo no-tty; "
             "grep -i ^sig /proc/self/status")
    outputs = {}
    for agent in (True, False):
        host = connect_host(shared_container, {"lxd_agent": agent})
        assert how(host) == ("via-agent" if agent else "via-rest")
        ok, out = host.run_shell_command(probe)
        results = [out.stdout_lines]
        for code in (3, 0):
            results.append(host.run_shell_command(f"exit {code}")[0])
        results.append(host.run_shell_command("kill -TERM $$", _success_exit_codes=[143])[0])
        results.append(host.run_shell_command("exec 0<&-; cat", _success_exit_codes=[1])[0])
        outputs[agent] = results
        host.disconnect()
    assert outputs[True] == outputs[False]


def test_megabytes_of_stdout_and_stderr(shared_container, connect):
    host = connect(shared_container)
    ok, out = host.run_shell_command("seq 1 400000; seq 400001 700000 >&2")
    assert ok
    assert out.stdout_lines == [str(i) for i in range(1, 400001)]
    assert out.stderr_lines == [str(i) for i in range(400001, 700001)]
    assert sum(len(line) + 1 for line in out.stdout_lines) > 2_500_000


def test_many_commands_in_a_row(lab, shared_container, connect, lxd_agent):
    host = connect(shared_container)
    session = host.connector.session
    for i in range(300 if lxd_agent else 60):
        ok, out = host.run_shell_command(f"echo {i}; echo e{i} >&2", _stdin=str(i) if i % 7 == 0 else None)
        assert ok and out.stdout_lines == [str(i)] and out.stderr_lines == [f"e{i}"]
    assert host.connector.session is session


def test_commands_that_close_or_hold_their_output(lab_container, connect):
    host = connect(lab_container)
    ok, out = host.run_shell_command("echo first; exec >&-; echo err >&2; sleep 0.3; exit 3", _success_exit_codes=[3])
    assert ok and out.stdout_lines == ["first"] and out.stderr_lines == ["err"]
    ok, out = host.run_shell_command("exec >&- 2>&-; sleep 0.5; touch /root/ran-on")
    assert ok
    assert host.run_shell_command("ls /root/ran-on")[0]
    # A background process keeping stdout open does not hold the command (nor the session) for long.
    started = time.monotonic()
    ok, out = host.run_shell_command("sleep 30 & echo started")
    assert ok and out.stdout_lines == ["started"]
    assert time.monotonic() - started < 5
    ok, out = host.run_shell_command("echo still here")
    assert ok and out.stdout == "still here"


def test_binary_output_is_byte_exact_both_ways(lab, shared_container):
    """Binary stdout/stderr, as the connector's runners return them (pyinfra itself wants text)."""
    lab.client.exec(shared_container, ["sh", "-c", "head -c 3000000 /dev/urandom > /root/r.bin"])
    want = io.BytesIO()
    lab.client.pull_file(shared_container, "/root/r.bin", want)
    session = AgentSession(lab.client, shared_container)
    session.start()
    try:
        command = "cat /root/r.bin; cat /root/r.bin >&2; printf '\\000\\377\\r\\n'"
        for result in (session.run(command), lab.client.exec(shared_container, ["sh", "-c", command])):
            assert result.stdout == want.getvalue() + b"\x00\xff\r\n"
            assert result.stderr == want.getvalue()
        data = bytes(range(256)) * 1000
        assert session.run("cat", stdin=data).stdout == data
    finally:
        session.close()


def test_fallback_without_python3(lab_container, caplog):
    lab_host = connect_host(lab_container, {"lxd_agent": False})
    assert lab_host.run_shell_command("mv /usr/bin/python3 /usr/bin/python3.off")[0]
    with caplog.at_level(logging.DEBUG, logger="pyinfra"):
        host = connect_host(lab_container)
    assert host.connector.session is None
    assert "commands run as REST execs" in caplog.text
    assert how(host) == "via-rest"
    ok, out = host.run_shell_command("cat; echo ✓ >&2; exit 5", _stdin="in", _success_exit_codes=[5])
    assert ok and out.stdout == "in" and out.stderr == "✓"
    with pytest.raises(TimeoutError):
        host.run_shell_command("sleep 10", _timeout=1)
    lab_host.run_shell_command("mv /usr/bin/python3.off /usr/bin/python3")
    assert how(connect_host(lab_container)) == "via-agent"


def test_agent_lost_mid_command_raises_and_is_not_rerun(lab_container):
    host = connect_host(lab_container)
    with pytest.raises(ConnectError, match="may have run"):
        host.run_shell_command(f"echo ran >> /root/count; {KILL_AGENT}; sleep 5")
    # Not retried behind our back; the next command gets a new session.
    ok, out = host.run_shell_command("cat /root/count")
    assert ok and out.stdout_lines == ["ran"]
    assert how(host) == "via-agent"


def test_agent_dead_between_commands_falls_back_then_restarts(lab, lab_container):
    host = connect_host(lab_container)
    operation = host.connector.session.operation
    lab.client.exec(lab_container, ["sh", "-c", KILL_AGENT])
    lab.client.request("GET", f"/1.0/operations/{operation}/wait", params={"timeout": 10})
    # Known not to have reached the agent: run (once) as a REST exec.
    ok, out = host.run_shell_command(f"echo once >> /root/count; {HOW}")
    assert ok and out.stdout_lines == ["via-rest"]
    assert how(host) == "via-agent"
    assert host.connector.session.operation != operation
    assert host.run_shell_command("cat /root/count")[1].stdout_lines == ["once"]


def test_disconnect_ends_the_agent(lab, lab_container):
    host = connect_host(lab_container)
    operation = host.connector.session.operation
    host.disconnect()
    op = lab.client.request("GET", f"/1.0/operations/{operation}/wait", params={"timeout": 10})
    assert op["status"] == "Success" and op["metadata"]["return"] == 0
    check = lab.client.exec(lab_container, ["sh", "-c", "pgrep -f 'labwright[-]agent' || echo none"])
    assert check.stdout == b"none\n"


def unconnected_host(name: str, data: dict | None = None):
    inventory = Inventory(([f"@lxd/{name}"], data or {}))
    State(inventory, Config())
    return inventory.get_host(f"@lxd/{name}")


def test_connect_refuses_missing_and_stopped_containers(lab, make_lab_container, lxd_agent):
    data = {"lxd_agent": lxd_agent}
    with pytest.raises(ConnectError, match="no such container"):
        unconnected_host("lwt-does-not-exist", data).connect(raise_exceptions=True)
    name = make_lab_container()
    lab.client.set_state(name, "stop", force=True)
    with pytest.raises(ConnectError, match="Stopped; start it first"):
        unconnected_host(name, data).connect(raise_exceptions=True)


def test_pyinfra_cli_operation_is_idempotent(lab_container, cli_env, tmp_path, lxd_agent):
    deploy = tmp_path / "deploy.py"
    deploy.write_text(
        "from pyinfra.operations import files\n"
        "files.put(name='motd', src=__file__.replace('deploy.py', 'motd'), dest='/etc/motd', mode='644')\n"
        "files.directory(name='dir', path='/srv/app', user='daemon', mode='750')\n"
    )
    (tmp_path / "motd").write_text("labwright lab ✓\n")
    target = f"@lxd/{lab_container}"
    data = ["--data", f"lxd_agent={lxd_agent}"]
    first = subprocess.run(["pyinfra", "-y", "--json", *data, target, str(deploy)], capture_output=True, text=True,
                           env=cli_env, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert pyinfra_totals(first.stdout).changed == 2
    second = subprocess.run(["pyinfra", "-y", "--json", *data, target, str(deploy)], capture_output=True, text=True,
                            env=cli_env, cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    totals = pyinfra_totals(second.stdout)
    assert (totals.changed, totals.no_change, totals.error) == (0, 2, 0)
    check = subprocess.run(["pyinfra", "-y", *data, target, "exec", "--",
                            f"cat /etc/motd; stat -c %U:%a /srv/app; {HOW}; seq 1 100000 | tail -1; sleep 2 & echo bg"],
                           capture_output=True, text=True, env=cli_env, cwd=tmp_path)
    output = check.stdout + check.stderr
    assert check.returncode == 0, output
    assert "labwright lab ✓" in output
    assert "daemon:750" in output
    # Under the CLI's gevent monkey-patching the agent session works (and is what ran the command).
    assert ("via-agent" if lxd_agent else "via-rest") in output
    assert "100000" in output and "bg" in output


def test_pyinfra_cli_runs_hosts_in_parallel_through_their_agents(make_lab_container, cli_env, tmp_path):
    """Two hosts at once under the CLI: gevent interleaves their sessions' waits (and big outputs)."""
    names = [make_lab_container(), make_lab_container()]
    deploy = tmp_path / "deploy.py"
    deploy.write_text(
        "from pyinfra import host\n"
        "from pyinfra.facts.server import Command\n"
        "from pyinfra.operations import server\n"
        f"assert host.get_fact(Command, {HOW!r}) == 'via-agent'\n"
        "for i in range(15):\n"
        "    out = host.get_fact(Command, f'sleep 0.0{i % 3}; seq 1 {40000 + i}; echo {i} >&2')\n"
        "    assert out.splitlines()[-1] == str(40000 + i), out[-50:]\n"
        "server.shell(name='bulk', commands=['head -c 3000000 /dev/urandom | od -An -tx1 | tail -1 >/root/done'])\n"
    )
    result = subprocess.run(["pyinfra", "-y", "--json", ",".join(f"@lxd/{name}" for name in names), str(deploy)],
                            capture_output=True, text=True, env=cli_env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    totals = pyinfra_totals(result.stdout)
    assert (totals.changed, totals.error) == (2, 0)
