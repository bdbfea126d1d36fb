"""`labwright host upgrade NODE -i INVENTORY` for a Proxmox VE node, against the PVE simulator (real proxmoxer,
verified HTTPS on 127.0.0.1).

The node's side is a fake NVIDIA host tree (support.fake_nvidia: /proc, mknod'ed /dev/nvidia*, kernels, DKMS's
tree, the host's userspace, a repository of stand-in installers) whose ``etc/pve`` is the simulator's pmxcfs, so
the raw lines the runbook rewrites land in the file the simulated API reads. The host's driver install and reboot
are simulated on the tree (support.sim_host; the reboot moves nvidia-uvm 509 -> 237); the
containers, their snapshots (``POST /nodes/pve1/lxc/VMID/snapshot``), restarts and rollbacks are the simulator's,
and each container is also a chroot of the pct double joined to the simulator (support.pve_pct_node): the runbook
finds ``pct`` on the node's PATH, pushes the installer into each container and runs it and ``gpu check`` there with
``pct exec``; each start gives a container a /dev made from its config and the host's nodes of that moment; a
rollback puts the container's files back.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from proxmoxer import ProxmoxAPI

from labwright.cli import main, register
from labwright.gpu.nvidia.host import GpuHost
from support.fake_nvidia import DRIVER_VERSION, make_container_libraries, make_fake_nvidia_host, make_upgrade_host
from support.guest_lock import holding
from support.host_cli import on_tree, resume_command
from support.host_tree import TreeHost
from support.pve_pct_node import PctNode
from support.pve_simulator import PveSimulator, SimNode, SimStorage, default_storages, host_devices

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the fake NVIDIA host tree needs mknod (root)")

TOKEN_ID, TOKEN_SECRET = "root@pam!labwright", "0b6f1c9e-2d4a-4f7e-9a3b-5c8d7e6f1a2b"
NEW = "550.54.15"
OLD_KERNEL, NEW_KERNEL = "6.8.12-4-pve", "6.8.12-9-pve"
DEV_NODES = ["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
RAW_LINES = ["lxc.cgroup2.devices.allow: c 195:* rwm", "lxc.cgroup2.devices.allow: c 509:* rwm",
             "lxc.cgroup2.devices.allow: c 511:* rwm"] + [
    f"lxc.mount.entry: {p} {p.lstrip('/')} none bind,optional,create=file" for p in DEV_NODES]


#: What the repository's installer for NEW really installs: itself, unless a test gives it a mislabelled one.
INSTALLS: dict[str, str] = {}


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    tree = make_fake_nvidia_host(tmp_path / "pve1", uvm_major=509, caps_major=511, extra_files=False)
    made = make_upgrade_host(tree, OLD_KERNEL, NEW_KERNEL, built={OLD_KERNEL: [DRIVER_VERSION],
                                                                  NEW_KERNEL: [DRIVER_VERSION, NEW]},
                             repository=(NEW,), hostname="pve1", uvm_major_after_reboot=237, host_userspace=True,
                             installers=INSTALLS)
    with on_tree(made):  # the node `host upgrade` acts on (support.host_cli)
        yield made


@pytest.fixture
def sim(root: Path, tmp_path: Path, monkeypatch):
    storages = [*default_storages(), SimStorage("plain", "dir", ("rootdir", "images"))]
    with PveSimulator(nodes=[SimNode("pve1", "8.2.4", devices=host_devices(root))], storages=storages,
                      tokens={TOKEN_ID: TOKEN_SECRET}, task_seconds=0.01) as simulator:
        (root / "etc/pve").symlink_to(simulator.pmxcfs)  # /etc/pve on the node is pmxcfs
        node = PctNode(tmp_path / "pct", simulator, root)
        for key, value in node.env.items():  # the runbook runs on the node: its pct is the double
            monkeypatch.setenv(key, value)
        simulator.pct_node = node
        yield simulator


def ct_userspace(sim, vmid: int) -> list[str]:
    """The NVIDIA library files in the container's tree (its rootfs in the pct double)."""
    libdir = sim.pct_node.rootfs(vmid) / "usr/lib/x86_64-linux-gnu"
    return sorted(p.name for p in libdir.glob("lib*.so.*") if p.name.startswith(("libcuda.so.", "libnvidia-ml.so."))
                  and not p.name.endswith(".1"))


def old_userspace() -> list[str]:
    return [f"libcuda.so.{DRIVER_VERSION}", f"libnvidia-ml.so.{DRIVER_VERSION}"]


