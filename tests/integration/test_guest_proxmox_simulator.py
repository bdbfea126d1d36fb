"""The Proxmox guest backend against the PVE simulator: real proxmoxer, verified HTTPS on 127.0.0.1.

The node's side (NVIDIA device nodes, /proc files, /etc/pve) is a temp directory: a fake host tree
made with mknod (support.fake_nvidia) whose ``etc/pve`` is the simulator's pmxcfs, so raw
config lines written "over SSH" land in the file the simulated API reads. Nothing is mocked between
the backend and the simulator; every test asserts on what the simulator stored or recorded.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import textwrap

import pytest
from proxmoxer import ProxmoxAPI, ResourceException

from labwright.errors import BadInput, OperationFailed, SafetyCheckFailed
from labwright.gpu.nvidia.boot_unit import BOOT_UNIT, BOOT_UNIT_PATH
from labwright.guests.base import backend_for
from labwright.guests.model import spec_from_data
from labwright.guests.proxmox_api import TaskWaiter
from support.fake_nvidia import make_fake_nvidia_host, reboot, run_boot_unit
from support.gpu_host import TreePveNode
from support.pve_simulator import PveSimulator, SimNode, host_devices

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the fake NVIDIA host tree needs mknod (root)")

TOKEN_ID, TOKEN_SECRET = "root@pam!labwright", "5f0e1d2c-3b4a-4968-8776-a5b4c3d2e1f0"
UVM_MAJOR, CAPS_MAJOR = 509, 511
GPU_NODES = ["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-modeset", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
             "/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia-caps/nvidia-cap2"]


@pytest.fixture
def host(tmp_path):
    return make_fake_nvidia_host(tmp_path / "pve1", uvm_major=UVM_MAJOR, caps_major=CAPS_MAJOR, extra_files=False)


@pytest.fixture
def sim(host):
    nodes = [SimNode("pve1", "8.2.4", devices=host_devices(host)), SimNode("pve2", "7.4-3", devices=host_devices(host))]
    with PveSimulator(nodes=nodes, tokens={TOKEN_ID: TOKEN_SECRET}, task_seconds=0.01) as simulator:
        (host / "etc").mkdir(exist_ok=True)
        (host / "etc" / "pve").symlink_to(simulator.pmxcfs)  # /etc/pve on the node is pmxcfs
        yield simulator


@pytest.fixture
def as_root(monkeypatch, sim):
    monkeypatch.delenv("PROXMOX_TOKEN_ID", raising=False)
    monkeypatch.setenv("PROXMOX_USER", "root@pam")
    monkeypatch.setenv("PROXMOX_PASSWORD", sim.root_password)


@pytest.fixture
def as_token(monkeypatch):
    monkeypatch.delenv("PROXMOX_USER", raising=False)
    monkeypatch.setenv("PROXMOX_TOKEN_ID", TOKEN_ID)
    monkeypatch.setenv("PROXMOX_TOKEN_SECRET", TOKEN_SECRET)


def guest(sim, node="pve1", vmid=201, node_data=None, **fields):
    data = {"backend": "proxmox", "node": node, "vmid": vmid, "hostname": "llm1", "template": sim.template,
            "memory": "4G", "cores": 4, "rootfs": "local-lvm:16", "net": {"name": "eth0", "bridge": "vmbr0"},
            "features": {"nesting": True}, **fields}
    return spec_from_data(f"@pct/{node}/{vmid}", data, source="lab.py",
                          node_data={"proxmox_api_url": f"https://{sim.host}", "proxmox_ca_file": str(sim.ca_file),
                                     **(node_data or {})})


def backend(spec, host, **options):
    return backend_for(spec, pve_node=TreePveNode(host, label=f"node {spec.node}"), poll_interval=0.01, **options)


# --- GPU ---------------------------------------------------------------------------------------------
def test_proxmox_backend_on_pve_simulator_creates_gpu_guest_as_root_with_dev_lines(sim, host, as_root):
    spec = guest(sim, gpu="nvidia")
    pve = backend(spec, host)
    plan = pve.plan(spec)
    assert plan.action == "create" and sim.writes == []
    assert "dev0: /dev/nvidia0,gid=44,mode=0660" in plan.config_lines
    pve.apply(spec)
    config = sim.config("pve1", 201).options
    devs = [config[f"dev{i}"] for i in range(len(GPU_NODES))]
    caps = {"/dev/nvidia-caps/nvidia-cap1": "0400", "/dev/nvidia-caps/nvidia-cap2": "0440"}
    assert devs == [f"{p},gid=44,mode={caps.get(p, '0660')}" for p in GPU_NODES]
    # the nodes the started CT got (pve-container's create_passthrough_device_node): group video (44), never
    # others' bits, so only root and the engines' service users (in video) open the GPU
    made = sim.cluster.passthrough[201]
    assert {p: (oct(n.mode), n.uid, n.gid) for p, n in made.items()} == {
        p: (oct(int(caps.get(p, "0660"), 8)), 0, 44) for p in GPU_NODES}
    assert all(not n.mode & 0o007 for n in made.values())
    assert (config["memory"], config["cores"], config["features"], config["tags"]) == ("4096", "4", "nesting=1",
                                                                                      "labwright")
    assert config["rootfs"] == "local-lvm:vm-201-disk-0,size=16G" and sim.is_running(201)
    assert sim.config("pve1", 201).lxc == []  # the modern way needs no raw lines

    writes = len(sim.writes)
    assert pve.apply(spec) == [] and pve.plan(spec).action == "none"
    assert len(sim.writes) == writes  # idempotent: the re-apply sent no write at all


def test_proxmox_backend_on_pve_simulator_a_guest_with_0666_nodes_is_planned_to_0660(sim, host, as_root):
    """A GPU guest made when labwright passed the nodes 0666 (or by hand): plan shows each devN going to 0660,
    apply narrows them, and the restarted CT's nodes are group video's, never others'."""
    spec = guest(sim, gpu="nvidia")
    backend(spec, host).apply(spec)
    conf = sim.conf_path("pve1", 201)
    conf.write_text(re.sub(r"mode=0\d\d\d", "mode=0666", conf.read_text()))  # as labwright wrote them before
    pve = backend(spec, host)
    plan = pve.plan(spec)
    widened = {c.what: (c.before, c.after) for c in plan.changes if c.what.startswith("config dev")}
    assert widened["config dev0"] == ("/dev/nvidia0,gid=44,mode=0666", "/dev/nvidia0,gid=44,mode=0660")
    assert widened["config dev5"] == ("/dev/nvidia-caps/nvidia-cap1,gid=44,mode=0666",
                               "/dev/nvidia-caps/nvidia-cap1,gid=44,mode=0400")
    assert len(widened) == len(GPU_NODES) and "dev0: /dev/nvidia0,gid=44,mode=0660" in plan.config_lines
    pve.apply(spec)
    pve.stop(spec)
    pve.start(spec)
    assert {n.mode for n in sim.cluster.passthrough[201].values()} == {0o660, 0o440, 0o400}
    assert pve.plan(spec).action == "none"


