"""Guest data from inventories: the accepted forms, and one clear line for each bad input."""

from __future__ import annotations

import pytest

from labwright.errors import BadInput
from labwright.guests.fields import parse_gib, parse_memory, parse_mib
from labwright.guests.model import Change, Plan, load_guests, select_guests, spec_from_data

PVE = {"backend": "proxmox", "node": "pve1", "vmid": 201,
       "template": "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"}


def refused(host: str, data: dict) -> str:
    with pytest.raises(BadInput) as info:
        spec_from_data(host, data, source="inv.py")
    message = str(info.value)
    assert "\n" not in message and message.startswith("inv.py: ")
    return message


def write(tmp_path, text: str):
    path = tmp_path / "inv.py"
    path.write_text(text)
    return path


# --- sizes -------------------------------------------------------------------------------------
@pytest.mark.parametrize(("value", "mib"), [
    (8192, 8192), ("8192", 8192), ("8G", 8192), ("8GiB", 8192), ("8gb", 8192), ("8 G", 8192), ("512M", 512),
    ("512MiB", 512), ("1.5G", 1536), ("1T", 1048576), (2048.0, 2048),
])
def test_memory_accepts_numbers_and_binary_units(value, mib):
    assert parse_memory(value, "memory") == mib


@pytest.mark.parametrize(("value", "fragment"), [
    ("lots", "is not a size"), ("8 gigs", "is not a size"), ("8X", "is not a size"), ("G8", "is not a size"),
    ("", "is not a size"), (True, "is not a size"), (None, "is not a size"), ([8], "is not a size"),
    ("8b", "is not a size"), (-1, "negative"), ("1.3M", "whole number of MiB"),
    # memory: 8 meant as GiB, and bytes written where MiB were meant
    (8, 'for GiB write "8G"'), (8589934592, "bytes?"),
])
def test_memory_garbage_is_one_line_naming_the_value(value, fragment):
    with pytest.raises(BadInput) as info:
        parse_memory(value, "inv.py: guest a: memory")
    assert fragment in str(info.value) and "\n" not in str(info.value)
    assert str(info.value).startswith("inv.py: guest a: memory: ")


def test_swap_zero_is_allowed():
    assert parse_mib(0, "swap") == 0
    assert parse_mib("512M", "swap") == 512


@pytest.mark.parametrize(("value", "gib"), [(64, 64), ("64", 64), ("64G", 64), ("64GiB", 64), ("1T", 1024)])
def test_disk_sizes_are_gib(value, gib):
    assert parse_gib(value, "rootfs") == gib


@pytest.mark.parametrize("value", ["0", "512M", "big", -3])
def test_disk_size_refusals(value):
    with pytest.raises(BadInput):
        parse_gib(value, "rootfs")


# --- the spec ----------------------------------------------------------------------------------
def test_example_proxmox_guest_parses_to_mib_and_gib():
    spec = spec_from_data("@pct/pve1/201", {
        **PVE, "hostname": "llm1", "cores": 8, "memory": "32G", "swap": 0, "rootfs": "local-lvm:64",
        "net": {"name": "eth0", "bridge": "vmbr0", "ip": "dhcp"}, "features": {"nesting": True},
        "mounts": [{"host": "/tank/models", "guest": "/models", "readonly": True}], "gpu": "nvidia",
    }, source="inv.py")
    assert (spec.name, spec.node, spec.vmid, spec.memory, spec.swap) == ("llm1", "pve1", 201, 32768, 0)
    assert spec.rootfs is not None and (spec.rootfs.storage, spec.rootfs.size_gib) == ("local-lvm", 64)
    assert spec.unprivileged is True and spec.feature_map == {"nesting": True} and spec.wants_gpu
    assert spec.mounts[0].readonly and spec.mounts[0].required and spec.net[0].bridge == "vmbr0"
    assert spec.where == "inv.py: guest llm1"


def test_lxd_guest_takes_name_and_remote_from_the_host_name():
    spec = spec_from_data("@lxd/nas:llama1", {"backend": "lxd", "gpu": "nvidia", "cores": 6}, source="inv.py")
    assert (spec.name, spec.node, spec.gpu_mode, spec.unprivileged) == ("llama1", "nas", "auto", True)
    local = spec_from_data("@lxd/web1", {"backend": "lxd", "image": "debian/12"}, source="inv.py")
    assert (local.name, local.node, local.template) == ("web1", None, "debian/12")


