"""The PVE simulator refuses what a PVE node refuses and accepts what it accepts, with proxmoxer as the client.

Every call goes through the real proxmoxer over verified HTTPS to the simulator on 127.0.0.1. The
expected texts are PVE's own (pve-common JSONSchema.pm, pve-container API2/LXC.pm and LXC.pm).
"""

from __future__ import annotations

import time

import pytest
import requests
from proxmoxer import AuthenticationError, ProxmoxAPI, ResourceException
from proxmoxer.tools import Tasks

from support.pve_simulator import NVIDIA_DEVICES, PveSimulator, SimNode

TOKEN = "root@pam!ci"
SECRET = "0b6f5c3e-2d7a-4c59-9a51-2f0f2a4f7f11"


@pytest.fixture
def sim():
    nodes = [SimNode("pve1", "8.2.4", devices=dict(NVIDIA_DEVICES)), SimNode("pve2", "7.4-3")]
    with PveSimulator(nodes=nodes, tokens={TOKEN: SECRET}, users={"root@pam": "rootpw", "ops@pve": "opspw"},
                      privileges={"ops@pve": frozenset({"VM.Audit"})}, task_seconds=0.01) as simulator:
        yield simulator


@pytest.fixture
def root(sim):
    return ProxmoxAPI(sim.host, user="root@pam", password="rootpw", verify_ssl=str(sim.ca_file))


@pytest.fixture
def token(sim):
    return ProxmoxAPI(sim.host, user="root@pam", token_name="ci", token_value=SECRET, verify_ssl=str(sim.ca_file))


def wait(api, upid, timeout=5.0):
    node = Tasks.decode_upid(upid)["node"]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = api.nodes(node).tasks(upid).status.get()
        if status["status"] == "stopped":
            return status
        time.sleep(0.01)
    raise AssertionError(f"task {upid} still running")


def create(api, sim, vmid=101, **extra):
    params = {"vmid": vmid, "ostemplate": sim.template, "rootfs": "local-lvm:8", "hostname": "llm1", **extra}
    return wait(api, api.nodes("pve1").lxc.post(**params))


def refused(call) -> ResourceException:
    with pytest.raises(ResourceException) as info:
        call()
    return info.value


# --- accepted ------------------------------------------------------------------------------------
def test_pve_simulator_creates_a_container_with_pve_normalized_config(sim, root):
    status = create(root, sim, memory=2048, net0="name=eth0,bridge=vmbr0,ip=dhcp", dev0="/dev/nvidia0,gid=44,mode=0666",
                    features="nesting=1", unprivileged=1)
    assert status["exitstatus"] == "OK" and status["type"] == "vzcreate" and status["user"] == "root@pam"
    upid = Tasks.decode_upid(status["upid"])
    assert (upid["node"], upid["type"], upid["id"]) == ("pve1", "vzcreate", "101")
    config = root.nodes("pve1").lxc(101).config.get()
    assert config["dev0"] == "/dev/nvidia0,gid=44,mode=0666"
    assert config["rootfs"] == "local-lvm:vm-101-disk-0,size=8G"
    assert config["net0"].startswith("name=eth0,bridge=vmbr0,hwaddr=BC:24:11:") and config["net0"].endswith(
        ",ip=dhcp,type=veth")
    assert (config["memory"], config["swap"], config["unprivileged"], config["ostype"]) == (2048, 512, 1, "debian")
    assert len(config["digest"]) == 40
    assert "dev0: /dev/nvidia0,gid=44,mode=0666" in sim.conf_path("pve1", 101).read_text()


def test_pve_simulator_token_may_create_without_passthrough_and_set_nesting(sim, token):
    status = create(token, sim, features="nesting=1")
    assert status["exitstatus"] == "OK" and status["user"] == TOKEN


def test_pve_simulator_accepts_json_bodies_and_pve_booleans(sim, root):
    session = requests.Session()
    session.headers["Authorization"] = f"PVEAPIToken={TOKEN}={SECRET}"
    answer = session.post(f"{sim.base_url}/nodes/pve1/lxc", verify=str(sim.ca_file), timeout=5,
                          json={"vmid": 105, "ostemplate": sim.template, "rootfs": "local-lvm:4", "onboot": True})
    assert answer.status_code == 200 and answer.json()["data"].startswith("UPID:pve1:")
    wait(root, answer.json()["data"])
    assert root.nodes("pve1").lxc(105).config.get()["onboot"] == 1


