"""`labwright lab up|status|down` against the real LXD daemon, through the CLI a user runs; the whole up/status/down
cycle on Incus as well (``backend_lab``: labwright.testing.lab_fixture)."""

from __future__ import annotations

import json
import subprocess

import pytest

from labwright.lxd.client import LxdClient
from support.cli_docs import assert_documented

pytestmark = pytest.mark.lab

LAB = """
lab = (
    [{hosts}],
    {{"lab_name": "{name}", "lab_subnet": "{subnet}", "lab_bridge": "{name}br0",
      "lab_pool": "{name}", "lab_profile": "{name}", "lab_memory": "1GiB"{extra}}},
)
"""


def inventory(tmp_path, name: str, subnet: str, hosts: list[str], backend: str = "lxd"):
    """A lab inventory; ``backend`` incus: hosts @incus/NAME and lab_backend = 'incus' (lxd: neither set, the default
    inventory's way)."""
    path = tmp_path / f"{name}.py"
    # the Incus leg on a copy-on-write pool: the image is unpacked once, not for each container (a third of its time)
    extra = ', "lab_backend": "incus", "lab_pool_driver": "auto"' if backend == "incus" else ""
    path.write_text(LAB.format(name=name, subnet=subnet, extra=extra,
                               hosts=", ".join(f'"@{backend}/{h}"' for h in hosts)))
    return path


def lw(cli_env, *args):
    return subprocess.run(["labwright", *args], capture_output=True, text=True, env=cli_env, timeout=600)


def the_error(stderr: str) -> str:
    """The one error line, which must also be the last thing printed."""
    errors = [line for line in stderr.splitlines() if line.startswith("labwright: error: ")]
    assert len(errors) == 1 and stderr.splitlines()[-1] == errors[0], stderr
    return errors[0]


def exists(client: LxdClient, path: str) -> bool:
    return client.get_or_none(path) is not None


def test_up_twice_changes_nothing_and_down_removes_only_what_up_made(backend_lab, cli_env, tmp_path):
    lab = backend_lab
    client = lab.client
    # each daemon its own names and subnet (labwright.lab.backend.check_apart refuses the other's)
    name, net = ("lwup", "10.99.8") if lab.backend == "lxd" else ("lwupi", "10.99.67")
    inv = inventory(tmp_path, name, f"{net}.1/24", [f"{name}-c1", f"{name}-c2"], lab.backend)
    lab_container = lab.fresh("lwt")
    try:
        first = lw(cli_env, "lab", "up", "-i", str(inv), "--json")
        assert first.returncode == 0, first.stderr
        assert_documented("lab up", json.loads(first.stdout))
        changes = " | ".join(json.loads(first.stdout)["changes"])
        assert f"container {name}-c1 launched" in changes and f"network {name}br0" in changes, changes

        status = lw(cli_env, "lab", "status", "-i", str(inv), "--json")
        rows = {row["name"]: row for row in json.loads(status.stdout)}
        assert set(rows) == {f"{name}-c1", f"{name}-c2"}
        assert all(r["state"] == "Running" and r["address"].startswith(f"{net}.") for r in rows.values())
        assert {r["server"] for r in rows.values()} == {lab.backend}  # GET /1.0 of the daemon the lab is on
        table = lw(cli_env, "lab", "status", "-i", str(inv))
        for column in ("container", "state", "address", "image", "age", f"{lab.backend} "):
            assert column in table.stdout
        # The containers are reachable on the bridge and the lab key is installed.
        keys = client.exec(f"{name}-c1", ["cat", "/root/.ssh/authorized_keys"]).stdout.decode()
        assert lab.public_key in keys

        second = lw(cli_env, "lab", "up", "-i", str(inv))
        assert second.returncode == 0, second.stderr
        assert "nothing changed" in second.stderr
        assert "+ " not in second.stderr
        assert f"{'LXD' if lab.backend == 'lxd' else 'Incus'} daemon running" in second.stderr

        # A stopped container is started again, and only that is reported.
        client.set_state(f"{name}-c2", "stop", force=True)
        third = lw(cli_env, "lab", "up", "-i", str(inv))
        assert f"container {name}-c2 started" in third.stderr and f"{name}-c1" not in third.stderr

        plan = lw(cli_env, "lab", "down", "-i", str(inv), "--dry")
        assert plan.returncode == 0 and f"would delete container {name}-c1" in plan.stderr
        planned = lw(cli_env, "lab", "down", "-i", str(inv), "--dry", "--json")
        assert planned.returncode == 0, planned.stderr
        assert_documented("lab down", json.loads(planned.stdout))
        assert json.loads(planned.stdout)["dry"] is True
        assert exists(client, f"/1.0/instances/{name}-c1")
    finally:
        down = lw(cli_env, "lab", "down", "-i", str(inv), "--yes")
    try:
        assert down.returncode == 0, down.stderr
        for path in (f"/1.0/instances/{name}-c1", f"/1.0/instances/{name}-c2", f"/1.0/networks/{name}br0",
                     f"/1.0/storage-pools/{name}", f"/1.0/profiles/{name}"):
            assert not exists(client, path), path
        # Another lab's container (and its network) are untouched.
        assert client.instance(lab_container)["status"] == "Running"
        assert exists(client, f"/1.0/networks/{lab.spec.bridge}")
    finally:
        lab.remove(lab_container)
    again = lw(cli_env, "lab", "down", "-i", str(inv), "--yes")
    assert again.returncode == 0 and "already down" in again.stderr


