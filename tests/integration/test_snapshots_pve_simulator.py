"""Guest snapshots on Proxmox VE through the API, against the PVE simulator (real proxmoxer, verified HTTPS on
127.0.0.1). The simulator keeps snapshots as PVE does, in the container's config file; a snapshot holds the
config, so here "breaking" a guest is changing its config, and restoring must put that config back. Every test
asserts on what the simulator stored or recorded (``sim.writes``), nothing is mocked between.
"""

from __future__ import annotations

import subprocess

import pytest
from proxmoxer import ProxmoxAPI, ResourceException

from labwright import snapshots
from labwright.errors import BadInput, OperationFailed
from labwright.guests.proxmox_api import TaskWaiter
from support.pve_simulator import PveSimulator, SimNode, SimStorage, default_storages
from support.pve_snapshot import sections
from support.snapshot_cli import assert_one_line_refusal, run_cli

GUEST = "@pct/pve1/201"


@pytest.fixture
def sim():
    storages = [*default_storages(), SimStorage("dirstore", "dir", ("rootdir", "images")),
                SimStorage("tank", "zfspool", ("rootdir", "images"))]
    with PveSimulator(nodes=[SimNode("pve1", "8.2.4")], storages=storages, task_seconds=0.01) as simulator:
        yield simulator


@pytest.fixture
def root_env(monkeypatch, sim):
    monkeypatch.delenv("PROXMOX_TOKEN_ID", raising=False)
    monkeypatch.setenv("PROXMOX_USER", "root@pam")
    monkeypatch.setenv("PROXMOX_PASSWORD", sim.root_password)


@pytest.fixture
def api(sim) -> ProxmoxAPI:
    return ProxmoxAPI(sim.host, user="root@pam", password=sim.root_password, verify_ssl=str(sim.ca_file))


def node_data(sim) -> dict[str, str]:
    return {"proxmox_api_url": f"https://{sim.host}", "proxmox_ca_file": str(sim.ca_file)}


def options(sim) -> dict:
    return {"node_data": node_data(sim), "poll_interval": 0.01}


def wait(api, upid: str) -> dict:
    return TaskWaiter(api, timeout=30, interval=0.01).wait(upid, "test task")


def make_ct(api, vmid: int = 201, rootfs: str = "local-lvm:8", start: bool = True) -> None:
    wait(api, api.nodes("pve1").lxc.post(vmid=vmid, ostemplate="local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst",
                                         rootfs=rootfs, hostname="llm1", memory=2048))
    if start:
        wait(api, api.nodes("pve1").lxc(vmid).status.start.post())


def cli(sim, *args: str) -> subprocess.CompletedProcess[str]:
    data = [f"--data={k}={v}" for k, v in node_data(sim).items()]
    env = {"PATH": "/usr/bin:/bin", "PROXMOX_USER": "root@pam", "PROXMOX_PASSWORD": sim.root_password}
    return run_cli(env, *args, *data, timeout=300)


def test_take_break_restore_running_ct(sim, api, root_env):
    make_ct(api)
    taken = snapshots.take(GUEST, "stack-switch", **options(sim))
    assert taken.storage == "local-lvm (lvmthin)" and taken.how == "native (LVM-thin)"
    conf = sim.config("pve1", 201)
    assert conf.options["parent"] == taken.name and "lock" not in conf.options
    assert sections(conf)[taken.name].options["memory"] == "2048"
    api.nodes("pve1").lxc(201).config.put(memory=8192, hostname="broken")
    assert sim.config("pve1", 201).effective()["hostname"] == "broken"
    before = len(sim.writes)

    done = snapshots.restore(GUEST, force=True, **options(sim))

    assert done.steps == ["stop", "restore", "start"]
    sent = [(r.method, r.path) for r in sim.writes[before:]]
    assert sent == [("POST", "/nodes/pve1/lxc/201/status/stop"),
                    ("POST", f"/nodes/pve1/lxc/201/snapshot/{taken.name}/rollback"),
                    ("POST", "/nodes/pve1/lxc/201/status/start")]
    restored = sim.config("pve1", 201).effective()
    assert restored["hostname"] == "llm1" and restored["memory"] == "2048" and restored["parent"] == taken.name
    assert sim.is_running(201)