# --- refused by the schema -------------------------------------------------------------------------
@pytest.mark.parametrize(("params", "errors"), [
    ({"dev0": "/dev/nvidia0,mode=999"}, {"dev0": "invalid format - format error\ndev0.mode: value does not match "
                                                 "the regex pattern\n"}),
    ({"dev0": "/dev/nvidia0,colour=red"}, {"dev0": "invalid format - invalid key in comma-separated list property: "
                                                   "colour\n"}),
    ({"dev0": "/tmp/x"}, {"dev0": "invalid format - format error\ndev0.path: invalid format - /tmp/x is not a valid "
                                  "device path\n\n"}),
    ({"bogus": "1"}, {"bogus": "property is not defined in schema and the schema does not allow additional "
                               "properties"}),
    ({"memory": "2G"}, {"memory": "type check ('integer') failed - got '2G'"}),
    ({"unprivileged": "True"}, {"unprivileged": "type check ('boolean') failed - got 'True'"}),
    ({"vmid": 99}, {"vmid": "invalid format - value does not look like a valid VM ID\n"}),
    ({"vmid": 1_000_000_000}, {"vmid": "invalid format - value does not look like a valid VM ID\n"}),
    ({"cores": 9000}, {"cores": "value must have a maximum value of 8192"}),
    ({"arch": "sparc"}, {"arch": "value 'sparc' does not have a value in the enumeration "
                                 "'amd64, i386, arm64, armhf, riscv32, riscv64'"}),
    ({"net0": "bridge=vmbr0"}, {"net0": "invalid format - format error\nnet0.name: property is missing and it is not "
                                        "optional\n"}),
    ({"net0": "name=eth0,hwaddr=01:00:00:00:00:01"}, {"net0": "invalid format - format error\nnet0.hwaddr: invalid "
                                                              "format - value does not look like a valid unicast MAC "
                                                              "address\n\n"}),
    ({"mp0": "local-lvm:8"}, {"mp0": "invalid format - format error\nmp0.mp: property is missing and it is not "
                                     "optional\n"}),
    ({"dev256": "/dev/nvidia0"}, {"dev256": "property is not defined in schema and the schema does not allow "
                                            "additional properties"}),
    ({"ostemplate": None}, {"ostemplate": "property is missing and it is not optional"}),
])
def test_pve_simulator_rejects_what_the_schema_rejects(sim, root, params, errors):
    base = {"vmid": 101, "ostemplate": sim.template, "rootfs": "local-lvm:8"}
    error = refused(lambda: root.nodes("pve1").lxc.post(**{**base, **params}))
    assert (error.status_code, error.content) == (400, "Parameter verification failed.")
    assert error.errors == errors
    assert not sim.conf_path("pve1", 101).exists()


def test_pve_simulator_checks_puts_against_the_put_schema(sim, root):
    create(root, sim)
    error = refused(lambda: root.nodes("pve1").lxc(101).config.put(ostemplate=sim.template, delete="memory;cores"))
    assert error.status_code == 400 and set(error.errors) == {"ostemplate"}


def test_pve_simulator_older_node_has_no_dev_property(sim, root):
    error = refused(lambda: root.nodes("pve2").lxc.post(vmid=102, ostemplate=sim.template, dev0="/dev/nvidia0"))
    assert error.status_code == 400 and "not defined in schema" in error.errors["dev0"]


# --- refused by permissions --------------------------------------------------------------------------
def test_pve_simulator_token_of_root_cannot_pass_devices_through(sim, token, root):
    error = refused(lambda: token.nodes("pve1").lxc.post(vmid=101, ostemplate=sim.template, rootfs="local-lvm:8",
                                                         dev0="/dev/nvidia0"))
    assert (error.status_code, error.content) == (
        403, "Permission check failed (configuring device passthrough is only allowed for root@pam)")
    create(root, sim)
    error = refused(lambda: token.nodes("pve1").lxc(101).config.put(dev0="/dev/nvidia0"))
    assert error.status_code == 403 and "only allowed for root@pam" in error.content
    assert "dev0" not in root.nodes("pve1").lxc(101).config.get()


@pytest.mark.parametrize(("params", "message"), [
    ({"features": "nesting=1,keyctl=1"}, "changing feature flags (except nesting) is only allowed for root@pam"),
    ({"mp0": "/srv/models,mp=/models"}, "mount point type bind is only allowed for root@pam"),
    ({"unprivileged": 0, "features": "nesting=1"},
     "changing feature flags for privileged container is only allowed for root@pam"),
])
def test_pve_simulator_root_only_settings_refused_for_tokens(sim, token, params, message):
    error = refused(lambda: token.nodes("pve1").lxc.post(vmid=101, ostemplate=sim.template, rootfs="local-lvm:8",
                                                         **params))
    assert (error.status_code, error.content) == (403, f"Permission check failed ({message})")