def test_up_refuses_a_container_name_labwright_did_not_make(lab, lab_container, cli_env, tmp_path):
    inv = inventory(tmp_path, "lwfor", "10.99.7.1/24", [lab_container])
    proc = lw(cli_env, "lab", "up", "-i", str(inv))
    assert proc.returncode == 2
    assert f"container '{lab_container}' exists and was not made by labwright lab 'lwfor'" in the_error(proc.stderr)
    assert not exists(lab.client, "/1.0/networks/lwforbr0"), "nothing may be half-made"


def test_up_refuses_a_subnet_already_in_use(lab, cli_env, tmp_path):
    inv = inventory(tmp_path, "lwsub", "10.99.9.77/24", ["lwsub-c1"])  # the test lab's own subnet
    proc = lw(cli_env, "lab", "up", "-i", str(inv))
    assert proc.returncode == 2
    assert "lab_subnet 10.99.9.0/24 is already in use by lwtestbr0" in the_error(proc.stderr)
    for path in ("/1.0/networks/lwsubbr0", "/1.0/storage-pools/lwsub", "/1.0/profiles/lwsub",
                 "/1.0/instances/lwsub-c1"):
        assert not exists(lab.client, path), path


def test_up_refuses_an_lxd_network_labwright_did_not_make(lab, cli_env, tmp_path):
    client = lab.client
    client.request("POST", "/1.0/networks", {"name": "lwalienbr0", "type": "bridge",
                                            "config": {"ipv4.address": "10.99.6.1/24", "ipv6.address": "none"}})
    try:
        path = tmp_path / "alien.py"
        path.write_text('lab = (["@lxd/lwalien-c1"], {"lab_name": "lwalien", "lab_subnet": "10.99.5.1/24", '
                        '"lab_bridge": "lwalienbr0", "lab_pool": "lwalien", "lab_profile": "lwalien"})\n')
        proc = lw(cli_env, "lab", "up", "-i", str(path))
        assert proc.returncode == 2
        assert "network 'lwalienbr0' exists and was not made by labwright" in the_error(proc.stderr)
        assert not exists(client, "/1.0/storage-pools/lwalien")
    finally:
        client.request("DELETE", "/1.0/networks/lwalienbr0")


def test_status_without_permission_on_the_socket_is_one_line(lab, cli_env, repo, tmp_path):
    tmp_path.chmod(0o777)
    env = {**cli_env, "HOME": str(tmp_path)}
    proc = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                           "labwright", "lab", "status"], capture_output=True, text=True, env=env, cwd=repo)
    assert proc.returncode == 1
    assert "permission denied on /var/lib/lxd/unix.socket" in the_error(proc.stderr)
