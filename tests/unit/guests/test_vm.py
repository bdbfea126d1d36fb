"""`kind: vm` guests: parsing (one-line refusals), rendering and diffing a qemu config, the IOMMU group rule.

Pure functions on plain dicts; the PCI listings have the fields and values of PVE's ``GET
/nodes/NODE/hardware/pci`` (pve-common SysFSTools.pm ``lspci``), the configs those of ``GET .../qemu/VMID/config``.
"""

from __future__ import annotations

import pytest

from labwright.errors import BadInput
from labwright.guests.model import spec_from_data
from labwright.guests.proxmox_vm_render import check_iommu, diff_vm, disk_note, net_props, render_vm
from labwright.guests.vm import HostPci

GPU = {"id": "0000:01:00.0", "class": "0x030000", "vendor": "0x10de", "device": "0x2684", "iommugroup": 12,
       "device_name": "AD102 [GeForce RTX 4090]"}
AUDIO = {"id": "0000:01:00.1", "class": "0x040300", "vendor": "0x10de", "device": "0x22ba", "iommugroup": 12,
         "device_name": "AD102 High Definition Audio"}
USB = {"id": "0000:00:14.0", "class": "0x0c0330", "vendor": "0x8086", "device": "0x7ae0", "iommugroup": 12,
       "device_name": "USB 3.2 xHCI Controller"}
NVME = {"id": "0000:02:00.0", "class": "0x010802", "vendor": "0x144d", "device": "0xa80c", "iommugroup": 13}


def vm(**fields):
    data = {"backend": "proxmox", "kind": "vm", "node": "pve1", "vmid": 120, "memory": "16G", "cores": 8,
            "disk": "local-lvm:64", "net": {"bridge": "vmbr0"}, "hostpci": {"host": "0000:01:00", "x-vga": True},
            "ostype": "win11", **fields}
    return spec_from_data("win1", {k: v for k, v in data.items() if v is not None}, source="lab.py")


# --- parsing ---------------------------------------------------------------------------------------------
def test_a_passthrough_vm_defaults_to_ovmf_q35_and_pcie():
    spec = vm()
    assert spec.is_vm and spec.vm is not None
    assert (spec.vm.bios, spec.vm.machine, spec.vm.ostype) == ("ovmf", "q35", "win11")
    assert spec.vm.hostpci == (HostPci(host=("0000:01:00",), pcie=True, x_vga=True),)
    assert spec.vm.hostpci[0].value() == "0000:01:00,pcie=1,x-vga=1"


@pytest.mark.parametrize("hostpci, value", [
    ("0000:01:00,pcie=1,x-vga=1", "0000:01:00,pcie=1,x-vga=1"),  # PVE's own spelling
    ({"mapping": "rtx4090", "rombar": False}, "mapping=rtx4090,pcie=1,rombar=0"),
    ({"host": ["01:00.0", "01:00.1"], "pcie": False}, "01:00.0;01:00.1,pcie=0"),
])
def test_hostpci_forms(hostpci, value):
    assert vm(hostpci=hostpci).vm.hostpci[0].value() == value


def test_a_vm_without_devices_keeps_pves_defaults():
    spec = vm(hostpci=None, ostype="l26")
    assert (spec.vm.bios, spec.vm.machine, spec.vm.hostpci) == ("seabios", None, ())


