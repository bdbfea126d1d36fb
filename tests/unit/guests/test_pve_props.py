"""PVE property strings compared by meaning (``labwright.guests.pve_props``), not by spelling.

PVE stores ``qm set VMID -hostpci0 02:00,pcie=on,x-vga=on`` (pve-docs 9.1.3 qm-pci-passthrough.adoc 356) as
given (qemu-server 9.2.6 src/PVE/API2/Qemu.pm 2473-2478) and reads every boolean key with ``parse_boolean``
(pve-common 9.2.1 src/PVE/JSONSchema.pm 1061-1066, 1116-1118): on/yes/true/1 are 1, off/no/false/0 are 0. A key
left out is the format's default (qemu-server src/PVE/QemuServer/PCI.pm 29-135; pve-container 6.1.10
src/PVE/LXC/Config.pm 345-423, 453-510, 1001-1028, 1080-1115). So any spelling of the inventory's device is no
change: a rewrite would be a root-only ``hostpciN`` write an API token is refused, for nothing.

The properties draw random spellings of one meaning (boolean words in any case, key order, defaults written out
or left out, the PCI domain written or not) and check that labwright plans nothing for them, and that a real
difference (one boolean flipped) is still planned. The typed parse is checked against the test suite's port of
PVE's own ``parse_property_string`` (tests/support/pve_schema.py), and each format's boolean keys and defaults
against the vendored pve-docs schema and the simulator's ``pve-qm-hostpci``.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from labwright.gpu.devices import DeviceNode
from labwright.gpu.nvidia.host import NodeGpu
from labwright.guests import pve_props
from labwright.guests.model import spec_from_data
from labwright.guests.proxmox_render import diff, render, resolve_gpu
from labwright.guests.proxmox_vm_render import diff_vm, render_vm
from labwright.guests.pve_props import HOSTPCI, LXC_DEV, LXC_FEATURES, LXC_MP, LXC_NET, QEMU_MEMORY, QEMU_NET
from support.pve_formats import PROPERTY_FORMATS
from support.pve_schema import ApiSchema, parse_property_string

TRUE, FALSE = ("1", "on", "yes", "true"), ("0", "off", "no", "false")
CASES = (str.lower, str.upper, str.capitalize)


@st.composite
def boolean_word(draw: Any, value: bool) -> str:
    return draw(st.sampled_from(CASES))(draw(st.sampled_from(TRUE if value else FALSE)))


@st.composite
def spelling(draw: Any, bare: tuple[str, str] | None, flags: dict[str, bool], defaults: dict[str, bool],
             others: dict[str, str] | None = None) -> str:
    """One way of writing a property string: the default key bare or as key=value, each boolean as any word PVE
    reads as it, one that equals its default left out or written out, the parts in any order."""
    parts = []
    if bare is not None:
        name, text = bare
        parts.append(text if draw(st.booleans()) else f"{name}={text}")
    for key, flag in flags.items():
        if key in defaults and defaults[key] == flag and draw(st.booleans()):
            continue
        parts.append(f"{key}={draw(boolean_word(flag))}")
    parts += [f"{k}={v}" for k, v in (others or {}).items()]
    return ",".join(draw(st.permutations(parts)))


# --- hostpci ---------------------------------------------------------------------------------------------
HOSTPCI_DEFAULTS = {"pcie": False, "x-vga": False, "rombar": True, "legacy-igd": False}
AS_CREATED = {  # what PVE stores after labwright created the VM of vm() (tests/unit/guests/test_vm.py)
    "bios": "ovmf", "boot": "order=scsi0;net0", "cores": 8, "efidisk0": "local-lvm:vm-120-disk-0,efitype=4m,"
    "pre-enrolled-keys=0,size=4M", "machine": "pc-q35-10.0+pve1", "memory": "16384", "name": "win1",
    "net0": "virtio=BC:24:11:7F:32:93,bridge=vmbr0", "ostype": "win11", "scsihw": "virtio-scsi-single",
    "scsi0": "local-lvm:vm-120-disk-1,discard=on,iothread=1,size=64G,ssd=1", "tags": "labwright",
}
pci_slots = st.tuples(st.integers(1, 0xFF), st.integers(0, 0x1F)).map(lambda t: f"{t[0]:02x}:{t[1]:02x}")
pci_ids = st.tuples(pci_slots, st.one_of(st.none(), st.integers(0, 7))).map(
    lambda t: t[0] if t[1] is None else f"{t[0]}.{t[1]}")


@st.composite
def host_spelling(draw: Any, ids: list[str]) -> str:
    """The ids with or without their domain (PVE's lspci filter takes an optional 0000:)."""
    return ";".join(f"0000:{i}" if draw(st.booleans()) else i for i in ids)


def vm(hostpci: Any) -> Any:
    data = {"backend": "proxmox", "kind": "vm", "node": "pve1", "vmid": 120, "memory": "16G", "cores": 8,
            "disk": "local-lvm:64", "net": {"bridge": "vmbr0"}, "ostype": "win11", "hostpci": hostpci}
    return spec_from_data("win1", data, source="lab.py")


def vm_changes(inventory: dict[str, Any], stored: str) -> Any:
    spec = vm(inventory)
    return diff_vm(spec, {**AS_CREATED, "hostpci0": stored}, render_vm(spec, ""))


@st.composite
def device(draw: Any) -> tuple[dict[str, Any], list[str], dict[str, bool]]:
    """An inventory device (its flags given or left to labwright's q35/PVE defaults) and what PVE makes of it."""
    ids = sorted(set(draw(st.lists(pci_ids, min_size=1, max_size=2))))
    given = {k: draw(st.one_of(st.none(), st.booleans())) for k in ("pcie", "x-vga", "rombar")}
    inventory = {"host": ";".join(ids), **{k: v for k, v in given.items() if v is not None}}
    effective = {**HOSTPCI_DEFAULTS, "pcie": True, **{k: v for k, v in given.items() if v is not None}}
    return inventory, ids, effective  # pcie: labwright's default on q35 is 1


def test_the_pve_docs_spelling_is_no_change_and_no_root_only_write():
    """pve-docs' own example, as PVE stores it, is the device labwright renders as 0000:02:00,pcie=1,x-vga=1."""
    changes = vm_changes({"host": "0000:02:00", "x-vga": True}, "02:00,pcie=on,x-vga=on")
    assert changes.changes == [] and changes.put == {} and changes.delete == []
    assert pve_props.same("02:00,pcie=on,x-vga=on", "0000:02:00,pcie=1,x-vga=1", HOSTPCI)


@given(device().flatmap(lambda d: st.tuples(st.just(d), host_spelling(d[1]).flatmap(
    lambda host: spelling(("host", host), d[2], HOSTPCI_DEFAULTS)))))
def test_any_spelling_of_the_inventorys_device_is_no_change(case):
    (inventory, _, _), stored = case
    changes = vm_changes(inventory, stored)
    assert changes.changes == [] and changes.put == {} and changes.delete == [], stored


@given(device().flatmap(lambda d: st.tuples(st.just(d), st.sampled_from(sorted(d[2])), host_spelling(d[1]))).flatmap(
    lambda c: st.tuples(st.just(c), spelling(("host", c[2]), {**c[0][2], c[1]: not c[0][2][c[1]]},
                                             HOSTPCI_DEFAULTS))))
def test_a_flipped_flag_in_any_spelling_is_still_a_change(case):
    ((inventory, _, _), flipped, _), stored = case
    changes = vm_changes(inventory, stored)
    assert list(changes.put) == ["hostpci0"], (flipped, stored)
    assert not pve_props.same(stored, changes.put["hostpci0"], HOSTPCI)


@given(st.lists(pci_ids, min_size=1, max_size=2).flatmap(
    lambda ids: st.tuples(st.just(";".join(ids)), st.fixed_dictionaries(
        {k: st.booleans() for k in HOSTPCI_DEFAULTS})).flatmap(
        lambda t: spelling(("host", t[0]), t[1], HOSTPCI_DEFAULTS, {"driver": "vfio"}))))
def test_labwrights_parse_agrees_with_pves_parse_property_string(text):
    """Typed the way the suite's port of PVE's parse_property_string types it (booleans 1/0), the host ids with
    the domain PVE's lspci filter assumes."""
    pve = parse_property_string(PROPERTY_FORMATS["pve-qm-hostpci"], text)
    ours = pve_props.parse(text, HOSTPCI)
    assert ours.pop("host") == ";".join(pve_props.normalize_pci_id(i) for i in pve.pop("host").split(";"))
    assert ours == pve


def test_host_ids_read_with_their_domain_and_in_order():
    assert pve_props.parse("01:00.0;0000:01:00.1,pcie=yes", HOSTPCI) == {
        "host": "0000:01:00.0;0000:01:00.1", "pcie": "1"}
    assert not pve_props.same("01:00.1;01:00.0", "01:00.0;01:00.1", HOSTPCI)  # function order is kept
    assert not pve_props.same("02:00", "02:00.0", HOSTPCI)  # the whole slot is not one function


def test_a_host_key_anywhere_makes_a_device_by_address():
    """check_hostpci_perm (Qemu.pm 918-936) parses the value: a `host` key anywhere is root's, a mapping is not."""
    assert pve_props.parse("pcie=1,mapping=rtx4090", HOSTPCI).get("host") is None
    assert pve_props.parse("pcie=1,host=01:00", HOSTPCI)["host"] == "0000:01:00"


# --- qemu net and memory ------------------------------------------------------------------------------
@given(st.integers(16, 1 << 20), st.booleans())
def test_memory_as_a_property_string_is_the_same_memory(mib, keyed):
    stored = f"current={mib}" if keyed else str(mib)
    assert pve_props.same(stored, str(mib), QEMU_MEMORY)
    assert pve_props.same(None, "512", QEMU_MEMORY)  # parse_memory: unset is the default (Memory.pm 86-94)


MAC = "BC:24:11:7F:32:93"


@given(st.fixed_dictionaries({"firewall": st.booleans(), "link_down": st.booleans()}).flatmap(
    lambda flags: spelling(None, flags, {}, {"virtio": MAC, "bridge": "vmbr0"})))
def test_a_nic_pve_stored_with_its_mac_and_flags_is_the_inventorys(stored):
    spec = vm({"host": "0000:01:00"})
    assert "net0" not in diff_vm(spec, {**AS_CREATED, "net0": stored}, render_vm(spec, "")).put
    other = spec_from_data("win1", {"backend": "proxmox", "kind": "vm", "node": "pve1", "vmid": 120,
                                    "memory": "16G", "cores": 8, "disk": "local-lvm:64", "ostype": "win11",
                                    "net": {"bridge": "vmbr1"}, "hostpci": {"host": "0000:01:00"}}, source="lab.py")
    put = diff_vm(other, {**AS_CREATED, "net0": stored}, render_vm(other, "")).put
    assert put["net0"] == f"virtio={MAC},bridge=vmbr1"  # the MAC PVE made is kept


# --- containers ---------------------------------------------------------------------------------------
TEMPLATE = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"


def ct(**fields: Any) -> Any:
    data = {"backend": "proxmox", "node": "pve1", "vmid": 201, "hostname": "llm1", "template": TEMPLATE,
            "memory": 4096, "cores": 4, "net": {"bridge": "vmbr0"}, **fields}
    return spec_from_data("@pct/pve1/201", data, source="lab.py")


def ct_stored(**extra: Any) -> dict[str, Any]:
    return {"arch": "amd64", "cores": 4, "memory": 4096, "swap": 512, "hostname": "llm1", "ostype": "debian",
            "net0": "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:12:34:56,ip=dhcp,type=veth",
            "rootfs": "local-lvm:vm-201-disk-0,size=8G", "tags": "labwright", "unprivileged": 1, **extra}


def ct_changes(spec: Any, current: dict[str, Any]) -> Any:
    return diff(spec, current, render(spec, resolve_gpu(spec, (8, 2), None, "node pve1"), "local-lvm"))


FEATURES = ("nesting", "keyctl", "fuse", "mknod", "force_rw_sys")
MP_DEFAULTS = {"replicate": True, "shared": False, "keepattrs": False}


@given(st.fixed_dictionaries({k: st.booleans() for k in ("keyctl", "fuse", "mknod")}).flatmap(
    lambda f: st.tuples(st.just(f), spelling(None, {"nesting": True, **f, "force_rw_sys": False},
                                             dict.fromkeys(FEATURES, False)))))
def test_container_features_in_any_spelling_are_no_change(case):
    wanted, stored = case
    spec = ct(features={"nesting": True, **{k: True for k, v in wanted.items() if v}})
    assert "features" not in ct_changes(spec, ct_stored(features=stored)).put, stored
    assert "features" in ct_changes(ct(features={"nesting": True, "fuse": not wanted["fuse"]}),
                                    ct_stored(features=stored)).put


@given(st.booleans().flatmap(lambda ro: st.tuples(st.just(ro), spelling(
    ("volume", "/tank/models"), {**({"ro": True} if ro else {}), **MP_DEFAULTS}, MP_DEFAULTS, {"mp": "/models"}))))
def test_a_bind_mount_in_any_spelling_is_no_change(case):
    readonly, stored = case
    result = ct_changes(ct(mounts=[{"host": "/tank/models", "guest": "/models", "readonly": readonly}]),
                        ct_stored(mp0=stored))
    assert result.put == {} and result.delete == [], stored
    flipped = ct_changes(ct(mounts=[{"host": "/tank/models", "guest": "/models", "readonly": not readonly}]),
                         ct_stored(mp0=stored))
    assert list(flipped.put) == ["mp0"], stored


def test_ro_written_0_is_not_ro_unset():
    """No schema default for ``ro``: a template's backup makes an unset ``ro`` 1 (pve-container VZDump/LXC.pm
    171-172), so ``ro=0`` is kept apart from no ``ro``."""
    assert not pve_props.same("/tank,mp=/t,ro=0", "/tank,mp=/t", LXC_MP)
    assert pve_props.same("/tank,mp=/t,ro=off", "/tank,mp=/t,ro=0", LXC_MP)


FACTS = NodeGpu("550.54.14", {"nvidia-frontend": 195, "nvidia-uvm": 508}, (
    DeviceNode("/dev/nvidia0", "/dev/nvidia0", 195, 0), DeviceNode("/dev/nvidiactl", "/dev/nvidiactl", 195, 255),
    DeviceNode("/dev/nvidia-uvm", "/dev/nvidia-uvm", 508, 0),
    DeviceNode("/dev/nvidia-uvm-tools", "/dev/nvidia-uvm-tools", 508, 1)))
GPU_NODES = ("/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")


@given(st.data())
def test_gpu_device_nodes_in_any_spelling_are_no_change(data):
    current = {}
    for index, path in enumerate(GPU_NODES):
        gid = data.draw(st.sampled_from(["44", "044", "+44"]))
        flags = {"deny-write": False} if data.draw(st.booleans()) else {}
        current[f"dev{index}"] = data.draw(spelling(("path", path), flags, {}, {"gid": gid, "mode": "0660"}))
    spec = ct(gpu="nvidia", features={"nesting": True})
    desired = render(spec, resolve_gpu(spec, (8, 2), FACTS, "node pve1"), "local-lvm")
    result = diff(spec, ct_stored(features="nesting=1", **current), desired)
    assert not any(k.startswith("dev") for k in [*result.put, *result.delete]), current


@given(st.permutations(["name=eth0", "bridge=vmbr0", "ip=dhcp", "type=veth", "hwaddr=BC:24:11:12:34:56"]),
       boolean_word(False))
def test_a_container_nic_in_any_order_with_flags_off_is_no_change(parts, off):
    stored = ",".join([*parts, f"firewall={off}"])
    assert ct_changes(ct(), ct_stored(net0=stored)).put == {}


# --- the formats against PVE's schema ------------------------------------------------------------------
def _schema_formats() -> dict[str, dict[str, Any]]:
    schema = ApiSchema.load()
    lxc = schema.endpoints["/nodes/{node}/lxc/{vmid}/config"].properties("PUT")
    qemu = schema.endpoints["/nodes/{node}/qemu/{vmid}/config"].properties("PUT")
    return {"mp": lxc["mp[n]"]["format"], "dev": lxc["dev[n]"]["format"], "lxc-net": lxc["net[n]"]["format"],
            "features": lxc["features"]["format"], "qemu-net": qemu["net[n]"]["format"],
            "memory": qemu["memory"]["format"], "hostpci": PROPERTY_FORMATS["pve-qm-hostpci"]}


OURS = {"mp": LXC_MP, "dev": LXC_DEV, "lxc-net": LXC_NET, "features": LXC_FEATURES, "qemu-net": QEMU_NET,
        "memory": QEMU_MEMORY, "hostpci": HOSTPCI}


@pytest.mark.parametrize("name", sorted(OURS))
def test_every_boolean_key_and_default_pve_declares_is_known(name):
    """A boolean key missing here would be compared as a string (pcie=on against pcie=1): the old bug."""
    pve = _schema_formats()[name]
    ours = OURS[name]
    for key, prop in pve.items():
        if prop.get("alias"):
            assert ours.key_aliases.get(key) == (prop["keyAlias"], prop["alias"]), key
            continue
        assert key in ours.keys, f"{name}: {key} unknown to labwright"
        kind = prop.get("type", "string")
        assert ours.keys[key].type == (kind if kind in ("boolean", "integer", "number") else "string"), key
        default = prop.get("default")
        assert ours.keys[key].default == (None if default is None else str(default)), key
        if prop.get("default_key"):
            assert ours.default_key == key