def new_userspace() -> list[str]:
    return [f"libcuda.so.{NEW}", f"libnvidia-ml.so.{NEW}"]


def host_userspace(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "usr/lib/x86_64-linux-gnu").glob("lib*.so.*") if not p.name.endswith(".1"))


@pytest.fixture
def inventory(tmp_path: Path, sim, monkeypatch) -> Path:
    monkeypatch.delenv("PROXMOX_USER", raising=False)
    monkeypatch.setenv("PROXMOX_TOKEN_ID", TOKEN_ID)
    monkeypatch.setenv("PROXMOX_TOKEN_SECRET", TOKEN_SECRET)
    path = tmp_path / "lab.py"
    path.write_text(f"pve_nodes = ([('pve1', {{'proxmox_api_url': 'https://{sim.host}', "
                    f"'proxmox_ca_file': {str(sim.ca_file)!r}}})], {{}})\n")
    return path


def as_root(sim) -> ProxmoxAPI:
    """devN is root@pam's (a password login): the setup creates the containers that way."""
    return ProxmoxAPI(sim.host, user="root@pam", password=sim.root_password, verify_ssl=str(sim.ca_file))


def wait(api: ProxmoxAPI, upid: str) -> None:
    from labwright.guests.proxmox_api import TaskWaiter

    TaskWaiter(api, timeout=60, interval=0.01).wait(upid, "setup task")


def container(sim, vmid: int, rootfs: str = "local-lvm:8", dev: bool = False, raw: bool = False,
              start: bool = True, userspace: str | None = DRIVER_VERSION) -> None:
    """A GPU container as the guides make it; a started one gets ``userspace`` installed in its tree (the host's
    version by default)."""
    api = as_root(sim)
    devs = {f"dev{i}": f"{p},gid=44,mode=0666" for i, p in enumerate(DEV_NODES)} if dev else {}
    wait(api, api.nodes("pve1").lxc.post(vmid=vmid, ostemplate=sim.template, rootfs=rootfs, hostname=f"ct{vmid}",
                                         **devs))
    if raw:  # what most guides paste into the config file
        path = sim.conf_path("pve1", vmid)
        path.write_text(path.read_text() + "\n".join(RAW_LINES) + "\n")
    if start:
        wait(api, api.nodes("pve1").lxc(vmid).status.start.post())
        if userspace:
            make_container_libraries(sim.pct_node.rootfs(vmid), userspace)


def host(capsys, *args: str) -> tuple[int, str, str]:
    register(["host"])
    code = main(["host", "upgrade", *args])
    out, err = capsys.readouterr()
    return code, out, err


def allow_majors(sim, vmid: int) -> list[str]:
    return [v for k, v in sim.config("pve1", vmid).lxc if k == "lxc.cgroup2.devices.allow"]


def test_dry_plan_lists_the_gpu_containers_and_their_wiring(sim, root, inventory, capsys):
    container(sim, 201, dev=True)
    container(sim, 202, raw=True, userspace="535.183.01")  # mismatched already: read with pct exec, said
    container(sim, 203, start=False)  # no GPU: not listed
    before = len(sim.writes)
    code, _, err = host(capsys, "pve1", "-i", str(inventory))
    assert code == 2 and err.count("\n") == 1 and "guest @pct/pve1/202 runs userspace 535.183.01" in err, err
    assert len(sim.writes) == before
    code, out, err = host(capsys, "pve1", "-i", str(inventory), "--fix-mismatched", "--json")
    plan = json.loads(out)
    assert code == 0 and plan["dry"] and plan["to"] == NEW and plan["boot_kernel"] == NEW_KERNEL, (out, err)
    steps = [(s["action"], s["target"]) for s in plan["steps"]]
    assert steps[:4] == [("list", "@pct/pve1/201, @pct/pve1/202"), ("kernel", NEW_KERNEL),
                         ("snapshot", "@pct/pve1/201"), ("snapshot", "@pct/pve1/202")]
    userspace = {s["target"]: s["detail"] for s in plan["steps"] if s["action"] == "userspace"}
    assert set(userspace) == {"@pct/pve1/201", "@pct/pve1/202"}
    assert "run with pct exec 202 -- ... --no-kernel-module" in userspace["@pct/pve1/202"]
    listed = plan["steps"][0]["detail"]
    assert "@pct/pve1/201 ct201 (running; devN: 4 node(s))" in listed
    assert "@pct/pve1/202 ct202 (running; raw lines: allow majors 195, 509, 511, 4 bind mount(s))" in listed
    majors = {s["target"]: s["detail"] for s in plan["steps"] if s["action"] == "majors"}
    assert majors["@pct/pve1/201"].startswith("devN entries: no rewrite")
    assert "509 (nvidia-uvm), 511 (nvidia-caps)" in majors["@pct/pve1/202"]
    assert err == (f"labwright: note: guest @pct/pve1/202 runs userspace 535.183.01 but the host module is "
                   f"{DRIVER_VERSION}: mismatched now; the upgrade installs {NEW} in it (--fix-mismatched)\n"), err
    assert len(sim.writes) == before  # the dry plan asked nothing that changes anything
    assert allow_majors(sim, 202) == ["c 195:* rwm", "c 509:* rwm", "c 511:* rwm"]


