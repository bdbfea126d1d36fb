"""The main job in ONE command: `pyinfra INVENTORY deploys/tabbyapi.py` on an inventory that declares a guest which does
not exist yet creates it and deploys into it in the same run; the second run changes nothing.

- LXD, for real: the inventory declares ``@lxd/NAME`` with a ``guest`` (a clone of the test lab's template, the
  stand-in wheelhouse and an empty model directory mounted from this machine, as a homelab mounts its model store)
  and tabbyAPI data (the stand-in tabbyAPI repository and stacks of support.tabbyapi_lab). The @lxd connector
  creates the container through the LXD API before connecting.
- Proxmox VE, against the PVE simulator (validated by the real API schema) and a pct double node: the inventory
  declares ``@pct/pve1/VMID``; the @pct connector finds no CT (``pct status`` on the node), creates it through the
  simulated API (real proxmoxer, verified TLS), and the CT's start is made real on the node by the simulator's
  ``on_boot`` hook (on a real node, pmxcfs and lxc-start do that). The pct double's CTs are chroots without
  systemd, so the deploy there is a small one (a file and a command), not tabbyAPI.
- ``--dry`` creates nothing and says what a real run would make; a declaration the backend refuses (a template
  that does not exist) fails before anything is made, naming the field.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from labwright.lab.lab import instance_address
from labwright.testing.lab_fixture import TEMPLATE, Lab
from labwright.testing.pyinfra_output import DeployRun, tool_env
from support.pve_simulator import PveSimulator
from support.stacks import StandinStacks, build_standin_stacks
from support.tabbyapi_lab import MODEL_NAME, PORT, SERVICE, WHEELHOUSE, RepoServer, bridge_address, lab_subnet
from support.tabbyapi_standin import STARTUP_LINE, build_standin_repo

pytest_plugins = ["labwright.testing.lab_fixture"]
pytestmark = [pytest.mark.lab, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
PYINFRA = str(Path(sys.executable).parent / "pyinfra")
PCT_DOUBLE = REPO / "tests" / "support" / "doubles" / "pct"
TOKEN_ID, TOKEN_SECRET = "root@pam!labwright", "0b6c3a52-1f3e-4a7e-9a55-3d1c2b7e9f10"


def pyinfra(inventory: Path, deploy: str, *extra: str, env: dict[str, str] | None = None,
            timeout: float = 900) -> DeployRun:
    started = time.monotonic()
    proc = subprocess.run([PYINFRA, "-y", "--json", str(inventory), deploy, *extra], cwd=REPO, capture_output=True,
                          text=True, env={**tool_env(), **(env or {})}, timeout=timeout)
    return DeployRun(proc.returncode, proc.stdout + proc.stderr, time.monotonic() - started)


def shared_dir(path: Path) -> Path:
    """A directory an unprivileged container can read through a disk device (world-readable, like a NAS share)."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o755)
    return path


# --- LXD: the real tabbyAPI deploy (stand-in engine) into a guest it creates ---------------------------------------
@pytest.fixture(scope="module")
def stacks(tmp_path_factory: pytest.TempPathFactory) -> StandinStacks:
    return build_standin_stacks(tmp_path_factory.mktemp("stacks"))


@pytest.fixture(scope="module")
def lxd_inventory(lab: Lab, stacks: StandinStacks, tmp_path_factory: pytest.TempPathFactory
                  ) -> Iterator[tuple[Path, str, dict[str, str]]]:
    name = f"lwmain-{os.urandom(3).hex()}"
    work = tmp_path_factory.mktemp("main-job")
    models = shared_dir(Path(f"/tmp/labwright-test-models-{name}"))
    shared_dir(models / MODEL_NAME)
    wheelhouse = shared_dir(Path(f"/tmp/labwright-test-wheelhouse-{name}"))
    for wheel in stacks.wheelhouse.glob("*.whl"):
        (wheelhouse / wheel.name).write_bytes(wheel.read_bytes())
        (wheelhouse / wheel.name).chmod(0o644)
    repo = build_standin_repo(work / "standin" / "tabbyAPI")
    try:
        with RepoServer(repo, bridge_address(lab_subnet())) as server:
            guest = {"backend": "lxd", "clone": TEMPLATE, "profiles": [lab.spec.profile], "memory": "1GiB",
                     "mounts": [{"host": str(wheelhouse), "guest": WHEELHOUSE, "readonly": True},
                                {"host": str(models), "guest": "/srv/models", "readonly": True}]}
            data = {"guest": guest, "stack": "standin-2.9", "tabbyapi_git_url": server.url,
                    "tabbyapi_ref": "config-era", "tabbyapi_model_dir": "/srv/models",
                    "tabbyapi_model_name": MODEL_NAME, "tabbyapi_cache_size": 4096, "tabbyapi_max_seq_len": 4096,
                    "tabbyapi_wheelhouse": WHEELHOUSE, "tabbyapi_health_timeout": 60, "tabbyapi_gpu": "off"}
            inventory = work / "lab.py"
            inventory.write_text(f"gpu_guests = [(\"@lxd/{name}\", {data!r})]\n")
            yield inventory, name, {"LABWRIGHT_MATRIX_DIR": str(stacks.matrix_dir)}
    finally:
        lab.remove(name)
        for path in (models, wheelhouse):
            subprocess.run(["rm", "-rf", str(path)], check=False)