@pytest.mark.parametrize("fields, needle", [
    ({"kind": "box"}, "kind: 'box' must be ct"),
    ({"backend": "lxd"}, "set backend: proxmox"),
    ({"template": "local:vztmpl/x.tar.zst"}, "template is a container setting and this guest is kind: vm"),
    ({"gpu": "nvidia"}, "gpu is a container setting and this guest is kind: vm; a VM gets its GPU as a PCI device"),
    ({"hostname": "win1"}, "hostname is a container setting"),
    ({"hostpci": {"host": "1:0"}}, "hostpci[0].host: '1:0' is not a PCI address"),
    ({"hostpci": {"host": "0000:01:00", "mapping": "gpu"}}, "give `host` or `mapping`, not both"),
    ({"hostpci": {"pcie": True}}, "give the device's PCI address as `host`"),
    ({"hostpci": {"mapping": "9gpu"}}, "hostpci[0].mapping: '9gpu' is not a resource mapping id"),
    ({"hostpci": {"host": "0000:01:00", "romfile": "x.rom"}}, "hostpci[0].romfile: unknown key"),
    ({"hostpci": [{"host": "0000:01:00"}, {"host": "01:00"}]}, "0000:01:00 is already passed by"),
    ({"hostpci": [{"host": f"0000:{i:02x}:00"} for i in range(17)]}, "at most 16"),
    ({"machine": "pc", "hostpci": {"host": "0000:01:00", "pcie": True}}, "pcie: true needs machine: q35"),
    ({"machine": "virt-9"}, "machine: 'virt-9' must be q35, pc"),
    ({"bios": "uefi"}, "bios: 'uefi' must be seabios or ovmf"),
    ({"ostype": "windows"}, "ostype: 'windows' must be a Proxmox OS type"),
    ({"name": "win_1"}, "'win_1' is not a valid VM name"),
])
def test_bad_vm_input_is_one_line_naming_the_field(fields, needle):
    with pytest.raises(BadInput) as info:
        vm(**fields)
    message = str(info.value)
    assert needle in message and message.startswith("lab.py: guest") and "\n" not in message


def test_vm_keys_on_a_container_and_a_vm_behind_pct_are_refused():
    with pytest.raises(BadInput, match="hostpci is a VM setting; add kind: vm"):
        spec_from_data("@pct/pve1/201", {"backend": "proxmox", "hostpci": "0000:01:00"}, source="lab.py")
    with pytest.raises(BadInput, match="a VM is not reached through pct"):
        spec_from_data("@pct/pve1/201", {"backend": "proxmox", "kind": "vm"}, source="lab.py")


# --- render and diff --------------------------------------------------------------------------------------
def test_render_a_new_vm():
    desired = render_vm(vm(), "local-lvm")
    assert desired.options == {"name": "win1", "ostype": "win11", "bios": "ovmf", "scsihw": "virtio-scsi-single",
                               "machine": "q35", "cores": "8", "memory": "16384"}
    assert desired.nets == ["virtio,bridge=vmbr0"] and desired.hostpci == ["0000:01:00,pcie=1,x-vga=1"]
    assert desired.disk == "local-lvm:64,discard=on,iothread=1,ssd=1"
    assert desired.efidisk == "local-lvm:1,efitype=4m,pre-enrolled-keys=0"
    changes = diff_vm(vm(), None, desired)
    assert changes.put["hostpci0"] == "0000:01:00,pcie=1,x-vga=1" and changes.put["tags"] == "labwright"
    assert changes.put["net0"] == "virtio,bridge=vmbr0" and not changes.delete


#: What PVE stores for that create (the simulator's answer, checked against qemu-server's create_vm).
AS_CREATED = {
    "bios": "ovmf", "boot": "order=scsi0;net0", "cores": 8, "hostpci0": "0000:01:00,pcie=1,x-vga=1",
    "efidisk0": "local-lvm:vm-120-disk-0,efitype=4m,pre-enrolled-keys=0,size=4M", "machine": "pc-q35-10.0+pve1",
    "memory": "16384", "name": "win1", "net0": "virtio=BC:24:11:7F:32:93,bridge=vmbr0", "ostype": "win11",
    "scsi0": "local-lvm:vm-120-disk-1,discard=on,iothread=1,size=64G,ssd=1", "scsihw": "virtio-scsi-single",
    "tags": "labwright", "digest": "69f9b72f",
}


def test_what_pve_made_is_no_change():
    """PVE's pinned Windows machine, its generated MAC, disk sizes and boot order are not drift."""
    changes = diff_vm(vm(), AS_CREATED, render_vm(vm(), ""))
    assert changes.changes == [] and changes.put == {} and changes.delete == []