def test_pve_simulator_user_without_privileges_is_refused(sim):
    ops = ProxmoxAPI(sim.host, user="ops@pve", password="opspw", verify_ssl=str(sim.ca_file))
    assert ops.nodes("pve1").lxc.get() == []
    error = refused(lambda: ops.nodes("pve1").lxc.post(vmid=101, ostemplate=sim.template, rootfs="local-lvm:8"))
    assert error.status_code == 403
    error = refused(lambda: ops.nodes("pve1").lxc(101).status.start.post())
    assert (error.status_code, error.content) == (403, "Permission check failed (/vms/101, VM.PowerMgmt)")


# --- authentication ----------------------------------------------------------------------------------
def test_pve_simulator_authentication(sim):
    url = f"{sim.base_url}/nodes"
    answer = requests.get(url, verify=str(sim.ca_file), timeout=5)
    assert (answer.status_code, answer.reason) == (401, "No ticket")
    with pytest.raises(AuthenticationError):
        ProxmoxAPI(sim.host, user="root@pam", password="wrong", verify_ssl=str(sim.ca_file))
    bad = ProxmoxAPI(sim.host, user="root@pam", token_name="ci", token_value="nope", verify_ssl=str(sim.ca_file))
    assert refused(bad.nodes.get).status_code == 401
    login = requests.post(f"{sim.base_url}/access/ticket", data={"username": "root@pam", "password": "rootpw"},
                          verify=str(sim.ca_file), timeout=5).json()["data"]
    cookies = {"PVEAuthCookie": login["ticket"]}
    assert requests.get(url, cookies=cookies, verify=str(sim.ca_file), timeout=5).status_code == 200
    renewed = requests.post(f"{sim.base_url}/access/ticket", data={"username": "root@pam", "password": login["ticket"]},
                            verify=str(sim.ca_file), timeout=5)
    assert renewed.status_code == 200 and renewed.json()["data"]["ticket"] != login["ticket"]
    assert all(r.params.get("password") in (None, "<redacted>") for r in sim.requests)
    no_csrf = requests.post(f"{sim.base_url}/nodes/pve1/lxc", cookies=cookies, data={"vmid": 101},
                            verify=str(sim.ca_file), timeout=5)
    assert (no_csrf.status_code, no_csrf.reason) == (401, "Permission denied - invalid csrf token")


def test_pve_simulator_auth_failures_are_a_bare_401_with_pveproxys_reason(sim):
    """pve-manager PVE/HTTPServer.pm 85-103: a token or ticket that does not verify is "Authentication failed!"
    whatever verify_token/verify_ticket said; pve-http-server AnyEvent.pm 1641-1644 sends it with no body."""
    url, ca = f"{sim.base_url}/nodes", str(sim.ca_file)
    for header in ({"Authorization": f"PVEAPIToken={TOKEN}=wrong"}, {"Authorization": "PVEAPIToken=root@pam!nope=x"},
                   {"Authorization": "PVEAPIToken=garbage"}, {"Cookie": "PVEAuthCookie=PVE:root@pam:6500AB12::Zm9v"}):
        answer = requests.get(url, headers=header, verify=ca, timeout=5)
        assert (answer.status_code, answer.reason, answer.content) == (401, "Authentication failed!", b""), header
    # authentication comes before routing: an unknown path without credentials is 401, not 501
    assert requests.get(f"{sim.base_url}/bogus", verify=ca, timeout=5).status_code == 401


def test_pve_simulator_uri_parameter_repeated_with_the_same_value_is_accepted(sim, root):
    """rest_handler (pve-manager PVE/HTTPServer.pm 160-168) refuses only a conflicting repeat."""
    assert root.nodes("pve1").lxc.get(node="pve1") == []
    error = refused(lambda: root.nodes("pve1").lxc.get(node="pve2"))
    assert error.errors == {"node": "duplicate parameter (already defined in URI) with conflicting values!"}