def test_proxmox_backend_on_pve_simulator_refuses_gpu_with_a_token_and_names_both_ways_out(sim, host, as_token):
    spec = guest(sim, gpu="nvidia")
    pve = backend(spec, host)
    with pytest.raises(BadInput) as info:
        pve.apply(spec)
    message = str(info.value)
    assert "root@pam!labwright is an API token" in message and "dev0" in message
    assert "PROXMOX_USER=root@pam PROXMOX_PASSWORD" in message and 'proxmox_root_via: "ssh"' in message
    assert "\n" not in message
    assert sim.writes == []  # refused before any request that changes anything
    assert not sim.conf_path("pve1", 201).exists()


def test_proxmox_backend_on_pve_simulator_token_builds_a_guest_without_root_only_settings(sim, host, as_token):
    spec = guest(sim)
    pve = backend(spec, host)
    pve.apply(spec)
    assert sim.is_running(201) and {w.user for w in sim.writes} == {TOKEN_ID}
    assert pve.apply(spec) == []


def test_proxmox_backend_on_pve_simulator_token_with_ssh_path_writes_dev_lines_to_the_file(sim, host, as_token):
    spec = guest(sim, gpu="nvidia", node_data={"proxmox_root_via": "ssh"},
                 mounts=[{"host": "/tank/models", "guest": "/models", "readonly": True}])
    pve = backend(spec, host)
    pve.apply(spec)
    sent = {key for w in sim.writes for key in w.params}
    assert not any(k.startswith(("dev", "mp")) for k in sent)  # the API never saw a root-only key
    config = sim.config("pve1", 201).options
    assert config["dev0"] == "/dev/nvidia0,gid=44,mode=0660" and config["mp0"] == "/tank/models,mp=/models,ro=1"
    assert all(w.user == TOKEN_ID for w in sim.writes) and sim.is_running(201)
    writes = len(sim.writes)
    assert pve.apply(spec) == [] and len(sim.writes) == writes


