"""The daemon layer on both real daemons, LXD and Incus side by side on this host (``backend_lab``:
labwright.testing.lab_fixture): the REST client, the ``@lxd/NAME`` / ``@incus/NAME`` connector's exec both ways (agent
session and REST exec), and ``guest plan|apply|snapshot``; ``deploys/base.py`` twice on an Incus guest (the second
run changes nothing) with ``labwright verify base --hosts=@incus/NAME``; then the bad inputs of two daemons on one
host, each one line, exit 2, nothing made. One container per daemon serves the whole module (module-scoped ``guest``).

The lab's own up/status/down cycle on both daemons is in test_lab.py; the deploy-level tests run once, on the
default backend (``lab``).
"""

from __future__ import annotations

import io
import json
import os
import secrets
import socket
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyinfra.api import Config, Inventory, State
from pyinfra.api.connect import connect_all

from labwright.lab.daemon import BACKENDS
from labwright.testing.lab_fixture import Lab
from labwright.testing.pyinfra_output import DeployRun, run_pyinfra, tool_env

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
LABWRIGHT = str(REPO / ".venv" / "bin" / "labwright")
#: How the command was started (as test_lxd_connector.HOW): through the agent session, or a REST exec.
HOW = ("p=$$; while [ \"$p\" -gt 1 ]; do "
       "if grep -q 'labwright[-]agent' /proc/$p/cmdline 2>/dev/null; then echo via-agent; exit 0; fi; "
       "p=$(cut -d' ' -f4 /proc/$p/stat); done; echo via-rest")


@pytest.fixture(scope="module")
def guest(backend_lab: Lab) -> Iterator[str]:
    name = backend_lab.fresh("lwbk")
    yield name
    backend_lab.remove(name)


def lw(cli_env, *args, env: dict[str, str] | None = None):
    return subprocess.run([LABWRIGHT, *args], capture_output=True, text=True, env=env or cli_env, timeout=600)


def the_error(stderr: str) -> str:
    errors = [line for line in stderr.splitlines() if line.startswith("labwright: error: ")]
    assert len(errors) == 1 and stderr.splitlines()[-1] == errors[0], stderr
    return errors[0]


def test_the_rest_client_talks_to_the_daemon_it_names(backend_lab, guest):
    client = backend_lab.client
    server = client.server_info()
    assert server.name == backend_lab.backend
    assert client.endpoint.socket_path == BACKENDS[backend_lab.backend].socket()
    assert client.endpoint.title == BACKENDS[backend_lab.backend].title
    result = client.exec(guest, ["sh", "-c", "printf out; printf err >&2; exit 3"])
    assert (result.exit_code, result.stdout, result.stderr) == (3, b"out", b"err")
    payload = secrets.token_bytes(256 * 1024)
    client.push_file(guest, "/root/payload", payload, mode=0o600)
    back = io.BytesIO()
    client.pull_file(guest, "/root/payload", back)
    assert back.getvalue() == payload
    # the other daemon does not have it: the instance is this daemon's alone
    other = BACKENDS["incus" if backend_lab.backend == "lxd" else "lxd"]
    if other.installed():
        assert other.client().instance_or_none(guest) is None


# smoke (scripts/test --quick): the @incus connector on the real Incus, as it runs by default (the agent)
@pytest.mark.parametrize("agent", [pytest.param(True, id="agent", marks=pytest.mark.smoke),
                                   pytest.param(False, id="rest")])
def test_the_connector_execs_on_its_daemon_both_ways(backend_lab, guest, agent):
    host_name = backend_lab.host(guest)
    inventory = Inventory(([host_name], {"lxd_agent": agent}))
    state = State(inventory, Config())
    connect_all(state)
    host = inventory.get_host(host_name)
    assert host.connected, f"could not connect to {host_name}"
    try:
        ok, out = host.run_shell_command("echo out; echo 'ünïcødé ✓'; echo err >&2; exit 7")
        assert ok is False
        assert (out.stdout_lines, out.stderr_lines) == (["out", "ünïcødé ✓"], ["err"])
        ok, out = host.run_shell_command(HOW)
        assert ok and out.stdout == ("via-agent" if agent else "via-rest")
        ok, out = host.run_shell_command("hostname")
        assert ok and out.stdout == guest
    finally:
        host.disconnect()


