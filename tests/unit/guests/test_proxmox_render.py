"""Pure rules of the Proxmox backend: desired config, diff against what PVE stores, the config-file edit,
the GPU wiring choice, credentials and endpoints. Configs below are written the way PVE stores them
(``type=veth`` and a generated ``hwaddr`` added, integers as numbers, a description ending in a newline)."""

from __future__ import annotations

import pytest

from labwright.errors import BadInput
from labwright.gpu.devices import DeviceNode
from labwright.gpu.nvidia.host import NodeGpu, parse_node_facts
from labwright.guests.model import spec_from_data
from labwright.guests.proxmox_api import Credentials, api_endpoint
from labwright.guests.proxmox_render import diff, edit_conf, gpu_lines, render, resolve_gpu, root_only

TEMPLATE = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"
NODES = (DeviceNode("/dev/nvidia0", "/dev/nvidia0", 195, 0), DeviceNode("/dev/nvidiactl", "/dev/nvidiactl", 195, 255),
         DeviceNode("/dev/nvidia-uvm", "/dev/nvidia-uvm", 508, 0),
         DeviceNode("/dev/nvidia-uvm-tools", "/dev/nvidia-uvm-tools", 508, 1))
FACTS = NodeGpu("550.54.14", {"nvidia-frontend": 195, "nvidia-uvm": 508}, NODES)


def spec(**fields):
    data = {"backend": "proxmox", "node": "pve1", "vmid": 201, "hostname": "llm1", "template": TEMPLATE,
            "memory": 4096, "cores": 4, "net": {"bridge": "vmbr0"}, "features": {"nesting": True}, **fields}
    return spec_from_data("@pct/pve1/201", data, source="lab.py")


def stored(**extra):
    """What GET .../config answers for spec() after PVE created it."""
    return {"arch": "amd64", "cores": 4, "memory": 4096, "swap": 512, "hostname": "llm1", "ostype": "debian",
            "features": "nesting=1", "net0": "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:12:34:56,ip=dhcp,type=veth",
            "rootfs": "local-lvm:vm-201-disk-0,size=8G", "tags": "labwright", "unprivileged": 1,
            "digest": "0" * 40, **extra}


def changes_of(guest, current, version=(8, 2), facts=None):
    wiring = resolve_gpu(guest, version, facts, "node pve1")
    return diff(guest, current, render(guest, wiring, "local-lvm"))


def test_what_pve_stored_is_no_change():
    result = changes_of(spec(description="LLM box"), stored(description="LLM box\n", tags="labwright;prod"))
    assert result.changes == [] and result.put == {} and result.lxc is None


def test_create_renders_every_option_as_config_lines():
    result = changes_of(spec(gpu="nvidia", onboot=True), None, facts=FACTS)
    lines = result.config_lines()
    assert "net0: name=eth0,bridge=vmbr0,ip=dhcp" in lines and "features: nesting=1" in lines
    assert "onboot: 1" in lines and "tags: labwright" in lines
    assert [line for line in lines if line.startswith("dev")] == [
        "dev0: /dev/nvidia0,gid=44,mode=0660", "dev1: /dev/nvidiactl,gid=44,mode=0660",
        "dev2: /dev/nvidia-uvm,gid=44,mode=0660", "dev3: /dev/nvidia-uvm-tools,gid=44,mode=0660"]


def test_features_compare_parsed_and_changes_are_named():
    assert changes_of(spec(features={"keyctl": True, "nesting": True}),
                      stored(features="nesting=1,keyctl=1")).changes == []
    result = changes_of(spec(features={"nesting": True, "fuse": True}), stored())
    assert result.put == {"features": "fuse=1,nesting=1"}


def test_a_net_change_keeps_the_mac_pve_generated():
    result = changes_of(spec(net={"bridge": "vmbr1"}), stored())
    assert result.put == {"net0": "name=eth0,bridge=vmbr1,ip=dhcp,hwaddr=BC:24:11:12:34:56"}


def test_bind_mounts_keep_their_index_and_volume_mounts_are_left_alone():
    current = stored(mp0="local-lvm:vm-201-disk-1,mp=/data,size=32G", mp1="/tank/models,mp=/models",
                     mp3="/old,mp=/old")
    result = changes_of(spec(mounts=[{"host": "/tank/models", "guest": "/models", "readonly": True},
                                     {"host": "/srv/cache", "guest": "/cache"}]), current)
    assert result.put == {"mp1": "/tank/models,mp=/models,ro=1", "mp2": "/srv/cache,mp=/cache"}
    assert result.delete == ["mp3"]