def test_proxmox_backend_on_pve_simulator_classic_lines_carry_the_hosts_majors(sim, host, as_root):
    spec = guest(sim, node="pve2", vmid=301, gpu="nvidia")  # PVE 7.4: no devN, so the classic lines
    pve = backend(spec, host)
    plan = pve.plan(spec)
    assert f"lxc.cgroup2.devices.allow: c {UVM_MAJOR}:* rwm" in plan.config_lines
    pve.apply(spec)
    lines = sim.config("pve2", 301).lxc
    allows = [v for k, v in lines if k == "lxc.cgroup2.devices.allow"]
    assert allows == ["c 195:* rwm", f"c {UVM_MAJOR}:* rwm", f"c {CAPS_MAJOR}:* rwm"]
    mounts = [v.split()[0] for k, v in lines if k == "lxc.mount.entry"]
    assert mounts == GPU_NODES
    assert "lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file" in \
        sim.conf_path("pve2", 301).read_text()
    assert not any(k.startswith("dev") for k in sim.config("pve2", 301).options)
    writes = len(sim.writes)
    assert pve.apply(spec) == [] and len(sim.writes) == writes


def test_proxmox_backend_on_pve_simulator_driver_update_moves_the_uvm_major(sim, host, tmp_path, as_root):
    spec = guest(sim, node="pve2", vmid=301, gpu="nvidia", start=False)
    backend(spec, host).apply(spec)
    upgraded = make_fake_nvidia_host(tmp_path / "upgraded", uvm_major=510, caps_major=CAPS_MAJOR, extra_files=False)
    (upgraded / "etc").mkdir(exist_ok=True)
    (upgraded / "etc" / "pve").symlink_to(sim.pmxcfs)
    changes = backend(spec, upgraded).apply(spec)
    assert any(c.after == "c 510:* rwm" for c in changes) and any(c.before == f"c {UVM_MAJOR}:* rwm" for c in changes)
    allows = [v for k, v in sim.config("pve2", 301).lxc if k == "lxc.cgroup2.devices.allow"]
    assert allows == ["c 195:* rwm", "c 510:* rwm", f"c {CAPS_MAJOR}:* rwm"]


def test_proxmox_backend_on_pve_simulator_gpu_without_host_driver_is_refused(sim, tmp_path, as_root):
    bare = make_fake_nvidia_host(tmp_path / "bare", driver=None)
    spec = guest(sim, gpu="nvidia")
    with pytest.raises(BadInput, match="has no NVIDIA driver"):
        backend(spec, bare).plan(spec)
    assert sim.writes == []