def test_the_connector_in_the_host_name_implies_the_backend():
    lxd = spec_from_data("@lxd/web1", {"cores": 2})
    assert (lxd.backend, lxd.name, lxd.cores) == ("lxd", "web1", 2)
    pve = spec_from_data("@pct/pve1/201", {"cores": 2})
    assert (pve.backend, pve.node, pve.vmid) == ("proxmox", "pve1", 201)
    assert spec_from_data("@lxd/web1", {"backend": "lxd"}).backend == "lxd"  # saying it is fine too


def test_features_in_three_spellings_agree():
    as_dict = spec_from_data("a", {"backend": "lxd", "features": {"nesting": True, "mount": ["nfs", "cifs"]}})
    as_list = spec_from_data("a", {"backend": "lxd", "features": ["nesting"]})
    as_text = spec_from_data("a", {"backend": "lxd", "features": "nesting=1,mount=nfs;cifs"})
    assert as_dict.features == as_text.features == (("mount", "nfs;cifs"), ("nesting", True))
    assert as_list.feature_map == {"nesting": True}


@pytest.mark.parametrize("vmid", [99, 0, -5, 1_000_000_000, "abc", True, 12.5])
def test_vmid_outside_the_pve_range_is_refused(vmid):
    message = refused("llm1", {**PVE, "vmid": vmid})
    assert "vmid" in message


def test_vmid_edges_are_accepted():
    assert spec_from_data("a", {**PVE, "vmid": 100}).vmid == 100
    assert spec_from_data("a", {**PVE, "vmid": "999999999"}).vmid == 999_999_999