def test_yes_snapshots_every_gpu_container_and_rewrites_stale_raw_majors(sim, root, inventory, capsys):
    container(sim, 201, dev=True)
    container(sim, 202, raw=True)
    container(sim, 204, raw=True, start=False)
    code, out, err = host(capsys, "pve1", "-i", str(inventory), "--yes", "--json")
    result = json.loads(out)
    assert code == 0 and result["ok"], (out, err)
    snapshot_posts = [w.path for w in sim.writes if w.method == "POST" and w.path.endswith("/snapshot")]
    assert snapshot_posts == [f"/nodes/pve1/lxc/{v}/snapshot" for v in (201, 202, 204)]
    for vmid in (201, 202, 204):
        assert result["snapshots"][f"@pct/pve1/{vmid}"].startswith("labwright-host-upgrade-")
        conf = sim.config("pve1", vmid)
        assert conf.options["parent"] == result["snapshots"][f"@pct/pve1/{vmid}"]
    # The snapshots were taken before the host changed: the first write after them is the host's (no API call),
    # and every snapshot POST precedes every stop/start of the upgrade.
    first_power = next(i for i, w in enumerate(sim.writes) if w.path.endswith("/status/stop"))
    last_snapshot = max(i for i, w in enumerate(sim.writes) if w.path.endswith("/snapshot"))
    assert last_snapshot < first_power
    # nvidia-uvm moved 509 -> 237 at the reboot: the raw lines follow it, the caps major (unchanged) stays.
    assert GpuHost(TreeHost(root)).majors()["nvidia-uvm"] == 237 and GpuHost(TreeHost(root)).driver_version() == NEW
    for vmid in (202, 204):
        assert allow_majors(sim, vmid) == ["c 195:* rwm", "c 237:* rwm", "c 511:* rwm"]
    # The snapshot section keeps the lines the container had when it was taken.
    assert "lxc.cgroup2.devices.allow: c 509:* rwm" in sim.conf_path("pve1", 202).read_text().split("[", 1)[1]
    # devN entries are not rewritten: PVE reads the node's major at start.
    assert sim.config("pve1", 201).options["dev2"] == "/dev/nvidia-uvm,gid=44,mode=0666"
    assert sim.is_running(201) and sim.is_running(202) and not sim.is_running(204)
    majors = {d["target"]: d["detail"] for d in result["done"] if d["action"] == "majors"}
    assert "c 509:* -> c 237:*" in majors["@pct/pve1/202"] and "c 511" not in majors["@pct/pve1/202"]
    assert all(d["ok"] for d in result["done"] if d["action"] == "check")
    assert "-u -c 0" in (root / "etc/systemd/system/labwright-nvidia-uvm.service").read_text()
    # The exact userspace went into every container through pct push + pct exec, the stopped one included (started
    # for it, stopped again), and gpu check ran inside each through pct exec.
    for vmid in (201, 202, 204):
        assert ct_userspace(sim, vmid) == new_userspace(), vmid
    checks = {d["target"]: d["detail"] for d in result["done"] if d["action"] == "check"}
    assert checks["@pct/pve1/201"].startswith("running, gpu check: 3 checks passed")
    assert checks["@pct/pve1/204"].startswith("stopped again, gpu check: 3 checks passed while it was started")
    installs = {d["target"]: d["detail"] for d in result["done"] if d["action"] == "userspace"}
    assert installs["@pct/pve1/204"].endswith("started for it and stopped again")
    # the container's /dev is the host's after the reboot: nvidia-uvm 237:0, made at its restart
    uvm = (sim.pct_node.rootfs(202) / "dev/nvidia-uvm").stat().st_rdev
    assert (os.major(uvm), os.minor(uvm)) == (237, 0)
    assert host_userspace(root) == new_userspace()