def test_guest_plan_apply_and_snapshot(backend_lab, cli_env, tmp_path):
    lab, backend = backend_lab, backend_lab.backend
    name = f"lwbg-{secrets.token_hex(3)}"
    host = lab.host(name)
    data = {"backend": "lxd", "clone": lab.template, "profiles": [lab.spec.profile], "memory": "512M"}
    inv = tmp_path / "inv.py"
    inv.write_text(textwrap.dedent(f"""
        guests = [("{host}", {{"guest": {data!r}}})]
        """))
    try:
        plan = lw(cli_env, "guest", "plan", "-i", str(inv))
        assert plan.returncode == 0, plan.stderr
        assert f"guest {name} ({backend} local): create" in plan.stdout  # never "(lxd local)" for an Incus guest
        applied = lw(cli_env, "guest", "apply", "-i", str(inv))
        assert applied.returncode == 0, applied.stderr
        assert lab.client.instance(name)["config"]["limits.memory"] == "512MiB"
        again = lw(cli_env, "guest", "apply", "-i", str(inv), "--json")
        assert again.returncode == 0 and json.loads(again.stdout)[0]["changes"] == [], again.stdout

        took = lw(cli_env, "guest", "snapshot", host, "--name", "lwbk-before")
        assert took.returncode == 0 and "took snapshot lwbk-before" in took.stdout, took.stderr
        listed = lw(cli_env, "guest", "snapshots", host, "--json")
        assert "lwbk-before" in [s["name"] for s in json.loads(listed.stdout)]
        assert lab.client.get_or_none(f"/1.0/instances/{name}/snapshots/lwbk-before") is not None

        gone = lw(cli_env, "guest", "destroy", "-i", str(inv), "--yes")
        assert gone.returncode == 0 and lab.client.instance_or_none(name) is None, gone.stderr
    finally:
        lab.remove(name)


# --- deploys/base.py on an Incus guest, checked by `labwright verify base --hosts=@incus/NAME` -----------------------
# (on LXD: test_base_deploy.py, which runs the whole base deploy story; here the same deploy and suite on Incus, once)
def base_deploy(lab: Lab, name: str):
    key = str(Path(lab.private_key_path).with_suffix(".pub"))
    return run_pyinfra(lab.host(name), "deploys/base.py", f"admin_ssh_public_key_file={key}", cwd=REPO)


def verify_base(lab: Lab, cli_env, name: str, *args: str):
    key = str(Path(lab.private_key_path).with_suffix(".pub"))
    return lw(cli_env, "verify", "base", f"--hosts=@incus/{name}", f"--base-admin-key-file={key}", "-q", *args)


@pytest.fixture(scope="module")
def incus_based(incus_lab: Lab) -> Iterator[tuple[str, subprocess.CompletedProcess[str], DeployRun]]:
    """One fresh Incus guest: the suite run on it bare (the admin user's checks only), then deployed once."""
    name = incus_lab.fresh("lwbib")
    try:
        before = verify_base(incus_lab, tool_env(), name, "-k", "admin_user")
        first = base_deploy(incus_lab, name)
        assert first.rc == 0, first.output[-4000:]
        yield name, before, first
    finally:
        incus_lab.remove(name)


def test_base_deploys_on_an_incus_guest_and_verify_checks_it_there(incus_lab, incus_based, cli_env):
    name, before, first = incus_based
    # the suite reaches the Incus guest and can fail there: the bare image has no admin user
    assert before.returncode == 1 and "test_admin_user_exists_in_group_sudo" in before.stdout, before.stdout[-3000:]
    assert first.totals.changed > 0 and first.totals.error == 0
    done = verify_base(incus_lab, cli_env, name, "-rA")
    assert done.returncode == 0, f"verify base on @incus/{name} failed:\n{done.stdout[-4000:]}{done.stderr[-2000:]}"
    assert f"[incus://{name}]" in done.stdout  # testinfra's id for the host: the incus client ran the checks


def test_base_second_run_on_incus_changes_nothing(incus_lab, incus_based):
    name, _, _ = incus_based
    again = base_deploy(incus_lab, name)
    assert again.rc == 0, again.output[-4000:]
    assert (again.totals.changed, again.totals.error) == (0, 0), again.output[-4000:]
    print(f"\nno-change re-run on @incus/{name}: {again.seconds:.2f}s ({again.totals.no_change} operations)")