# --- tasks ---------------------------------------------------------------------------------------------
def test_proxmox_backend_on_pve_simulator_failed_task_raises_and_leaves_nothing(sim, host, as_root):
    spec = guest(sim)
    sim.fail_next_task("unable to create CT 201 - no space left on device", "vzcreate")
    with pytest.raises(OperationFailed, match="no space left on device"):
        backend(spec, host).apply(spec)
    assert not sim.conf_path("pve1", 201).exists()


def test_proxmox_backend_on_pve_simulator_hung_task_times_out_raises_and_is_stopped(sim, host, as_root):
    spec = guest(sim)
    sim.hang_next_task("vzcreate")
    with pytest.raises(OperationFailed, match=r"did not finish within 0.3 s; labwright stopped it"):
        backend(spec, host, task_timeout=0.3).apply(spec)
    assert not sim.conf_path("pve1", 201).exists()  # the stopped create rolled itself back
    assert all(t.status == "stopped" for t in sim.cluster.tasks.values())


def test_proxmox_backend_on_pve_simulator_failed_start_removes_the_new_container(sim, host, as_root):
    spec = guest(sim)
    sim.fail_next_task("command 'lxc-start -F -n 201' failed: exit code 1", "vzstart")
    with pytest.raises(OperationFailed, match="lxc-start"):
        backend(spec, host).apply(spec)
    assert not sim.conf_path("pve1", 201).exists()
    assert [w.path for w in sim.writes][-1] == "/nodes/pve1/lxc/201"  # the clean-up DELETE


# --- updates, idempotency, lifecycle ---------------------------------------------------------------------
def test_proxmox_backend_on_pve_simulator_update_sends_one_put_then_nothing(sim, host, as_root):
    spec = guest(sim)
    pve = backend(spec, host)
    pve.apply(spec)
    changed = dataclasses.replace(spec, memory=8192, cores=8)
    writes = len(sim.writes)
    changes = pve.apply(changed)
    assert {c.what for c in changes} == {"config memory", "config cores"}
    new = sim.writes[writes:]
    assert [(w.method, w.path) for w in new] == [("PUT", "/nodes/pve1/lxc/201/config")]
    assert len(new[0].params["digest"]) == 40
    assert pve.apply(changed) == [] and len(sim.writes) == writes + 1

    mac = sim.config("pve1", 201).options["net0"].split("hwaddr=")[1].split(",")[0]
    moved = dataclasses.replace(changed, net=(dataclasses.replace(changed.net[0], bridge="vmbr1"),))
    assert [c.what for c in pve.apply(moved)] == ["config net0"]
    net0 = sim.config("pve1", 201).options["net0"]
    assert "bridge=vmbr1" in net0 and f"hwaddr={mac}" in net0  # PVE would have made up a new MAC otherwise
    assert pve.apply(moved) == []


def test_proxmox_backend_on_pve_simulator_stop_start_show_destroy(sim, host, as_root):
    spec = guest(sim)
    pve = backend(spec, host)
    pve.apply(spec)
    assert pve.show(spec)["in_sync"] is True and pve.show(spec)["status"] == "running"
    assert pve.stop(spec) and not sim.is_running(201) and pve.stop(spec) == []
    assert pve.start(spec) and sim.is_running(201)
    assert pve.destroy(spec) and not sim.conf_path("pve1", 201).exists()
    assert pve.destroy(spec) == [] and pve.show(spec)["exists"] is False


def test_proxmox_backend_on_pve_simulator_leaves_containers_it_did_not_make_alone(sim, host, as_root):
    api = ProxmoxAPI(sim.host, user="root@pam", password=sim.root_password, verify_ssl=str(sim.ca_file))
    upid = api.nodes("pve1").lxc.post(vmid=201, ostemplate=sim.template, rootfs="local-lvm:4", hostname="web")
    TaskWaiter(api, timeout=5, interval=0.01).wait(upid, "someone else's create")
    writes = len(sim.writes)
    spec = guest(sim)
    with pytest.raises(SafetyCheckFailed, match="not made by labwright"):
        backend(spec, host).destroy(spec)
    with pytest.raises(BadInput, match="CT 201 on pve1 is 'web', not made by labwright; pick another vmid"):
        backend(spec, host).apply(spec)
    assert len(sim.writes) == writes and sim.conf_path("pve1", 201).exists()


