"""Guest snapshots on Proxmox VE through the API, against the PVE simulator (real proxmoxer, verified HTTPS on
127.0.0.1). The simulator keeps snapshots as PVE does, in the container's config file; a snapshot holds the
config, so here "breaking" a guest is changing its config, and restoring must put that config back. Every test
asserts on what the simulator stored or recorded (``sim.writes``), nothing is mocked between.
"""

from __future__ import annotations

import pytest
from proxmoxer import ResourceException

from labwright import snapshots
from labwright.errors import BadInput, OperationFailed
from support import pve_snapshot_sim as shared
from support.pve_snapshot import sections
from support.pve_snapshot_sim import cli, create, mine_and_three_keeping_two, options, wait
from support.snapshot_cli import assert_one_line_refusal

GUEST = "@pct/pve1/201"
#: The simulator, root's environment and a client: one set of fixtures for the container and the VM tests.
sim, root_env, api = shared.sim, shared.root_env, shared.api


def make_ct(api, vmid: int = 201, rootfs: str = "local-lvm:8", start: bool = True) -> None:
    create(api, "lxc", vmid, start, ostemplate="local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst",
           rootfs=rootfs, hostname="llm1", memory=2048)


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
    taken = mine_and_three_keeping_two(sim, GUEST, "pkg-upgrade", lambda: sim.config("pve1", 201))
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
    skipped = snapshots.before(GUEST, "stack-switch", required=False, **options(sim))
    assert skipped.name is None and "its storage cannot snapshot (rootfs is on storage dirstore" in skipped.skipped
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


def test_an_incomplete_snapshot_is_passed_over_and_refused_before_the_guest_is_stopped(sim, api, root_env):
    """A snapshot task that died leaves its snapshot with ``snapstate: prepare`` (pve-guest-common
    src/PVE/AbstractConfig.pm snapshot_create: the state is set before the volumes are snapshotted and dropped by
    __snapshot_commit); the list shows it (pve-container src/PVE/API2/LXC/Snapshot.pm snapshot_list:
    ``$item->{snapstate} = $d->{snapstate} if $d->{snapstate}``) and PVE refuses to roll back to it
    (AbstractConfig.pm snapshot_rollback: "unable to rollback to incomplete snapshot (snapstate = ...)")."""
    make_ct(api)
    good = snapshots.take(GUEST, "packages", **options(sim))
    sim.fail_next_task("received interrupt", task_type="vzsnapshot")
    with pytest.raises(OperationFailed):
        snapshots.take(GUEST, "stack-switch", **options(sim))
    conf = sim.config("pve1", 201)
    incomplete = next(name for name, snap in sections(conf).items() if snap.options.get("snapstate") == "prepare")
    del conf.options["lock"]  # `pct unlock 201` on the node
    sim.cluster.save("pve1", 201, conf)
    listed = {s.name: s for s in snapshots.list_snapshots(GUEST, **options(sim))}
    assert listed[incomplete].incomplete == "prepare" and listed[good.name].incomplete == ""
    before = len(sim.writes)

    refused = cli(sim, "guest", "restore", GUEST, incomplete, "--force", "-y")
    assert_one_line_refusal(refused, GUEST, f"snapshot {incomplete} is incomplete (snapstate = prepare",
                            "pct delsnapshot 201")
    assert sim.writes[before:] == [] and sim.is_running(201)  # refused before the stop, as nothing else would be

    done = snapshots.restore(GUEST, force=True, **options(sim))
    assert done.name == good.name
    assert any(f"passed over {incomplete}, newer but incomplete" in n for n in done.notes)
    assert sim.is_running(201)