# --- two daemons on one host: each bad input one line, exit 2, nothing made ----------------------------------------
def lab_inventory(tmp_path, name: str, backend: str, bridge: str, subnet: str) -> str:
    path = tmp_path / f"{name}.py"
    path.write_text(f'lab = (["@{backend}/{name}-c1"], {{"lab_name": "{name}", "lab_subnet": "{subnet}", '
                    f'"lab_bridge": "{bridge}", "lab_pool": "{name}", "lab_profile": "{name}", '
                    f'"lab_backend": "{backend}"}})\n')
    return str(path)


def made_nothing(lab: Lab, name: str, bridge: str) -> None:
    for path in (f"/1.0/storage-pools/{name}", f"/1.0/profiles/{name}", f"/1.0/instances/{name}-c1"):
        assert lab.client.get_or_none(path) is None, path
    network = lab.client.get_or_none(f"/1.0/networks/{bridge}")
    assert network is None or network.get("description") != f"labwright lab {name}", network


@pytest.mark.parametrize(("backend", "bridge", "subnet", "message"), [
    ("incus", "lwtestbr0", "10.99.68.1/24",
     "lab_bridge lwtestbr0 is already LXD's bridge (10.99.9.1/24); Incus and LXD each need their own: set another "
     "lab_bridge and lab_subnet for this Incus lab, e.g. lab_bridge = 'lwibr0' and lab_subnet = '10.99.64.1/24'"),
    ("incus", "lwclashbr0", "10.99.9.1/24",
     "lab_subnet 10.99.9.0/24 overlaps LXD's bridge lwtestbr0 (10.99.9.1/24); give this Incus lab a free subnet"),
    ("lxd", "lwtestibr0", "10.99.68.1/24", "lab_bridge lwtestibr0 is already Incus's bridge (10.99.63.1/24)"),
    ("lxd", "lwclashbr0", "10.99.63.1/24", "lab_subnet 10.99.63.0/24 overlaps Incus's bridge lwtestibr0"),
])
def test_both_daemons_wanting_one_bridge_or_subnet_is_refused(lab, incus_lab, cli_env, tmp_path, backend, bridge,
                                                               subnet, message):
    if lab.backend != "lxd":
        pytest.skip("needs LXD beside Incus (LXD is not installed here)")
    inv = lab_inventory(tmp_path, "lwclash", backend, bridge, subnet)
    proc = lw(cli_env, "lab", "up", "-i", inv)
    assert proc.returncode == 2, proc.stderr
    assert the_error(proc.stderr).startswith(f"labwright: error: {inv}: {message}")
    made_nothing(incus_lab if backend == "incus" else lab, "lwclash", bridge)


def test_an_incus_socket_that_does_not_answer_is_one_line(incus_lab, cli_env, tmp_path):
    dead = tmp_path / "dead.sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(dead))  # a socket file nobody listens on
    inv = lab_inventory(tmp_path, "lwdead", "incus", "lwdeadbr0", "10.99.69.1/24")
    proc = lw(cli_env, "lab", "up", "-i", inv, env={**cli_env, "INCUS_SOCKET": str(dead)})
    assert proc.returncode == 2
    assert the_error(proc.stderr).startswith(f"labwright: error: INCUS_SOCKET={dead}: no daemon answers there (Incus "
                                             f"at {dead} unreachable")
    assert "fix or unset INCUS_SOCKET" in proc.stderr
    made_nothing(incus_lab, "lwdead", "lwdeadbr0")


@pytest.mark.parametrize("backend", ["incus", "lxd"])
def test_a_backend_that_is_not_installed_is_one_line(backend, cli_env, tmp_path):
    """PATH without the daemon's commands (``incus``/``lxc``, ``lxd``): as on a host that lacks it."""
    inv = lab_inventory(tmp_path, "lwnone", backend, "lwnonebr0", "10.99.69.1/24")
    empty = tmp_path / "bin"
    empty.mkdir()
    proc = lw(cli_env, "lab", "up", "-i", inv, env={**cli_env, "PATH": str(empty)})
    assert proc.returncode == 2
    title, package = ("Incus", "incus-base") if backend == "incus" else ("LXD", "lxd")
    assert the_error(proc.stderr) == (f"labwright: error: {inv}: lab_backend {backend}: {title} is not installed here "
                                      f"(no {'incus and incusd' if backend == 'incus' else 'lxc and lxd'}); install "
                                      f"it with scripts/setup or `sudo apt-get install {package}`")
    assert not os.path.exists("/sys/class/net/lwnonebr0")