def test_tabbyapi_deploy_creates_its_declared_lxd_guest_then_a_second_run_changes_nothing(lab, lxd_inventory):
    inventory, name, env = lxd_inventory
    assert lab.client.instance_or_none(name) is None

    dry = pyinfra(inventory, "deploys/tabbyapi.py", "--dry", env=env, timeout=300)
    assert dry.rc != 0 and "would be created" in dry.output and "run without --dry" in dry.output, dry.output[-3000:]
    assert lab.client.instance_or_none(name) is None, "--dry created the guest"

    first = pyinfra(inventory, "deploys/tabbyapi.py", env=env)
    assert first.rc == 0, first.output[-5000:]
    assert f"@lxd/{name}" in first.output and "create the declared guest (lxd)" in first.output
    info = lab.client.instance(name)
    assert info["status"] == "Running"
    assert info["expanded_devices"]["mount-srv-models"]["source"].endswith(name)
    address = instance_address(lab.client, name)
    assert address
    journal = lab.client.exec(name, ["journalctl", "-u", SERVICE, "-o", "cat", "--no-pager"]).stdout.decode()
    assert STARTUP_LINE in journal
    health = lab.client.exec(name, ["python3", "-c", "import urllib.request as u; print(u.urlopen("
                                    f"'http://127.0.0.1:{PORT}/health', timeout=5).status)"])
    assert health.stdout.decode().strip() == "200", health.stderr.decode()
    print(f"\none command, guest created + tabbyAPI deployed: {first.seconds:.1f}s")

    second = pyinfra(inventory, "deploys/tabbyapi.py", env=env)
    assert second.rc == 0, second.output[-5000:]
    assert "create the declared guest" not in second.output
    totals = second.totals
    assert totals.changed == 0 and totals.error == 0, second.output[-3000:]
    print(f"no-change re-run: {second.seconds:.1f}s")