@pytest.mark.parametrize(("host", "data", "fragment"), [
    ("a", {**PVE, "backend": "docker"}, "backend: 'docker' must be one of proxmox, lxd"),
    ("box1", {"cores": 2}, "guest box1: no backend: add backend: 'lxd' or 'proxmox' to its guest data"),
    ("@lxd/web1", {"backend": "proxmox", "node": "pve1", "vmid": 201},
     "backend 'proxmox' disagrees with the host name @lxd/web1 (an LXD guest)"),
    ("@pct/pve1/201", {"backend": "lxd"}, "backend 'lxd' disagrees with the host name @pct/pve1/201 (a Proxmox guest)"),
    ("a", {**PVE, "node": None}, "needs `node`"),
    ("a", {**PVE, "node": "pve 1"}, "node: 'pve 1' is not a node name"),
    ("@pct/pve1/201", {**PVE, "node": "pve2"}, "disagrees with the host name"),
    ("@pct/pve1/201", {**PVE, "vmid": 202}, "vmid 202 disagrees"),
    ("a", {**PVE, "vmid": None}, "needs `vmid`"),
    ("a", {**PVE, "template": "debian-12.tar.zst"}, "must be STORAGE:vztmpl/FILE"),
    ("a", {**PVE, "memory": "8 gigs"}, "memory: '8 gigs' is not a size"),
    ("a", {**PVE, "memory": 8}, 'for GiB write "8G"'),
    ("a", {**PVE, "cores": 0}, "cores: 0 is outside 1-8192"),
    ("a", {**PVE, "gpu": "radeon"}, "gpu: 'radeon' must be one of nvidia, amd, intel, auto, none"),
    ("a", {**PVE, "gpu_mode": "unix-char"}, "gpu_mode 'unix-char' is not a proxmox mode"),
    ("a", {"backend": "lxd", "gpu_mode": "dev"}, "gpu_mode 'dev' is not a lxd mode"),
    ("a", {**PVE, "unprivileged": "maybe"}, "unprivileged: 'maybe' is not true or false"),
    ("a", {**PVE, "features": {"docker": True}}, "unknown feature 'docker'"),
    ("a", {**PVE, "features": {"mount": "nfs cifs"}}, "must list filesystem types"),
    ("a", {**PVE, "mounts": [{"host": "tank", "guest": "/models"}]}, "mounts[0].host: 'tank' must be an absolute path"),
    ("a", {**PVE, "mounts": [{"host": "/a", "guest": "/m"}, {"host": "/b", "guest": "/m/"}]}, "share a guest path"),
    ("a", {**PVE, "mounts": {"host": "/a"}}, "is not a list"),
    # sweep at 2b91fd1: the host's / read-write at the guest's /proc was accepted
    ("a", {**PVE, "mounts": [{"host": "/", "guest": "/proc"}]}, "the guest's root or a kernel filesystem"),
    ("a", {**PVE, "mounts": [{"host": "/srv/m", "guest": "/sys/x"}]}, "the guest's root or a kernel filesystem"),
    ("a", {**PVE, "mounts": [{"host": "/etc", "guest": "/m"}]}, "host '/etc' is a system directory"),
    ("a", {**PVE, "mounts": [{"host": "/", "guest": "/m", "readonly": False}]}, "host '/' is a system directory"),
    ("a", {**PVE, "mounts": [{"host": "/a", "guest": "/m", "ro": True}]},
     "mounts[0].ro: unknown key (known keys: guest, host, name, readonly, required, shift)"),
    ("a", {**PVE, "net": {"ip": "dhcp"}}, "net[0].bridge: None is missing"),
    ("a", {**PVE, "net": {"bridge": "vmbr0", "ip": "10.0.0.5"}}, "must be dhcp, manual or an address with prefix"),
    ("a", {**PVE, "net": [{"bridge": "vmbr0"}, {"bridge": "vmbr1", "name": "eth0"}]}, "share a name"),
    ("a", {**PVE, "net": {"bridge": "vmbr0", "vlan": 5000}}, "net[0].vlan: 5000 is outside 1-4094"),
    ("a", {**PVE, "net": {"bridge": "vmbr0", "ip": "10.0.0.300/24"}}, "ip '10.0.0.300/24' must be dhcp, manual"),
    ("a", {**PVE, "net": {"bridge": "vmbr0", "ip": "127.0.0.5/8"}}, "ip 127.0.0.5/8 is not a usable host address"),
    ("a", {**PVE, "net": {"bridge": "vmbr0", "ip": "10.0.0.0/24"}}, "is the network's network address"),
    ("a", {**PVE, "net": {"bridge": "vmbr0", "ip": "10.0.0.255/24"}}, "is the network's broadcast address"),
    ("a", {**PVE, "net": {"bridge": "vmbr0", "ip": "10.0.0.5/24", "gw": "192.168.1.1"}},
     "gw 192.168.1.1 is not another address in 10.0.0.0/24"),
    ("a", {**PVE, "net": {"bridge": "vmbr0", "ip": "10.0.0.5/24", "gw": "router"}}, "gw 'router' is not an IPv4"),
    ("a", {**PVE, "net": {"bridge": "vmbr0", "gw": "10.0.0.1"}}, "gw '10.0.0.1' needs a static ip"),
    ("a", {**PVE, "net": {"bridge": "vmbr0", "hwaddr": "zz"}}, "net[0].hwaddr: 'zz' is not a MAC address"),
    ("a", {**PVE, "net": {"bridge": "vmbr0", "hwaddr": "01:00:5e:00:00:01"}}, "is a multicast address"),
    ("a", {**PVE, "rootfs": "local-lvm:lots"}, "rootfs.size: 'lots' is not a size"),
    ("a", {**PVE, "rootfs": {"pool": "x"}}, "rootfs.pool: unknown key"),
    ("a", {**PVE, "hostname": "llm_1"}, "hostname: 'llm_1' is not a valid host name"),
    ("a", {**PVE, "profiles": ["default"]}, "profiles are an LXD setting"),
    ("a", {**PVE, "clone": "gold"}, "clone is an LXD setting"),
    ("a", {**PVE, "memroy": 8192}, "memroy: unknown key (did you mean memory?)"),
    ("a", {**PVE, "start": "false"}, "start: 'false' is a string, not true or false; write false without quotes"),
    ("a", {**PVE, "unprivileged": "yes"}, "unprivileged: 'yes' is a string, not true or false; write true"),
    ("a", {**PVE, "mounts": [{"host": "/a", "guest": "/m", "readonly": "false"}]}, "write false without quotes"),
    ("a", {"backend": "lxd", "vmid": 101}, "vmid is for proxmox guests"),
    ("9lives", {"backend": "lxd"}, "'9lives' is not a valid LXD instance name"),
    ("a", {"backend": "lxd", "image": "x", "template": "y"}, "not both"),
    ("a", {"backend": "lxd", "image": "x", "clone": "gold"}, "`image` or `clone`, not both"),
    ("a", {"backend": "lxd", "lxd_config": {"volatile.uuid": "x"}}, "cannot set volatile.* keys"),
    ("a", {"backend": "lxd", "lxd_config": {"limits.cpu": "abc"}}, "lxd_config limits.cpu 'abc' is not a CPU count"),
    ("a", {"backend": "lxd", "lxd_config": {"limits.memory": "lots"}}, "lxd_config limits.memory 'lots' is not a size"),
    ("a", "not a dict", "`guest` must be a dict"),
])
def test_bad_guest_data_is_one_line_naming_the_field(host, data, fragment):
    assert fragment in refused(host, data)