def test_gpu_none_removes_only_nvidia_devices():
    current = stored(dev0="/dev/nvidia0,gid=44,mode=0660", dev1="/dev/dri/renderD128,gid=104")
    result = changes_of(spec(), current)
    assert result.delete == ["dev0"] and "dev1" not in result.put


def test_unprivileged_cannot_flip_after_creation():
    with pytest.raises(BadInput, match="cannot change that after creation"):
        changes_of(spec(unprivileged=False), stored())


def test_classic_lines_use_the_hosts_majors_and_replace_a_stale_uvm_line():
    current = stored(lxc=[["lxc.apparmor.profile", "unconfined"], ["lxc.cgroup2.devices.allow", "c 195:* rwm"],
                          ["lxc.cgroup2.devices.allow", "c 236:* rwm"],
                          ["lxc.mount.entry", "/dev/nvidia0 dev/nvidia0 none bind,optional,create=file"]])
    result = changes_of(spec(gpu="nvidia"), current, version=(7, 4), facts=FACTS)
    assert result.lxc is not None and ("lxc.cgroup2.devices.allow", "c 508:* rwm") in result.lxc
    assert any(c.before == "c 236:* rwm" and c.after is None for c in result.changes)
    assert not any(c.before == "unconfined" for c in result.changes)


def test_edit_conf_touches_only_what_it_owns():
    text = ("#LLM box\narch: amd64\nmemory: 4096\nlxc.apparmor.profile: unconfined\n"
            "lxc.cgroup2.devices.allow: c 195:* rwm\nlxc.cgroup2.devices.allow: c 236:* rwm\n"
            "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file\n\n"
            "[pve:pending]\nmemory: 8192\n")
    new = edit_conf(text, {"dev0": "/dev/nvidia0,gid=44"}, ["memory"], [("lxc.cgroup2.devices.allow", "c 195:* rwm")],
                    frozenset({195, 508}))
    assert new == ("#LLM box\narch: amd64\nlxc.apparmor.profile: unconfined\ndev0: /dev/nvidia0,gid=44\n"
                   "lxc.cgroup2.devices.allow: c 195:* rwm\n\n[pve:pending]\nmemory: 8192\n")


def test_gpu_lines_without_mounts_are_only_known_majors():
    pairs = [("lxc.cgroup2.devices.allow", "c 10:200 rwm"), ("lxc.cgroup2.devices.allow", "c 195:* rwm")]
    assert gpu_lines(pairs, frozenset({195})) == {1}


def test_gpu_wiring_choice():
    assert resolve_gpu(spec(gpu="nvidia"), (8, 1), FACTS, "n").mode == "dev"
    assert resolve_gpu(spec(gpu="nvidia"), (8, 0), FACTS, "n").mode == "classic"
    with pytest.raises(BadInput, match="needs Proxmox VE 8.1"):
        resolve_gpu(spec(gpu="nvidia", gpu_mode="dev"), (7, 4), FACTS, "n")
    with pytest.raises(BadInput, match="no /dev/nvidia0"):
        resolve_gpu(spec(gpu="nvidia"), (8, 2), NodeGpu("550.54.14", {}, NODES[1:]), "n")
    no_uvm = resolve_gpu(spec(gpu="nvidia"), (8, 2), NodeGpu("550.54.14", {}, NODES[:2]), "n")
    assert no_uvm.preflight == (("nvidia-modprobe", "-u", "-c", "0"),)
    assert "/dev/nvidia-uvm,gid=44,mode=0660" in no_uvm.devices


def test_root_only_settings():
    assert root_only("dev3", "/dev/nvidia0") and root_only("mp0", "/tank,mp=/x")
    assert not root_only("mp0", "local-lvm:8,mp=/x") and not root_only("features", "nesting=1")
    assert root_only("features", "nesting=1,keyctl=1") and not root_only("memory", "4096")
    # pve-container src/PVE/LXC.pm check_ct_modify_config_perm: on a privileged CT nesting alone is root's too
    assert root_only("features", "nesting=1", privileged=True) and not root_only("memory", "4096", privileged=True)


def test_credentials_from_the_environment():
    token = Credentials.from_env({"PROXMOX_TOKEN_ID": "root@pam!ci", "PROXMOX_TOKEN_SECRET": "s"})
    assert (token.user, token.token, token.is_root, token.principal) == ("root@pam", "ci", False, "root@pam!ci")
    assert Credentials.from_env({"PROXMOX_USER": "root@pam", "PROXMOX_PASSWORD": "p"}).is_root
    for env, message in (({}, "no Proxmox credentials"), ({"PROXMOX_TOKEN_ID": "ci"}, "USER@REALM!TOKENNAME"),
                         ({"PROXMOX_TOKEN_ID": "root@pam!ci"}, "PROXMOX_TOKEN_SECRET is empty"),
                         ({"PROXMOX_USER": "root", "PROXMOX_PASSWORD": "p"}, "needs its realm")):
        with pytest.raises(BadInput, match=message):
            Credentials.from_env(env)