def test_a_container_another_labwright_run_holds_is_refused_before_anything_changes(sim, root, inventory, capsys):
    # A deploy or stack switch still running in a GPU container (its run lock in the CT's /run/lock, taken through
    # pct exec): the upgrade refuses naming it before any snapshot or host change, and goes ahead once it is gone.
    container(sim, 201, dev=True)
    container(sim, 202, raw=True)
    with holding("@pct/pve1/202") as holder:
        code, out, err = host(capsys, "pve1", "-i", str(inventory), "--yes",
                              "--lock-wait", "0", "--json")
        result = json.loads(out)
        assert code == 1 and not result["ok"], (out, err)
        assert "@pct/pve1/202: another labwright run holds this guest" in result["message"], result["message"]
        assert f"pid {holder.pid}" in result["message"] and "nothing was upgraded" in result["message"]
        assert not [w for w in sim.writes if w.path.endswith("/snapshot")]
        assert GpuHost(TreeHost(root)).driver_version() == DRIVER_VERSION and host_userspace(root) == old_userspace()
        assert ct_userspace(sim, 202) == old_userspace()
        # 201's lock, taken before 202 was found busy, was given back
        assert not (sim.pct_node.rootfs(201) / "run/lock/labwright.lock").exists()
    code, out, err = host(capsys, "pve1", "-i", str(inventory), "--yes",
                          "--lock-wait", "0", "--json")
    assert code == 0 and json.loads(out)["ok"], (out, err)
    assert "@pct/pve1/202: released a stale run lock" in err  # the killed holder's, on this node (its pid is gone)
    assert GpuHost(TreeHost(root)).driver_version() == NEW and ct_userspace(sim, 202) == new_userspace()
    for vmid in (201, 202):  # released at the end
        assert not (sim.pct_node.rootfs(vmid) / "run/lock/labwright.lock").exists()


def test_a_failure_after_the_snapshots_restores_them(sim, root, inventory, capsys):
    container(sim, 201, dev=True)
    container(sim, 202, raw=True)
    # The first container's start after the upgrade fails inside PVE's task (as a missing device would).
    sim.fail_next_task("startup for container '201' failed", "vzstart")
    code, out, err = host(capsys, "pve1", "-i", str(inventory), "--yes", "--json")
    result = json.loads(out)
    assert code == 1 and not result["ok"]
    assert len(err.strip().splitlines()) == 1 and "@pct/pve1/201: starting failed" in err, err
    assert sorted(result["restored"]) == ["@pct/pve1/201", "@pct/pve1/202"]
    rollbacks = [w.path for w in sim.writes if w.path.endswith("/rollback")]
    assert rollbacks == [f"/nodes/pve1/lxc/{v}/snapshot/{result['snapshots'][f'@pct/pve1/{v}']}/rollback"
                         for v in (201, 202)]
    # 202's majors had been rewritten before 201 failed to start: the rollback put its old lines back.
    assert allow_majors(sim, 202) == ["c 195:* rwm", "c 509:* rwm", "c 511:* rwm"]
    assert sim.is_running(201) and sim.is_running(202)  # running before the upgrade: started again
    # 202 had its new userspace when 201 failed: the rollback put its files back with its config.
    assert ct_userspace(sim, 201) == old_userspace() and ct_userspace(sim, 202) == old_userspace()
    # and the host driver went back: the new version's files gone, the previous one's restored, said in the report
    assert host_userspace(root) == old_userspace()
    assert not (root / "var/lib/dkms/nvidia" / NEW / OLD_KERNEL).exists()
    assert any(line.startswith(f"host pve1: nvidia driver back to {DRIVER_VERSION}: {NEW}'s files and DKMS build "
                               "removed") for line in result["left"]), result["left"]
    assert result["message"].endswith(f"host driver back to {DRIVER_VERSION}")