def test_unnamed_proxmox_guest_is_named_like_pve_names_it():
    assert spec_from_data("@pct/pve1/205", {**PVE, "vmid": 205}).name == "ct205"


# --- inventories -------------------------------------------------------------------------------
def test_example_lab_inventory_guests(repo):
    specs = load_guests(repo / "inventories" / "lab.py")
    assert [(s.name, s.backend, s.node, s.vmid) for s in specs] == [
        ("llm1", "proxmox", "pve1", 201), ("desk1", "proxmox", "pve2", 301), ("llama1", "lxd", "nas", None)]
    # The node's own inventory data (API URL, SSH address) travels with the guest for the backend.
    assert specs[0].node_data["proxmox_api_url"].startswith("https://")
    assert specs[0].host_data["ssh_hostname"] == "192.168.1.11" and "guest" not in specs[0].host_data


def test_duplicate_guest_names_are_refused(tmp_path):
    path = write(tmp_path, """
guests = ([("@lxd/web", {"guest": {"backend": "lxd"}}), ("web", {"guest": {"backend": "lxd"}})], {})
""")
    with pytest.raises(BadInput) as info:
        load_guests(path)
    assert "guest name 'web' is declared twice (hosts @lxd/web and web)" in str(info.value)
    assert "\n" not in str(info.value)


def test_duplicate_vmids_are_refused(tmp_path):
    path = write(tmp_path, f"""
a = [("@pct/pve1/201", {{"guest": {{**{PVE!r}, "hostname": "one"}}}}),
     ("@pct/pve2/201", {{"guest": {{**{PVE!r}, "node": "pve2", "hostname": "two"}}}})]
""")
    with pytest.raises(BadInput, match="vmid 201 is used twice"):
        load_guests(path)


def test_same_lxd_name_on_two_remotes_is_fine(tmp_path):
    path = write(tmp_path, 'g = [("@lxd/a:web", {"guest": {"backend": "lxd"}}), '
                           '("@lxd/b:web", {"guest": {"backend": "lxd"}})]\n')
    assert [s.node for s in load_guests(path)] == ["a", "b"]


def test_group_data_is_merged_and_helpers_are_ignored(tmp_path):
    path = write(tmp_path, """
import os
HELPER = 3
nodes = ([("pve1", {"ssh_hostname": "127.0.0.1"})], {"proxmox_api_url": "https://127.0.0.1:8006"})
cts = ([("@pct/pve1/150", {"guest": {"backend": "proxmox", "template": "local:vztmpl/x.tar.zst"}})], {"t": 1})
""")
    (spec,) = load_guests(path)
    assert (spec.node, spec.vmid, spec.host_data["t"]) == ("pve1", 150, 1)
    assert spec.node_data == {"ssh_hostname": "127.0.0.1", "proxmox_api_url": "https://127.0.0.1:8006"}


def test_select_guests_by_name(tmp_path):
    path = write(tmp_path, 'g = ["x", ("@lxd/a", {"guest": {"backend": "lxd"}}), '
                           '("@lxd/b", {"guest": {"backend": "lxd"}})]\n')
    specs = load_guests(path)
    assert [s.name for s in select_guests(specs, ["b"], "inv")] == ["b"]
    assert select_guests(specs, None, "inv") == specs
    with pytest.raises(BadInput, match=r"no guest named c \(guests: a, b\)"):
        select_guests(specs, ["c"], "inv")


def test_change_and_plan_render():
    assert Change("config limits.cpu", None, "2").describe() == "+ config limits.cpu: 2"
    assert Change("config limits.cpu", "2", "4").describe() == "~ config limits.cpu: 2 -> 4"
    assert Change("device gpu", {"type": "gpu"}, None).describe() == "- device gpu: type=gpu"
    plan = Plan("a", "lxd", "update", [Change("x", 1, 2)], ["memory: 8192"], ["n"])
    assert plan.changed and plan.to_dict()["changes"] == [{"what": "x", "before": 1, "after": 2}]
    assert not Plan("a", "lxd", "none").changed