# --- errors from state ---------------------------------------------------------------------------------
def test_pve_simulator_state_errors_read_like_pve(sim, root):
    error = refused(lambda: root.nodes("pve1").lxc(123).config.get())
    assert (error.status_code, error.content) == (500, "Configuration file 'nodes/pve1/lxc/123.conf' does not exist")
    create(root, sim)
    error = refused(lambda: root.nodes("pve1").lxc.post(vmid=101, ostemplate=sim.template))
    assert (error.status_code, error.content) == (500, "CT 101 already exists on node 'pve1'")
    error = refused(lambda: root.nodes("pve2").lxc.post(vmid=101, ostemplate=sim.template))
    assert error.content == "CT 101 already exists on node 'pve1'"
    error = refused(lambda: root.nodes("pve9").lxc.get())
    assert error.status_code == 500 and error.content.startswith("hostname lookup 'pve9' failed")
    error = refused(lambda: root.nodes("pve1").lxc(101).bogus.get())
    assert (error.status_code, error.content) == (501, "Method 'GET /nodes/pve1/lxc/101/bogus' not implemented")
    error = refused(lambda: root.nodes("pve1").lxc.post(vmid=102, ostemplate=sim.template))
    assert error.errors == {"storage": "storage 'local' does not support container directories"}
    error = refused(lambda: root.nodes("pve1").lxc(101).config.put(dev1="/dev/nvidia9"))
    assert (error.status_code, error.content) == (500, "Device /dev/nvidia9 does not exist")
    error = refused(lambda: root.nodes("pve1").lxc(101).config.put(memory=1024, digest="0" * 40))
    assert error.content == "detected modified configuration - file changed by other user? Try again."


def test_pve_simulator_missing_template_fails_the_task_and_leaves_nothing(sim, root):
    upid = root.nodes("pve1").lxc.post(vmid=101, ostemplate="local:vztmpl/nope.tar.zst", rootfs="local-lvm:8")
    status = wait(root, upid)
    assert status["exitstatus"] == "unable to create CT 101 - volume 'local:vztmpl/nope.tar.zst' does not exist"
    assert not sim.conf_path("pve1", 101).exists()
    assert root.nodes("pve1").storage("local-lvm").content.get() == []
    log = root.nodes("pve1").tasks(upid).log.get()
    assert log[-1]["t"].startswith("TASK ERROR: unable to create CT 101")


# --- tasks ---------------------------------------------------------------------------------------------
def test_pve_simulator_fail_hook_fails_the_next_task(sim, root):
    create(root, sim)
    sim.fail_next_task("command 'lxc-start -F -n 101' failed: exit code 1", "vzstart")
    status = wait(root, root.nodes("pve1").lxc(101).status.start.post())
    assert status["exitstatus"] == "command 'lxc-start -F -n 101' failed: exit code 1"
    assert root.nodes("pve1").lxc(101).status.current.get()["status"] == "stopped"
    assert wait(root, root.nodes("pve1").lxc(101).status.start.post())["exitstatus"] == "OK"
    assert sim.is_running(101)


def test_pve_simulator_hung_task_runs_until_stopped_and_a_stopped_create_cleans_up(sim, root):
    sim.hang_next_task("vzcreate")
    upid = root.nodes("pve1").lxc.post(vmid=101, ostemplate=sim.template, rootfs="local-lvm:8")
    time.sleep(0.1)  # time for a wrongly finishing task to finish: the assertion is that it has NOT, not a wait
    assert root.nodes("pve1").tasks(upid).status.get()["status"] == "running"
    assert root.nodes("pve1").lxc(101).config.get()["lock"] == "create"
    assert Tasks.blocking_status(root, upid, timeout=0.2, polling_interval=0.05) is None  # proxmoxer's own helper
    root.nodes("pve1").tasks(upid).delete()
    assert wait(root, upid)["exitstatus"] == "unable to create CT 101 - received interrupt"
    assert not sim.conf_path("pve1", 101).exists()


def test_pve_simulator_start_fails_when_a_passed_through_device_is_missing(sim, root):
    create(root, sim, dev0="/dev/nvidia-uvm")
    del sim.cluster.nodes["pve1"].devices["/dev/nvidia-uvm"]  # e.g. after a host reboot, before nvidia-modprobe
    status = wait(root, root.nodes("pve1").lxc(101).status.start.post())
    assert status["exitstatus"] == "Device /dev/nvidia-uvm does not exist"  # update_lxc_config dies before lxc-start
    log = [entry["t"] for entry in root.nodes("pve1").tasks(status["upid"]).log.get()]
    assert "Device /dev/nvidia-uvm does not exist" in log


def test_pve_simulator_bad_upid_is_a_parameter_error(sim, root):
    error = refused(lambda: root.nodes("pve1").tasks("UPID:pve1:nonsense").status.get())
    assert (error.status_code, error.errors) == (400, {"upid": "unable to parse worker upid"})  # Tasks.pm 516