def test_a_container_left_with_a_mismatched_userspace_fails_the_check_and_everything_goes_back(sim, root, inventory,
                                                                                              capsys):
    INSTALLS[NEW] = DRIVER_VERSION  # a mislabelled download: the NEW installer holds the old userspace
    try:
        make_upgrade_host(root, OLD_KERNEL, NEW_KERNEL, built={}, repository=(NEW,), hostname="pve1",
                          installers=INSTALLS)
    finally:
        INSTALLS.clear()
    container(sim, 201, dev=True)
    container(sim, 202, raw=True)
    code, out, err = host(capsys, "pve1", "-i", str(inventory), "--yes", "--json")
    result = json.loads(out)
    assert code == 1 and not result["ok"], (out, err)
    failed = next(d for d in result["done"] if not d["ok"])
    assert failed["action"] == "check" and failed["target"] == "@pct/pve1/201"
    assert (f"userspace == host module: driver mismatch: host module {NEW}, container has libcuda.so "
            f"{DRIVER_VERSION}") in failed["detail"]
    assert len(err.splitlines()) == 1 and err.startswith("labwright: host upgrade pve1: gpu check @pct/pve1/201 "
                                                         "failed after the upgrade: userspace == host module: ")
    assert err.rstrip().endswith(f"restored 2/2 guest snapshot(s); host driver back to {DRIVER_VERSION}")
    assert sorted(result["restored"]) == ["@pct/pve1/201", "@pct/pve1/202"]
    for vmid in (201, 202):
        assert sim.config("pve1", vmid).options["parent"] == result["snapshots"][f"@pct/pve1/{vmid}"]
        assert ct_userspace(sim, vmid) == old_userspace() and sim.is_running(vmid)
    assert allow_majors(sim, 202) == ["c 195:* rwm", "c 509:* rwm", "c 511:* rwm"]
    assert host_userspace(root) == old_userspace()
    assert any(line.startswith(f"host pve1: nvidia driver back to {DRIVER_VERSION}") for line in result["left"])


def test_storage_that_cannot_snapshot_stops_the_run_before_anything_changes(sim, root, inventory, capsys):
    container(sim, 201, dev=True)
    container(sim, 205, rootfs="plain:8", raw=True)
    before = len(sim.writes)
    code, out, err = host(capsys, "pve1", "-i", str(inventory), "--yes")
    assert code == 2 and out == "" and len(err.splitlines()) == 1, err
    assert err.startswith("labwright: error: guest @pct/pve1/205: its storage cannot take snapshots (rootfs is on "
                          "storage plain of type dir")
    assert len(sim.writes) == before
    assert GpuHost(TreeHost(root)).driver_version() == DRIVER_VERSION
    assert allow_majors(sim, 205) == ["c 195:* rwm", "c 509:* rwm", "c 511:* rwm"]


def test_a_node_not_in_the_inventory_is_one_line(sim, root, inventory, capsys):
    container(sim, 201, dev=True)
    before = len(sim.writes)
    code, out, err = host(capsys, "pve9", "-i", str(inventory), "--yes")
    assert code == 2 and out == ""
    assert err == (f"labwright: error: node 'pve9' is not in the inventory {inventory} (its nodes: pve1); give the "
                   "name of a Proxmox VE node from it\n")
    assert len(sim.writes) == before and GpuHost(TreeHost(root)).driver_version() == DRIVER_VERSION


def test_a_node_without_pct_is_refused_before_anything_changes(sim, root, inventory, capsys, monkeypatch):
    container(sim, 201, dev=True)
    monkeypatch.setenv("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")  # not a Proxmox VE node: no pct
    before = len(sim.writes)
    code, out, err = host(capsys, "pve1", "-i", str(inventory), "--yes")
    assert code == 2 and out == "", (out, err)
    assert err == ("labwright: error: node pve1: no `pct` on this host; the upgrade installs the userspace into the "
                   "containers with pct push/exec: run `labwright host upgrade` on the Proxmox VE node itself\n")
    assert len(sim.writes) == before and GpuHost(TreeHost(root)).driver_version() == DRIVER_VERSION
    assert host_userspace(root) == old_userspace()