def test_changes_keep_the_mac_and_hostpci_indices():
    spec = vm(cores=4, net={"bridge": "vmbr1", "vlan": 20},
              hostpci=[{"host": "0000:01:00", "x-vga": True}, {"host": "0000:02:00.0"}])
    changes = diff_vm(spec, AS_CREATED, render_vm(spec, ""))
    assert changes.put == {"cores": "4", "net0": "virtio=BC:24:11:7F:32:93,bridge=vmbr1,tag=20",
                           "hostpci1": "0000:02:00.0,pcie=1"}
    assert net_props(changes.put["net0"])["macaddr"] == "BC:24:11:7F:32:93"


def test_a_dropped_device_is_detached_and_a_changed_one_rewritten():
    dropped = diff_vm(vm(hostpci=None, bios="ovmf", machine="q35"), AS_CREATED,
                      render_vm(vm(hostpci=None, bios="ovmf", machine="q35"), ""))
    assert dropped.delete == ["hostpci0"] and dropped.put == {}
    changed = vm(hostpci={"host": "01:00", "x-vga": False})
    out = diff_vm(changed, AS_CREATED, render_vm(changed, ""))
    assert out.put == {"hostpci0": "01:00,pcie=1,x-vga=0"} and out.delete == []


def test_an_existing_ovmf_vm_without_efi_disk_gets_one_and_a_bigger_disk_is_only_reported():
    config = {k: v for k, v in AS_CREATED.items() if k != "efidisk0"}
    out = diff_vm(vm(), config, render_vm(vm(), "local-lvm"))
    assert out.put == {"efidisk0": "local-lvm:1,efitype=4m,pre-enrolled-keys=0"}
    assert disk_note(vm(disk="local-lvm:128"), AS_CREATED).startswith("scsi0 is 64G, the inventory says 128G")
    assert disk_note(vm(), AS_CREATED) is None


def test_a_vm_address_is_set_in_the_guest_not_by_labwright():
    with pytest.raises(BadInput, match="a VM sets its own address"):
        render_vm(vm(net={"bridge": "vmbr0", "ip": "10.0.0.5/24"}), "local-lvm")


# --- the IOMMU group rule -----------------------------------------------------------------------------------
def test_the_gpu_with_its_own_audio_function_passes():
    notes = check_iommu(vm(hostpci={"host": "0000:01:00.0"}), [GPU, AUDIO, NVME], "pve1")
    assert notes == ["IOMMU group 12 on pve1: 0000:01:00.0, 0000:01:00.1 (passed whole)"]
    assert check_iommu(vm(hostpci={"host": "01:00"}), [GPU, AUDIO, NVME], "pve1") == notes


def test_a_group_shared_with_another_device_is_refused_naming_it_and_the_fix():
    with pytest.raises(BadInput) as info:
        check_iommu(vm(), [GPU, AUDIO, USB, NVME], "pve1")
    message = str(info.value)
    assert "0000:01:00.0 is in IOMMU group 12 with 0000:00:14.0 (USB 3.2 xHCI Controller)" in message
    assert "Pass the whole group" in message and "ACS" in message and "\n" not in message
    # passing the whole group is fine
    whole = vm(hostpci=[{"host": "0000:01:00", "x-vga": True}, {"host": "0000:00:14.0"}])
    assert check_iommu(whole, [GPU, AUDIO, USB, NVME], "pve1")


def test_a_device_not_on_the_node_or_without_iommu_is_refused():
    with pytest.raises(BadInput, match=r"hostpci\[0\] 0000:05:00: node pve1 has no such PCI device \(its display "
                                       r"devices: 0000:01:00.0 \(AD102"):
        check_iommu(vm(hostpci={"host": "0000:05:00"}), [GPU, AUDIO], "pve1")
    off = [{**GPU, "iommugroup": -1}, {**AUDIO, "iommugroup": -1}]
    with pytest.raises(BadInput, match="iommugroup -1: the IOMMU is off.*intel_iommu=on"):
        check_iommu(vm(), off, "pve1")


def test_a_mapped_device_is_left_to_pve():
    assert check_iommu(vm(hostpci={"mapping": "rtx4090"}), [], "pve1") == []