# --- bad input -----------------------------------------------------------------------------------------
def test_proxmox_backend_on_pve_simulator_bad_inputs_are_one_line_and_send_nothing(sim, host, as_root):
    cases = [
        (guest(sim, template="local:vztmpl/nope-1.0.tar.zst"), "does not exist on pve1; download it with"),
        (guest(sim, node="pve9"), "node 'pve9' is not in the Proxmox cluster (nodes: pve1, pve2)"),
        (dataclasses.replace(guest(sim), vmid=99), "vmid 99 is outside 100-999999999"),
        (guest(sim, rootfs="tank:16"), "storage 'tank' on pve1 does not exist"),
    ]
    for spec, message in cases:
        with pytest.raises(BadInput) as info:
            backend(spec, host).apply(spec)
        assert message in str(info.value) and "\n" not in str(info.value)
    assert sim.writes == []


def test_proxmox_backend_on_pve_simulator_bind_mount_with_token_is_refused(sim, host, as_token):
    spec = guest(sim, mounts=[{"host": "/tank/models", "guest": "/models"}])
    with pytest.raises(BadInput, match=r"mp0 .*can only be set by root@pam"):
        backend(spec, host).plan(spec)
    assert sim.writes == []


def test_proxmox_backend_on_pve_simulator_bad_credentials(sim, host, monkeypatch):
    monkeypatch.delenv("PROXMOX_TOKEN_ID", raising=False)
    monkeypatch.setenv("PROXMOX_USER", "root@pam")
    monkeypatch.setenv("PROXMOX_PASSWORD", "wrong")
    spec = guest(sim)
    with pytest.raises(OperationFailed, match="refused the login of root@pam"):
        backend(spec, host).plan(spec)


# --- the CLI, as a user runs it ----------------------------------------------------------------------------
def test_labwright_guest_cli_on_pve_simulator_plan_apply_reapply(sim, tmp_path, cli_env, repo):
    inventory = tmp_path / "lab.py"
    inventory.write_text(textwrap.dedent(f"""
        pve_nodes = ([("pve1", {{}})], {{"proxmox_api_url": "https://{sim.host}", "proxmox_ca_file": "{sim.ca_file}"}})
        guests = ([("@pct/pve1/201", {{"guest": {{
            "backend": "proxmox", "hostname": "llm1", "template": "{sim.template}", "memory": "2G",
            "rootfs": "local-lvm:8", "net": {{"bridge": "vmbr0"}}}}}})], {{}})
        """))
    env = {k: v for k, v in cli_env.items() if not k.startswith("PROXMOX_")}
    env.update(PROXMOX_USER="root@pam", PROXMOX_PASSWORD=sim.root_password)

    def labwright(*args):
        return subprocess.run(["labwright", "guest", *args, str(inventory)], capture_output=True, text=True,
                              env=env, cwd=repo, timeout=120)

    plan = labwright("plan")
    assert plan.returncode == 0, plan.stderr
    assert "config lines for /etc/pve/lxc/201.conf" in plan.stdout and "memory: 2048" in plan.stdout
    assert sim.writes == []
    first = labwright("apply")
    assert first.returncode == 0, first.stderr
    assert sim.config("pve1", 201).options["memory"] == "2048" and sim.is_running(201)
    writes = len(sim.writes)
    second = labwright("apply")
    assert second.returncode == 0 and "0 guest(s) changed, 1 unchanged" in second.stdout
    assert len(sim.writes) == writes
    env.pop("PROXMOX_USER")
    missing = labwright("plan")
    assert missing.returncode == 2 and "no Proxmox credentials" in missing.stderr