# --- Proxmox VE: the simulator's API creates the CT, the pct double's node runs it ------------------------------
@pytest.fixture(scope="module")
def pct_node(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    container = lab.fresh("lwpve")
    try:
        lab.client.push_file(container, "/usr/local/sbin/pct", PCT_DOUBLE.read_bytes(), mode=0o755)
        address = instance_address(lab.client, container)
        assert address, f"{container} has no address"
        host_key = lab.client.exec(container, ["cat", "/etc/ssh/ssh_host_ed25519_key.pub"]).stdout.decode().split()
        known_hosts = tmp_path_factory.mktemp("pve") / "known_hosts"
        known_hosts.write_text(f"{address} {host_key[0]} {host_key[1]}\n")
        yield {"container": container, "pct_ssh_hostname": address, "pct_ssh_key": lab.private_key_path,
               "pct_ssh_known_hosts_file": str(known_hosts)}
    finally:
        lab.remove(container)


@pytest.fixture
def simulator(lab: Lab, pct_node: dict[str, object]) -> Iterator[PveSimulator]:
    container = str(pct_node["container"])

    def on_boot(node: str, vmid: int, config: object) -> None:
        hostname = getattr(config, "options", {}).get("hostname", f"CT{vmid}")
        script = (f"if pct status {vmid} >/dev/null 2>&1; then pct start {vmid}; "
                  f"else pct create {vmid} --hostname {hostname} --start 1; fi")
        result = lab.client.exec(container, ["sh", "-c", script])
        if result.exit_code != 0:
            raise RuntimeError(result.stderr.decode().strip())

    with PveSimulator(tokens={TOKEN_ID: TOKEN_SECRET}, task_seconds=0.01, on_boot=on_boot) as sim:
        yield sim


def pve_inventory(path: Path, sim: PveSimulator, node: dict[str, object], vmid: int, **guest: object) -> Path:
    declared = {"backend": "proxmox", "node": "pve1", "vmid": vmid, "hostname": f"llm{vmid}",
                "template": sim.template, "rootfs": "local-lvm:8", "memory": 1024, "cores": 2, "unprivileged": True,
                "gpu": "none", **guest}
    data = {key: value for key, value in node.items() if key != "container"}
    data.update({"proxmox_api_url": f"https://{sim.host}", "proxmox_ca_file": str(sim.ca_file), "guest": declared})
    path.write_text(f"gpu_guests = [(\"@pct/pve1/{vmid}\", {data!r})]\n")
    return path


SMALL_DEPLOY = textwrap.dedent("""
    from io import StringIO

    from pyinfra.operations import files

    files.put(name="Marker file", src=StringIO("made by the main job\\n"), dest="/root/labwright-marker", mode="644")
    """)


def test_pct_connector_creates_its_declared_guest_through_the_api_then_a_second_run_changes_nothing(
        lab, pct_node, simulator, tmp_path):
    vmid = 150
    deploy = tmp_path / "small.py"
    deploy.write_text(SMALL_DEPLOY)
    inventory = pve_inventory(tmp_path / "pve.py", simulator, pct_node, vmid)
    env = {"PROXMOX_TOKEN_ID": TOKEN_ID, "PROXMOX_TOKEN_SECRET": TOKEN_SECRET}
    container = str(pct_node["container"])

    dry = pyinfra(inventory, str(deploy), "--dry", env=env, timeout=300)
    assert dry.rc != 0 and "would be created" in dry.output, dry.output[-3000:]
    assert not simulator.writes and not simulator.conf_path("pve1", vmid).exists()

    first = pyinfra(inventory, str(deploy), env=env, timeout=300)
    assert first.rc == 0, first.output[-4000:]
    assert "create the declared guest (proxmox)" in first.output
    assert simulator.is_running(vmid)
    assert simulator.config("pve1", vmid).options["hostname"] == f"llm{vmid}"
    created = [r for r in simulator.writes if r.method == "POST" and r.path == "/nodes/pve1/lxc"]
    assert len(created) == 1 and created[0].status == 200, simulator.writes
    marker = lab.client.exec(container, ["cat", f"/var/lib/pct-double/{vmid}/rootfs/root/labwright-marker"])
    assert marker.stdout.decode() == "made by the main job\n", marker.stderr.decode()
    assert first.totals.changed >= 1, first.output[-3000:]

    writes = len(simulator.writes)
    second = pyinfra(inventory, str(deploy), env=env, timeout=300)
    assert second.rc == 0, second.output[-4000:]
    assert "create the declared guest" not in second.output
    assert second.totals.changed == 0, second.output[-3000:]
    assert len(simulator.writes) == writes, "the second run wrote to the Proxmox API"


def test_pct_declared_guest_with_an_unknown_template_fails_before_anything_is_made(
        lab, pct_node, simulator, tmp_path):
    vmid = 151
    deploy = tmp_path / "small.py"
    deploy.write_text(SMALL_DEPLOY)
    inventory = pve_inventory(tmp_path / "pve.py", simulator, pct_node, vmid,
                              template="local:vztmpl/no-such-template_1.0_amd64.tar.zst")
    env = {"PROXMOX_TOKEN_ID": TOKEN_ID, "PROXMOX_TOKEN_SECRET": TOKEN_SECRET}
    run = pyinfra(inventory, str(deploy), env=env, timeout=300)
    assert run.rc != 0
    lines = [line for line in run.output.splitlines() if "no-such-template" in line]
    assert lines and "template" in lines[0], run.output[-3000:]
    assert not simulator.writes, simulator.writes
    assert lab.client.exec(str(pct_node["container"]), ["pct", "status", str(vmid)]).exit_code != 0