def test_api_endpoint_from_host_data(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    assert api_endpoint("pve1", {"proxmox_api_url": "https://pve1.lan:8006", "proxmox_ca_file": str(ca)}) == (
        "pve1.lan:8006", None, str(ca))
    assert api_endpoint("pve1", {"ssh_hostname": "10.0.0.5"}) == ("10.0.0.5:8006", None, True)
    assert api_endpoint("pve1", {"proxmox_api_url": "https://[fd00::5]:8443/pve/api2/json",
                                 "proxmox_verify_tls": False}) == ("[fd00::5]:8443", "pve", False)
    with pytest.raises(BadInput, match="https://"):
        api_endpoint("pve1", {"proxmox_api_url": "http://pve1:8006"})
    with pytest.raises(BadInput, match="does not exist"):
        api_endpoint("pve1", {"proxmox_ca_file": str(tmp_path / "missing.pem")})


def test_node_facts_from_the_ssh_script_output():
    output = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024\n"
              "@@devices\nCharacter devices:\n195 nvidia-frontend\n508 nvidia-uvm\n\nBlock devices:\n  8 sd\n"
              "@@nodes\nc3 0 /dev/nvidia0\nc3 ff /dev/nvidiactl\n1fc 0 /dev/nvidia-uvm\n")
    facts = parse_node_facts(output)
    assert facts.driver == "550.54.14" and facts.majors == {"nvidia-frontend": 195, "nvidia-uvm": 508}
    assert [(n.path, n.major, n.minor) for n in facts.nodes] == [
        ("/dev/nvidia0", 195, 0), ("/dev/nvidiactl", 195, 255), ("/dev/nvidia-uvm", 508, 0)]
    assert not facts.uvm_missing and parse_node_facts("@@devices\n@@nodes\n").driver is None


# What the facts script read on a real NVIDIA host (the lent H100, driver 580.159.04, open kernel module,
# 2026-11-22), in the script's own format: nvidia-uvm 238 and nvidia-caps 241 are dynamic, and the caps nodes
# are 0400/0444 there. The parsed result and both wirings below are what labwright printed on that machine.
H100_FACTS = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (nixbld@)  \n"
    "GCC version:  gcc version 15.3.0 (GCC) \n"
    "@@devices\nCharacter devices:\n  1 mem\n195 nvidia\n195 nvidiactl\n238 nvidia-uvm\n239 nvidia-nvswitch\n"
    "240 nvidia-nvlink\n241 nvidia-caps\n242 nvidia-caps-imex-channels\n\nBlock devices:\n259 blkext\n"
    "@@nodes\nc3 0 /dev/nvidia0\nee 0 /dev/nvidia-uvm\nee 1 /dev/nvidia-uvm-tools\nc3 ff /dev/nvidiactl\n"
    "f1 1 /dev/nvidia-caps/nvidia-cap1\nf1 2 /dev/nvidia-caps/nvidia-cap2\n")


def test_wiring_from_a_real_h100_host():
    facts = parse_node_facts(H100_FACTS)
    assert facts.driver == "580.159.04" and not facts.uvm_missing
    assert facts.majors["nvidia-uvm"] == 238 and facts.majors["nvidia-caps"] == 241
    guest = spec(gpu="nvidia")
    dev = resolve_gpu(guest, (8, 2), facts, "h100")
    assert dev.mode == "dev" and list(dev.devices) == [
        "/dev/nvidia0,gid=44,mode=0660", "/dev/nvidiactl,gid=44,mode=0660", "/dev/nvidia-uvm,gid=44,mode=0660",
        "/dev/nvidia-uvm-tools,gid=44,mode=0660", "/dev/nvidia-caps/nvidia-cap1,gid=44,mode=0400",
        "/dev/nvidia-caps/nvidia-cap2,gid=44,mode=0440"]
    classic = resolve_gpu(guest, (7, 4), facts, "h100")
    allows = [value for key, value in classic.lxc if key == "lxc.cgroup2.devices.allow"]
    mounts = [value.split()[0] for key, value in classic.lxc if key == "lxc.mount.entry"]
    assert classic.mode == "classic" and allows == ["c 195:* rwm", "c 238:* rwm", "c 241:* rwm"]
    assert mounts == ["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
                      "/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia-caps/nvidia-cap2"]
