"""labwright's LXD client against today's LXD (5.21/6.x) as its source says it answers (tests/support/lxd6_double.py),
and against Incus's answer to the same wait: no real daemon needed."""

from __future__ import annotations

import pytest

from labwright.errors import BadInput, LxdError, LxdNotFound, OperationTimeout
from labwright.lxd.client import Endpoint, LxdClient, find_local_socket
from support.lxd6_double import Lxd6Double


@pytest.fixture
def daemon(tmp_path):
    made: list[Lxd6Double] = []

    def start(**kwargs) -> tuple[Lxd6Double, LxdClient]:
        double = Lxd6Double(**kwargs).serve(str(tmp_path / f"d{len(made)}.socket"))
        made.append(double)
        return double, LxdClient(Endpoint(socket_path=str(tmp_path / f"d{len(made) - 1}.socket")), timeout=10)

    yield start
    for double in made:
        double.close()


def test_server_name_version_and_extensions_come_from_get_1_0(daemon):
    _, client = daemon(version="6.5")
    info = client.server_info()
    assert (info.name, info.version, info.describe()) == ("lxd", "6.5", "lxd 6.5")
    assert info.has("gpu_cdi") and not info.has("no_such_extension")
    _, incus = daemon(flavour="incus", version="6.0.4")
    assert incus.server_info().describe() == "incus 6.0.4" and not incus.server_info().has("gpu_cdi")


@pytest.mark.parametrize("flavour", ["lxd", "incus"])
def test_an_operation_longer_than_one_wait_is_waited_for_on_both_daemons(daemon, flavour):
    """LXD 6.x answers a wait that ran out with HTTP 200 and "context deadline exceeded"; Incus with the running
    operation. Either way labwright keeps waiting and returns the finished operation."""
    double, client = daemon(flavour=flavour)
    double.hold_operations = True
    seen: list[dict] = []

    def after_two_waits(meta: dict) -> None:
        seen.append(meta)
        if len(seen) == 2:
            double.finish()

    op = client.request("POST", "/1.0/instances", {"name": "g1", "source": {"type": "none"}}, wait=False)
    result = client.wait_operation(f"/1.0/operations/{op['id']}", timeout=600, every=1, on_wait=after_two_waits)
    assert result["status_code"] == 200 and double.timed_out_waits == 2
    assert client.instance("g1")["name"] == "g1"


def test_a_wait_that_runs_past_labwrights_own_deadline_names_the_operation(daemon):
    double, client = daemon()
    double.hold_operations = True
    op = client.request("POST", "/1.0/instances", {"name": "g2"}, wait=False)
    with pytest.raises(OperationTimeout, match=f"LXD operation {op['id']} still running"):
        client.wait_operation(f"/1.0/operations/{op['id']}", timeout=1, what="creating g2")


def test_a_failed_operation_is_its_error_not_a_running_one(daemon):
    double, client = daemon()
    double.hold_operations = True
    op = client.request("POST", "/1.0/instances", {"name": "g3"}, wait=False)
    double.fail(double.operations[op["id"]], "Failed creating instance record: disk full")
    with pytest.raises(LxdError, match="disk full"):
        client.wait_operation(f"/1.0/operations/{op['id']}", timeout=30)


def test_error_shapes_of_lxd6_are_one_line_errors(daemon):
    _, client = daemon()
    with pytest.raises(LxdNotFound, match="Instance not found") as err:
        client.instance("nope")
    assert err.value.status_code == 404
    assert client.instance_or_none("nope") is None


def test_exec_with_recorded_output_and_files_on_lxd6_paths(daemon):
    double, client = daemon()
    client.request("POST", "/1.0/instances", {"name": "g4"})
    result = client.exec("g4", ["echo", "hello"])
    assert (result.exit_code, result.stdout) == (0, b"hello\n")
    assert client.exec("g4", ["false"]).exit_code == 1
    client.flush_logs()
    assert not double.logs  # the exec-output logs read were deleted
    client.push_file("g4", "/etc/x", b"data")
    assert double.files[("g4", "/etc/x")] == b"data"


def test_lxd_socket_comes_first(tmp_path, monkeypatch, daemon):
    double, _ = daemon()
    path = str(tmp_path / "d0.socket")
    monkeypatch.setenv("LXD_SOCKET", path)
    monkeypatch.setenv("LXD_DIR", str(tmp_path / "elsewhere"))
    assert find_local_socket("lxd") == path
    monkeypatch.setenv("INCUS_SOCKET", path)
    assert find_local_socket("incus") == path


@pytest.mark.parametrize("variable,flavour", [("LXD_SOCKET", "lxd"), ("INCUS_SOCKET", "incus")])
def test_a_socket_variable_naming_nothing_is_one_line_naming_it(tmp_path, monkeypatch, variable, flavour):
    monkeypatch.setenv(variable, str(tmp_path / "missing.socket"))
    with pytest.raises(BadInput) as err:
        find_local_socket(flavour)
    text = str(err.value)
    assert variable in text and "unset" in text and "\n" not in text


def test_a_socket_variable_whose_daemon_does_not_answer_is_bad_input(tmp_path, monkeypatch):
    import socket

    path = str(tmp_path / "dead.socket")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    sock.close()  # the file stays, nobody listens
    monkeypatch.setenv("INCUS_SOCKET", path)
    client = LxdClient(Endpoint(socket_path=find_local_socket("incus")), timeout=2)
    with pytest.raises(BadInput) as err:
        client.server()
    assert err.value.exit_code == 2 and "INCUS_SOCKET" in str(err.value) and "\n" not in str(err.value)


def test_run_incus_socket_is_a_default_candidate():
    from labwright.lxd.client import SOCKET_CANDIDATES

    assert SOCKET_CANDIDATES["incus"][0] == "/run/incus/unix.socket"


def test_lab_status_and_guest_show_name_the_server_text_and_json(tmp_path, daemon, cli_env):
    """`lab status` and `guest show` against an LXD 6.5 found through LXD_SOCKET: the name and version from GET /1.0."""
    import json

    from support.cli_child import run_cli

    double, _ = daemon(version="6.5")
    env = {**cli_env, "LXD_SOCKET": str(tmp_path / "d0.socket")}
    lab = tmp_path / "lab.py"
    lab.write_text("lab = ['@lxd/lw-x34']\n")
    proc = run_cli(["lab", "status", "-i", str(lab), "--json"], env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert rows and all((r["server"], r["server_version"]) == ("lxd", "6.5") for r in rows)
    proc = run_cli(["lab", "status", "-i", str(lab)], env=env, cwd=tmp_path)
    assert proc.returncode == 0 and "lxd 6.5" in proc.stdout, proc.stderr
    guests = tmp_path / "guests.py"
    guests.write_text("guests = [('@lxd/web1', {'guest': {'backend': 'lxd', 'clone': 'tmpl'}})]\n")
    proc = run_cli(["guest", "show", "-i", str(guests), "--json"], env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (json.loads(proc.stdout)[0]["server"], json.loads(proc.stdout)[0]["server_version"]) == ("lxd", "6.5")
    proc = run_cli(["guest", "show", "-i", str(guests)], env=env, cwd=tmp_path)
    assert proc.returncode == 0 and "lxd (lxd 6.5)" in proc.stdout, proc.stderr
    assert ("GET", "/1.0") in double.requests