# --- a host reboot: the uvm nodes are gone until something makes them ------------------------------------
def test_proxmox_backend_on_pve_simulator_gpu_guest_survives_a_host_reboot(sim, host, as_root):
    spec = guest(sim, gpu="nvidia", onboot=True)
    node = TreePveNode(host, label="node pve1")
    pve = backend_for(spec, pve_node=node, poll_interval=0.01)
    plan = pve.plan(spec)
    unit_change = next(c for c in plan.changes if c.what == f"node pve1 {BOOT_UNIT}")
    assert unit_change.before is None and "nvidia-modprobe -u -c 0" in unit_change.after
    assert plan.missing_nodes == [] and plan.warnings == []
    changes = pve.apply(spec)
    assert unit_change in changes and sim.is_running(201)
    unit = (host / BOOT_UNIT_PATH.lstrip("/")).read_text()
    assert "Before=pve-guests.service pve-ha-lrm.service" in unit and "WantedBy=multi-user.target" in unit
    assert "ExecStart=/usr/bin/nvidia-modprobe -u -c 0" in unit and "ExecStart=/usr/bin/nvidia-modprobe -c 0 -c 255" \
        in unit
    assert node.ran[:3] == [("systemctl", "daemon-reload"), ("systemctl", "enable", BOOT_UNIT),
                            ("systemctl", "restart", BOOT_UNIT)]
    assert pve.apply(spec) == []  # installed once; a re-apply writes nothing

    # The host reboots: nvidia-persistenced brings nvidia0/nvidiactl back, nothing makes the uvm nodes.
    pve.stop(spec)
    reboot(host)
    sim.cluster.nodes["pve1"].devices = host_devices(host)
    after = backend(spec, host)
    plan = after.plan(spec)
    assert plan.missing_nodes == ["/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
    assert plan.warnings == [
        "CT 201 cannot start while /dev/nvidia-uvm, /dev/nvidia-uvm-tools are missing on node pve1 (PVE stats every "
        "devN path when a container starts; after a host reboot nothing has made the uvm nodes yet); "
        f"{BOOT_UNIT} is installed and makes them at boot: see `systemctl status {BOOT_UNIT}` on pve1, or run "
        "`labwright guest start`, which creates /dev/nvidia-uvm first"]
    info = after.show(spec)
    assert info["missing_nodes"] == plan.missing_nodes and info["warnings"] == plan.warnings
    # What pve-guests meets at boot without the unit: PVE refuses the start.
    with pytest.raises(OperationFailed, match="Device /dev/nvidia-uvm does not exist"):
        after.start(spec)

    # The boot unit is what runs at boot: its nvidia-modprobe lines make the nodes, and the CT starts.
    assert run_boot_unit(host, unit) == ["/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
    sim.cluster.nodes["pve1"].devices = host_devices(host)
    assert backend(spec, host).plan(spec).missing_nodes == []
    backend(spec, host).start(spec)
    assert sim.is_running(201)


def test_proxmox_backend_on_pve_simulator_existing_gpu_guest_gets_the_boot_unit(sim, host, as_root):
    """A GPU guest made before labwright had the unit: after a reboot, plan flags it and apply fixes both."""
    spec = guest(sim, gpu="nvidia", onboot=True)
    backend(spec, host).apply(spec)
    (host / BOOT_UNIT_PATH.lstrip("/")).unlink()  # as labwright before this change left the node
    backend(spec, host).stop(spec)
    reboot(host)
    sim.cluster.nodes["pve1"].devices = host_devices(host)
    pve = backend(spec, host)
    plan = pve.plan(spec)
    assert plan.action == "update" and plan.missing_nodes == ["/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
    assert plan.warnings[0].endswith(f"apply creates them now and installs {BOOT_UNIT} so that they exist after "
                                     "every boot")
    assert [c.what for c in plan.changes] == [f"node pve1 {BOOT_UNIT}", "state"]
    assert plan.to_dict()["missing_nodes"] == plan.missing_nodes
    assert (host / BOOT_UNIT_PATH.lstrip("/")).exists() is False and sim.config("pve1", 201).options["dev3"]


def test_proxmox_backend_on_pve_simulator_classic_guest_missing_uvm_is_flagged_not_fatal(sim, host, as_root):
    spec = guest(sim, node="pve2", vmid=301, gpu="nvidia", start=False)
    backend(spec, host).apply(spec)
    reboot(host)
    plan = backend(spec, host).plan(spec)
    assert plan.missing_nodes == ["/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
    assert plan.warnings[0].startswith("CT 301 starts without /dev/nvidia-uvm, /dev/nvidia-uvm-tools (missing on "
                                       "node pve2; its bind mounts are optional), so CUDA fails inside it")


# --- a privileged container with nesting and an API token -------------------------------------------------
def test_pve_simulator_refuses_features_on_a_privileged_container_to_a_token(sim):
    """pve-container 6.1.10 src/PVE/LXC.pm:1691-1692 (check_ct_modify_config_perm, reached from create_vm at
    src/PVE/API2/LXC.pm:324): any `features` on a privileged CT is root@pam's alone; a token is never root@pam."""
    token = ProxmoxAPI(sim.host, user="root@pam", token_name="labwright", token_value=TOKEN_SECRET,
                       verify_ssl=str(sim.ca_file))
    with pytest.raises(ResourceException) as info:
        token.nodes("pve1").lxc.post(vmid=202, ostemplate=sim.template, unprivileged=0, features="nesting=1")
    assert info.value.status_code == 403
    assert "changing feature flags for privileged container is only allowed for root@pam" in str(info.value)
    assert not sim.conf_path("pve1", 202).exists()
    upid = token.nodes("pve1").lxc.post(vmid=203, ostemplate=sim.template, unprivileged=1, features="nesting=1",
                                 rootfs="local-lvm:8")
    assert upid.startswith("UPID:")  # unprivileged: nesting alone is allowed to the token


def test_proxmox_backend_on_pve_simulator_privileged_nesting_with_a_token_is_refused_up_front(sim, host, as_token):
    spec = guest(sim, unprivileged=False)  # features: nesting
    with pytest.raises(BadInput) as info:
        backend(spec, host).plan(spec)
    message = str(info.value)
    assert message.startswith("lab.py: guest llm1: unprivileged: false with features nesting=1: Proxmox lets only "
                              "root@pam set feature flags (nesting too) on a privileged container, and "
                              "root@pam!labwright is an API token")
    assert "PROXMOX_USER=root@pam PROXMOX_PASSWORD" in message and "unprivileged: true" in message
    assert "\n" not in message
    with pytest.raises(BadInput):
        backend(spec, host).apply(spec)
    assert sim.writes == [] and not sim.conf_path("pve1", 201).exists()


def test_proxmox_backend_on_pve_simulator_privileged_nesting_as_root_or_over_ssh(sim, host, monkeypatch, as_token):
    over_ssh = guest(sim, unprivileged=False, node_data={"proxmox_root_via": "ssh"})
    backend(over_ssh, host).apply(over_ssh)
    assert not any("features" in w.params for w in sim.writes)  # the file got it, the API never saw it
    assert sim.config("pve1", 201).options["features"] == "nesting=1" and sim.is_running(201)
    assert backend(over_ssh, host).apply(over_ssh) == []

    monkeypatch.delenv("PROXMOX_TOKEN_ID")
    monkeypatch.setenv("PROXMOX_USER", "root@pam")
    monkeypatch.setenv("PROXMOX_PASSWORD", sim.root_password)
    as_root = guest(sim, vmid=202, hostname="llm2", unprivileged=False)
    backend(as_root, host).apply(as_root)
    options = sim.config("pve1", 202).options
    assert options["features"] == "nesting=1" and "unprivileged" not in options