@pytest.mark.parametrize("mode", ["https", "pvesh"])
def test_on_the_node_itself_the_run_reboots_and_the_boot_unit_finishes_it_with_the_saved_credentials(
        sim, root, inventory, capsys, monkeypatch, tmp_path, mode):
    """The real-node path on Proxmox VE: the node's tools (the doubles of tests/support/host_tools, derived from
    their sources) install the driver for the new kernel; the run stops at `systemctl reboot` with its state and the
    API credentials saved (0600) for the boot unit; the tree boots (nvidia-uvm 509 -> 237) and the resume unit's
    command, started without any PROXMOX_* variable in its environment but the unit's EnvironmentFile=, rewrites the
    raw majors, installs the userspace in the containers through pct, restarts them and runs gpu check.
    ``pvesh``: the node acts as root itself (its pvesh: tests/support/doubles/pvesh), so no credential is written at
    all and the inventory is not read at boot (it is gone by then)."""
    import shutil

    from labwright.guests.proxmox_api import Credentials, connect
    from labwright.hostupgrade import state
    from labwright.hostupgrade.pve import PveUpgrade, make_pve_plan, nvidia_majors, pve_node_facts, pve_saved
    from labwright.hostupgrade.realhost import CommandHost
    from support.fake_nvidia import fake_run_installer, write_installer
    from support.host_doubles import RESUME_LINK, boot, make_node, run_resume_unit, tool_env

    shutil.rmtree(root / "var/lib/dkms/nvidia" / NEW)  # a real node: nothing of the new driver before its install
    repo = root / "var/cache/labwright/nvidia"
    write_installer(repo, DRIVER_VERSION, fake_run_installer(DRIVER_VERSION))
    make_node(root, (OLD_KERNEL, NEW_KERNEL), (OLD_KERNEL, NEW_KERNEL), DRIVER_VERSION, OLD_KERNEL)
    for key in ("PATH", "LW_FAKE_ROOT", "LW_HOST_TOOLS"):  # the doubles first, then the pct double, then the rest
        monkeypatch.setenv(key, tool_env(root)[key])
    if mode == "pvesh":  # the node's pvesh, serving root@pam locally (the double reaches the simulator itself)
        bindir = tmp_path / "pvesh-bin"
        bindir.mkdir()
        (bindir / "pvesh").symlink_to(Path(__file__).resolve().parents[1] / "support/doubles/pvesh")
        monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
        monkeypatch.setenv("LW_PVESH_URL", f"https://{sim.host}")
        monkeypatch.setenv("LW_PVESH_CA", str(sim.ca_file))
        monkeypatch.setenv("LW_PVESH_TOKEN", f"{TOKEN_ID}={TOKEN_SECRET}")
    container(sim, 201, dev=True)
    container(sim, 202, raw=True)

    api = connect(Credentials.from_env(), "pve1", {"proxmox_api_url": f"https://{sim.host}",
                                                   "proxmox_ca_file": str(sim.ca_file)})
    facts, guests = pve_node_facts("pve1", TreeHost(root), api, repo)
    plan = make_pve_plan(facts, guests, None, False, nvidia_majors(GpuHost(TreeHost(root))))
    assert plan.boot_kernel == NEW_KERNEL
    host_side = CommandHost(TreeHost(root), repo)
    host_side.preflight(plan)
    upgrade = PveUpgrade(plan, TreeHost(root), repo, api, guests, host=host_side)
    upgrade.saved = pve_saved(upgrade, inventory, mode)
    upgrade.resume_command = resume_command(root, "pve1")  # the boot unit runs labwright on the tree
    out = upgrade.run({})
    assert out.ok and out.rebooting, (out.message, out.left)
    assert ct_userspace(sim, 202) == old_userspace() and allow_majors(sim, 202) == ["c 195:* rwm", "c 509:* rwm",
                                                                                    "c 511:* rwm"]
    saved = state.load(TreeHost(root))
    assert saved is not None and saved.kind == "pve" and saved.extra["majors_before"]["nvidia-uvm"] == 509
    env_file = root / "var/lib/labwright/host-upgrade.env"
    if mode == "https":
        assert f'PROXMOX_TOKEN_ID="{TOKEN_ID}"' in env_file.read_text().splitlines()
    else:
        assert saved.api == "pvesh" and not env_file.exists()
        inventory.unlink()  # not read at boot

    assert boot(root, uvm_major=237) == (NEW_KERNEL, NEW)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PROXMOX_")}
    resumed = run_resume_unit(root, clean)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert allow_majors(sim, 202) == ["c 195:* rwm", "c 237:* rwm", "c 511:* rwm"]
    for vmid in (201, 202):
        assert ct_userspace(sim, vmid) == new_userspace() and sim.is_running(vmid)
    saved = state.load(TreeHost(root))
    assert saved is not None and saved.phase == state.DONE and saved.outcome is not None
    assert all(d["ok"] for d in saved.outcome["done"] if d["action"] == "check")
    assert [d["target"] for d in saved.outcome["done"] if d["action"] == "check"] == ["@pct/pve1/201",
                                                                                     "@pct/pve1/202"]
    assert not env_file.exists() and not (root / RESUME_LINK).is_symlink()
    assert state.leftovers(TreeHost(root)) == []
    assert not [p for p in root.rglob("*") if p.is_file() and not p.is_symlink()
                and TOKEN_SECRET.encode() in p.read_bytes()]