def test_pve_simulator_task_with_warnings_ends_in_warnings_n(sim, root):
    """fork_worker (pve-common RESTEnvironment.pm 659-661) ends "TASK WARNINGS: N"; UPID.pm 80 reads it back."""
    create(root, sim)
    sim.warn_next_task("old config option ignored", "second one", task_type="vzstart")
    status = wait(root, root.nodes("pve1").lxc(101).status.start.post())
    assert status["exitstatus"] == "WARNINGS: 2" and sim.is_running(101)
    log = [entry["t"] for entry in root.nodes("pve1").tasks(status["upid"]).log.get()]
    assert log[-3:] == ["WARN: old config option ignored", "WARN: second one", "TASK WARNINGS: 2"]
    assert root.nodes("pve1").tasks.get(errors=1) == []  # not an error (UPID.pm 90)


def test_pve_simulator_multi_line_task_error_is_one_line(sim, root):
    """fork_worker chomps the error and turns every newline into a space (RESTEnvironment.pm 655-658)."""
    create(root, sim)
    sim.fail_next_task("lxc-start failed\nsee journal\n", "vzstart")
    assert wait(root, root.nodes("pve1").lxc(101).status.start.post())["exitstatus"] == "lxc-start failed see journal"


# --- config semantics ------------------------------------------------------------------------------------
def test_pve_simulator_running_container_keeps_non_hotplug_changes_pending(sim, root):
    create(root, sim, dev0="/dev/nvidia0", start=1)
    assert sim.is_running(101)
    root.nodes("pve1").lxc(101).config.put(memory=4096, dev0="/dev/nvidia0,gid=44", delete="swap")
    assert root.nodes("pve1").lxc(101).config.get(current=1)["dev0"] == "/dev/nvidia0"  # not hotpluggable over
    assert root.nodes("pve1").lxc(101).config.get()["dev0"] == "/dev/nvidia0,gid=44"
    pending = {row["key"]: row for row in root.nodes("pve1").lxc(101).pending.get()}
    assert pending["dev0"]["pending"] == "/dev/nvidia0,gid=44" and "pending" not in pending["memory"]
    wait(root, root.nodes("pve1").lxc(101).status.stop.post())
    wait(root, root.nodes("pve1").lxc(101).status.start.post())
    assert root.nodes("pve1").lxc(101).config.get(current=1)["dev0"] == "/dev/nvidia0,gid=44"
    assert "swap" not in root.nodes("pve1").lxc(101).config.get()


def test_pve_simulator_raw_lxc_lines_written_to_the_file_show_in_the_api(sim, root):
    create(root, sim)
    before = root.nodes("pve1").lxc(101).config.get()["digest"]
    path = sim.conf_path("pve1", 101)
    path.write_text(path.read_text() + "lxc.cgroup2.devices.allow: c 195:* rwm\n"
                                       "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file\n")
    config = root.nodes("pve1").lxc(101).config.get()
    assert config["lxc"] == [["lxc.cgroup2.devices.allow", "c 195:* rwm"],
                             ["lxc.mount.entry", "/dev/nvidia0 dev/nvidia0 none bind,optional,create=file"]]
    assert config["digest"] != before
    root.nodes("pve1").lxc(101).config.put(cores=2)
    assert "lxc.cgroup2.devices.allow: c 195:* rwm" in path.read_text()  # the API keeps raw lines


def test_pve_simulator_records_every_write(sim, root):
    root.nodes.get()
    root.cluster.status.get()
    assert sim.writes == []
    refused(lambda: root.nodes("pve1").lxc.post(vmid=99, ostemplate=sim.template))
    assert [(w.method, w.path, w.status) for w in sim.writes] == [("POST", "/nodes/pve1/lxc", 400)]


def test_pve_simulator_cluster_and_version_endpoints(sim, root):
    assert root.nodes("pve2").version.get()["version"] == "7.4-3"
    assert [n["node"] for n in root.nodes.get()] == ["pve1", "pve2"]
    assert [i["name"] for i in root.cluster.status.get() if i["type"] == "node"] == ["pve1", "pve2"]
    create(root, sim)
    vms = root.cluster.resources.get(type="vm")
    assert [(v["vmid"], v["node"], v["type"]) for v in vms] == [(101, "pve1", "lxc")]
    templates = root.nodes("pve1").storage("local").content.get(content="vztmpl")
    assert [t["volid"] for t in templates] == [sim.template]
    assert root.cluster.nextid.get() == 100