def test_running_ct_without_force_refused_no_write(sim, api):
    make_ct(api)
    made = cli(sim, "guest", "snapshot", GUEST, "--json")
    assert made.returncode == 0, made.stderr
    before = len(sim.writes)

    result = cli(sim, "guest", "restore", GUEST, "-y")

    assert_one_line_refusal(result, GUEST, "is running", "--force")
    assert sim.writes[before:] == [] and sim.is_running(201)


def test_keep_last_n_and_existing_name(sim, api, root_env):
    make_ct(api, start=False)
    assert cli(sim, "guest", "snapshot", GUEST, "--name", "mine").returncode == 0
    taken = [snapshots.take(GUEST, "pkg-upgrade", keep=2, **options(sim)) for _ in range(3)]
    assert taken[2].pruned == [taken[0].name]
    assert sorted(sections(sim.config("pve1", 201))) == sorted(["mine", taken[1].name, taken[2].name])
    listed = [s.name for s in snapshots.list_snapshots(GUEST, **options(sim))]
    assert listed[-2:] == [taken[1].name, taken[2].name] and "mine" in listed
    before = len(sim.writes)

    again = cli(sim, "guest", "snapshot", GUEST, "--name", "mine")
    assert_one_line_refusal(again, "'mine'", "exists already", "pct delsnapshot 201 mine")
    reserved = cli(sim, "guest", "snapshot", GUEST, "--name", "current")
    assert_one_line_refusal(reserved, "'current'", "reserved")
    assert sim.writes[before:] == []

    # a stopped CT: restored and left stopped; the user's snapshot by name
    api.nodes("pve1").lxc(201).config.put(memory=4096)
    done = snapshots.restore(GUEST, "mine", **options(sim))
    assert done.steps == ["restore"] and not sim.is_running(201)
    assert sim.config("pve1", 201).effective()["memory"] == "2048"


def test_storage_without_snapshots_is_said_and_nothing_sent(sim, api, root_env):
    make_ct(api, rootfs="dirstore:4", start=False)
    before = len(sim.writes)
    with pytest.raises(OperationFailed, match=r"snapshots are not possible here: rootfs is on storage dirstore of "
                                              r"type dir, which cannot snapshot container volumes"):
        snapshots.take(GUEST, "stack-switch", **options(sim))
    assert sim.writes[before:] == []
    assert snapshots.before(GUEST, "stack-switch", required=False, **options(sim)) is None
    # the simulator refuses it too, in the task, as PVE does
    with pytest.raises(OperationFailed, match="snapshot feature is not available"):
        wait(api, api.nodes("pve1").lxc(201).snapshot.post(snapname="direct"))


def test_missing_ct_is_bad_input(sim, root_env):
    with pytest.raises(BadInput, match=r"@pct/pve1/999: no container 999 on pve1"):
        snapshots.list_snapshots("@pct/pve1/999", **options(sim))


def test_simulator_snapshot_rules(sim, api):
    make_ct(api, vmid=301, rootfs="tank:4")
    ct = api.nodes("pve1").lxc(301)
    with pytest.raises(ResourceException, match="unable to use snapshot name 'current' \\(reserved name\\)"):
        ct.snapshot.post(snapname="current")
    wait(api, ct.snapshot.post(snapname="one", description="first"))
    wait(api, ct.snapshot.post(snapname="two"))
    with pytest.raises(OperationFailed, match="snapshot name 'one' already used"):
        wait(api, ct.snapshot.post(snapname="one"))
    rows = {r["name"]: r for r in ct.snapshot.get()}
    assert rows["two"]["parent"] == "one" and rows["current"]["parent"] == "two"
    # the description is kept as "#" lines in the section and read back a newline per line, as PVE does
    assert rows["current"]["running"] == 1 and rows["one"]["description"] == "first\n"
    # ZFS rolls back only to the most recent snapshot
    with pytest.raises(OperationFailed, match="can't rollback, 'one' is not most recent snapshot on "
                                              "'subvol-301-disk-0'"):
        wait(api, ct.snapshot("one").rollback.post())
    wait(api, ct.snapshot("two").delete())
    rows = {r["name"]: r for r in ct.snapshot.get()}
    assert set(rows) == {"one", "current"} and rows["current"]["parent"] == "one"
    wait(api, ct.snapshot("one").rollback.post(start=1))
    assert sim.is_running(301)
    with pytest.raises(OperationFailed, match="snapshot 'nope' does not exist"):
        wait(api, ct.snapshot("nope").delete())
