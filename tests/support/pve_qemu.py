"""The qemu (VM) endpoints' behaviour after schema validation, and the node's PCI listing: qemu-server
``API2/Qemu.pm``, ``QemuServer.pm``, ``QemuServer/PCI.pm``; pve-manager ``API2/Hardware/PCI.pm``.

VMs live as ``nodes/NODE/qemu-server/VMID.conf`` files in the simulated pmxcfs, parsed and written like a
container's (``CtConfig``) but with qemu's ``[PENDING]`` section. What PVE does inside a worker happens inside a
simulated task (``qmcreate``, ``qmconfig``, ``qmstart``, ``qmstop``, ``qmdestroy``), with PVE's errors.

Provenance (proxmox/qemu-server 9.2.6, commit e6352be67f70; read for these behaviours):
- ``create_vm`` (src/PVE/API2/Qemu.pm 1159-1627): VM.Allocate on /vms/VMID else 403 (1302-1312); the parameters go
  through ``check_storage_access`` ("storage 'X' does not support vm images" 191-192), ``check_hostpci_perm``
  (918-936: anyone but root@pam is refused a device by address, "only root can set 'hostpciN' config for
  non-mapped devices"; a mapping needs Mapping.Use on /mapping/pci/ID) and ``add_random_macs`` (Network.pm 258-266)
  before the config is locked; ``create_and_lock_config`` -> pve-cluster's ``check_vmid_unused`` ("VM|CT N already
  exists on node 'X'") prefixed "unable to create VM N -" (1372-1375); in the ``qmcreate`` worker (1598) the disks
  are allocated, ``boot`` and ``smbios1``/``vmgenid`` generated (1506-1524), the machine pinned for Windows
  (1526-1530, Machine.pm ``check_and_pin_machine_string`` 457-473), tags de-duplicated (1534-1539); a failure
  frees the volumes and removes the config file (1545-1551, 1600-1608).
- ``update_vm_async``/``update_vm`` (2646-2775; ``update_vm_api`` 2070-2640): "no options specified" (2110), the
  digest check, ``check_lock``, hostpci permission on delete and set (2364, 2475-2477); POST runs in a ``qmconfig``
  worker and returns its UPID (2599-2604), PUT runs at once and returns null. On a running VM only the options
  that need no hotplug (name, description, onboot, tags, protection, startup) apply at once; everything else is
  kept in ``[PENDING]`` until the next start, as with ``hotplug`` left at its default of network,disk,usb
  (``vmconfig_hotplug_pending`` QemuServer.pm 4617-...), which labwright never relies on.
- ``destroy_vm`` (2776-2893): "VM N is running - destroy failed" (2842), worker ``qmdestroy``.
- start (``vm_start`` QemuServer.pm 5504-5545: "VM N already running"), then ``config_to_command`` ->
  ``parse_hostpci_devices``/``parse_hostpci`` (PCI.pm 431-530: "q35 machine model is not enabled", "Cannot set both
  'host' and 'mapping'.", "PCI device mapping not found for 'X'", "no PCI device found for 'ID'") and
  ``prepare_pci_device`` (PCI.pm 708-713: "cannot prepare PCI pass-through, IOMMU not present"); a device already
  passed to a running VM is "PCI device 'ID' already in use by VMID 'N'" (``reserve_pci_usage``).
- ``GET /nodes/NODE/hardware/pci``: pve-manager 9.2.11 PVE/API2/Hardware/PCI.pm 111-133 (classes 05, 06 and 0b left
  out by default, ``verbose`` adds the names), pve-common 9.2.1 src/PVE/SysFSTools.pm ``lspci`` 75-140
  (``iommugroup`` -1 without an ``iommu_group`` link).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from typing import Any

from support.pve_config import NEW_DISK_RE, CtConfig, digest, random_mac, to_api
from support.pve_formats import PROPERTY_FORMATS, parse_size, split_list
from support.pve_perms import ROOT, check_bridge_access, check_vm_modify_config_perm, fmt
from support.pve_schema import PveApiError, indexed_schema, param_error, parse_property_string, print_property_string
from support.pve_state import PveCluster, SimStorage, Task, TaskAbort

MiB = 1024**2
#: Options a running VM takes at once; the rest waits in [PENDING] for the next start.
LIVE = frozenset({"name", "description", "onboot", "tags", "protection", "startup", "lock"})
DISK = re.compile(r"^(?:ide|sata|scsi|virtio)\d+$|^efidisk0$|^tpmstate0$")
#: The machine version the simulated node's QEMU pins for a Windows guest (Machine.pm ``windows_get_pinned_...``).
PINNED = "10.0+pve1"
#: The vendored schema's NIC models (net[n] ``model`` enum).
MODELS = ("e1000", "e1000-82540em", "e1000-82544gc", "e1000-82545em", "e1000e", "i82551", "i82557b", "i82559er",
          "ne2k_isa", "ne2k_pci", "pcnet", "rtl8139", "virtio", "vmxnet3")
_UNBLACKLISTED_KEYS = ("id", "class", "vendor", "device", "iommugroup", "mdev")


class QmConfig(CtConfig):
    """A VM config: the container file rules, qemu's pending section header."""

    PENDING_HEADER = "PENDING"


def gpu_host_pci(shared_with: list[dict[str, object]] | None = None, iommu: bool = True) -> list[dict[str, object]]:
    """A desktop host with one NVIDIA GPU (RTX 4090 and its HDMI audio function, IOMMU group 12), an NVMe drive and
    a NIC in groups of their own, and the bridges sysfs lists too. ``shared_with``: devices added to the GPU's
    group (a board without ACS). ``iommu=False``: every group -1, as with the IOMMU off."""
    def dev(pci_id: str, cls: str, vendor: str, device: str, group: int, vname: str, dname: str) -> dict[str, object]:
        return {"id": pci_id, "class": cls, "vendor": vendor, "device": device, "iommugroup": group if iommu else -1,
                "vendor_name": vname, "device_name": dname, "subsystem_vendor": vendor, "subsystem_device": "0x0000"}
    devices = [
        dev("0000:00:00.0", "0x060000", "0x8086", "0xa700", 0, "Intel Corporation", "Raptor Lake Host Bridge"),
        dev("0000:00:01.0", "0x060400", "0x8086", "0xa70d", 1, "Intel Corporation", "Raptor Lake PCIe Root Port"),
        dev("0000:00:14.0", "0x0c0330", "0x8086", "0x7ae0", 5, "Intel Corporation", "USB 3.2 xHCI Controller"),
        dev("0000:01:00.0", "0x030000", "0x10de", "0x2684", 12, "NVIDIA Corporation", "AD102 [GeForce RTX 4090]"),
        dev("0000:01:00.1", "0x040300", "0x10de", "0x22ba", 12, "NVIDIA Corporation", "AD102 High Definition Audio"),
        dev("0000:02:00.0", "0x010802", "0x144d", "0xa80c", 13, "Samsung Electronics", "NVMe SSD Controller S4LV008"),
        dev("0000:03:00.0", "0x020000", "0x8086", "0x125c", 14, "Intel Corporation", "Ethernet Controller I226-V"),
    ]
    for extra in shared_with or []:
        devices.append({**extra, "iommugroup": 12 if iommu else -1})
    return devices


class Qemu:
    """The VM endpoints of one simulated cluster; ``props`` is create_vm's parameter schema."""

    def __init__(self, cluster: PveCluster, props: Mapping[str, Any], config_props: Mapping[str, Any]):
        self.cluster = cluster
        self.props = props
        self.config_props = config_props

    # --- files ------------------------------------------------------------------------------------------
    def load(self, node: str, vmid: int) -> tuple[QmConfig, str]:
        path = self.cluster.qemu_conf_path(node, vmid)
        try:
            text = path.read_text()
        except FileNotFoundError:
            raise PveApiError(500, f"Configuration file 'nodes/{node}/qemu-server/{vmid}.conf' does not exist") \
                from None
        return QmConfig.parse(text, vmid), digest(text)  # type: ignore[return-value]

    def save(self, node: str, vmid: int, conf: CtConfig) -> None:
        path = self.cluster.qemu_conf_path(node, vmid)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(conf.render())
        tmp.replace(path)

    def storage(self, sid: str) -> SimStorage:
        storage = self.cluster.storages.get(sid)
        if storage is None:
            raise PveApiError(500, f"storage '{sid}' does not exist")
        return storage

    # --- parameter checks before any worker -------------------------------------------------------------
    def _check_hostpci_perm(self, user: str, vmid: int, opt: str, value: str) -> None:
        """``check_hostpci_perm`` (Qemu.pm 918-936)."""
        if user == ROOT:
            return
        device = parse_property_string(PROPERTY_FORMATS["pve-qm-hostpci"], value)
        if device.get("host"):
            raise PveApiError(500, f"only root can set '{opt}' config for non-mapped devices")
        if device.get("mapping"):
            self.cluster.check_perm(user, f"/mapping/pci/{device['mapping']}", ["Mapping.Use"])
            self.cluster.check_perm(user, f"/vms/{vmid}", ["VM.Config.HWType"])
        else:
            raise PveApiError(500, "either 'host' or 'mapping' must be set.")
        if device.get("romfile") is not None:
            raise param_error({opt: "only root@pam can set 'romfile' option"})

    def _check_disks(self, user: str, params: Mapping[str, str]) -> None:
        """``check_storage_access``: a new disk ``STORAGE:SIZE`` needs a storage with ``images`` content."""
        for key, value in params.items():
            if not DISK.match(key):
                continue
            volume = parse_property_string(fmt(self.props, key), value).get("file", "")
            fresh = NEW_DISK_RE.match(volume)
            if fresh:
                storage = self.storage(fresh.group(1))
                if "images" not in storage.content:
                    raise param_error({"storage": f"storage '{storage.name}' does not support vm images"})
                self.cluster.check_perm(user, f"/storage/{storage.name}", ["Datastore.AllocateSpace"])

    def _net(self, value: str) -> str:
        """``parse_net`` + ``print_net``: a MAC is made up when none is given; printed ``MODEL=MAC,...``."""
        net_format = fmt(self.props, "net0")
        data = parse_property_string(net_format, value)
        model = data.pop("model")
        mac = data.pop("macaddr", None) or random_mac()
        rest = print_property_string(data, {k: v for k, v in net_format.items() if k not in ("model", "macaddr")
                                            and k not in MODELS})
        return f"{model}={mac}" + (f",{rest}" if rest else "")

    def _allocate(self, node: str, vmid: int, key: str, value: str) -> str:
        """A ``STORAGE:SIZE`` drive becomes a volume (``create_disks``); an EFI disk gets OVMF's vars size."""
        drive_format = fmt(self.props, key)
        data = parse_property_string(drive_format, value)
        fresh = NEW_DISK_RE.match(data.get("file", ""))
        if not fresh:
            return value
        storage = self.storage(fresh.group(1))
        used = {v for s in self.cluster.storages.values() for v in s.volumes}
        index = next(i for i in range(10_000) if storage.volume_name(vmid, i) not in used)
        volid = storage.volume_name(vmid, index)
        if key == "efidisk0":  # OVMF_VARS: 528K for 4m, 128K for 2m; LVM rounds up to its 4M extents
            vars_kib = 528 if data.get("efitype") == "4m" else 128
            size = 4 * MiB if storage.type in ("lvm", "lvmthin") else vars_kib * 1024
        else:
            size = int(float(fresh.group(2)) * 1024**3)
        storage.volumes[volid] = (node, size)
        data.update(file=volid, size=str(size))
        return print_property_string(data, drive_format)

    def _free_volumes(self, values: Mapping[str, str]) -> None:
        for key, value in values.items():
            if DISK.match(key) or re.match(r"^unused\d+$", key):
                volume = value.split(",")[0].removeprefix("file=")
                for storage in self.cluster.storages.values():
                    storage.volumes.pop(volume, None)

    # --- endpoints ----------------------------------------------------------------------------------
    def create(self, user: str, node: str, params: dict[str, str]) -> str:
        vmid = int(params.pop("vmid"))
        params.pop("node", None)
        start = params.pop("start", "0") == "1"
        for ignored in ("bwlimit", "force", "pool", "ha-managed", "unique", "live-restore", "storage",
                        "import-working-storage"):
            params.pop(ignored, None)
        if params.pop("archive", None):
            raise PveApiError(501, "simulator: restoring a backup is not simulated")
        if start:
            self.cluster.check_perm(user, f"/vms/{vmid}", ["VM.PowerMgmt"])
        if not self.cluster.has_privs(user, ["VM.Allocate"]):
            raise PveApiError(403, "Permission check failed")
        self._check_disks(user, params)
        # Qemu.pm 1355-1364: each option's privilege, then hostpci, then the bridges
        check_vm_modify_config_perm(self.cluster, user, vmid, list(params))
        for key in sorted(k for k in params if re.match(r"^hostpci\d+$", k)):
            self._check_hostpci_perm(user, vmid, key, params[key])
        for key in [k for k in params if re.match(r"^net\d+$", k)]:
            check_bridge_access(self.cluster, user, parse_property_string(fmt(self.props, key), params[key]))
            params[key] = self._net(params[key])
        try:
            self.cluster.vmid_unused(vmid)
        except PveApiError as exc:
            raise PveApiError(500, f"unable to create VM {vmid} - {exc.message}") from None
        self.save(node, vmid, QmConfig(options={"lock": "create"}))

        def work(task: Task) -> None:
            conf = QmConfig()
            made: dict[str, str] = {}
            try:
                for key, value in sorted(params.items()):
                    if DISK.match(key):
                        made[key] = conf.options[key] = self._allocate(node, vmid, key, value)
                        task.log.append(f"  {key}: successfully created disk '{made[key].split(',')[0]}'")
                    else:
                        conf.options[key] = value
                task.checkpoint()
                disks = sorted(k for k in made if k not in ("efidisk0", "tpmstate0"))
                nets = sorted(k for k in conf.options if re.match(r"^net\d+$", k))
                conf.options.setdefault("boot", "order=" + ";".join(disks + nets) if disks or nets else "")
                if not conf.options["boot"]:
                    del conf.options["boot"]
                conf.options.setdefault("smbios1", f"uuid={uuid.uuid4()}")
                conf.options.setdefault("vmgenid", str(uuid.uuid4()))
                conf.options["meta"] = f"creation-qemu=10.0.2,ctime={task.starttime}"
                machine = conf.options.get("machine", "")
                if re.match(r"^w", conf.options.get("ostype", "")) and machine in ("", "pc", "q35"):
                    conf.options["machine"] = f"pc-{'q35' if machine == 'q35' else 'i440fx'}-{PINNED}"
                    task.log.append(f"pinning machine type to '{conf.options['machine']}' for Windows guest OS")
                if "tags" in conf.options:
                    conf.options["tags"] = ";".join(sorted(set(split_list(conf.options["tags"]))))
                self.save(node, vmid, conf)
            except Exception as exc:
                self._free_volumes(made)
                self.cluster.qemu_conf_path(node, vmid).unlink(missing_ok=True)
                raise TaskAbort(f"unable to create VM {vmid} - {exc}") from exc
            if start:
                self._boot(node, vmid, task)

        return self.cluster.start_task(node, "qmcreate", str(vmid), user, work)

    def update(self, user: str, node: str, vmid: int, params: dict[str, str], sync: bool) -> str | None:
        for key in ("node", "vmid", "skiplock", "background_delay"):
            params.pop(key, None)
        wanted_digest = params.pop("digest", None)
        delete = split_list(params.pop("delete", ""))
        revert = split_list(params.pop("revert", ""))
        params.pop("force", None)
        if not delete and not revert and not params:
            raise PveApiError(500, "no options specified")
        conf, current_digest = self.load(node, vmid)
        if conf.options.get("lock"):
            raise PveApiError(500, f"VM is locked ({conf.options['lock']})")
        if wanted_digest and wanted_digest != current_digest:
            raise PveApiError(500, "detected modified configuration - file changed by other user? Try again.")
        for opt in delete:
            if indexed_schema(self.props, opt) is None:
                raise param_error({"delete": f"unknown option '{opt}'"})
            if opt in params:
                raise param_error({"delete": f"you can't use '-{opt}' and -delete {opt}' at the same time"})
            if re.match(r"^hostpci\d+$", opt) and opt in conf.effective():
                self._check_hostpci_perm(user, vmid, opt, conf.effective()[opt])
        check_vm_modify_config_perm(self.cluster, user, vmid, [*params, *delete])  # update_vm_api, as create's
        for opt in sorted(params):
            if re.match(r"^hostpci\d+$", opt):
                self._check_hostpci_perm(user, vmid, opt, params[opt])
        self._check_disks(user, params)
        for key in [k for k in params if re.match(r"^net\d+$", k)]:
            check_bridge_access(self.cluster, user, parse_property_string(fmt(self.props, key), params[key]))
            params[key] = self._net(params[key])

        def change(task: Task | None) -> None:
            current, _ = self.load(node, vmid)
            running = vmid in self.cluster.running
            for opt in revert:
                current.pending.pop(opt, None)
                if opt in current.pending_delete:
                    current.pending_delete.remove(opt)
            for opt in delete:
                if opt not in current.options and opt not in current.pending:
                    continue
                current.pending.pop(opt, None)
                if running and opt not in LIVE:
                    if opt not in current.pending_delete:
                        current.pending_delete.append(opt)
                else:
                    current.options.pop(opt, None)
            for opt, value in sorted(params.items()):
                if DISK.match(opt):
                    value = self._allocate(node, vmid, opt, value)
                    if task is not None:
                        task.log.append(f"{opt}: successfully created disk '{value.split(',')[0]}'")
                if opt == "tags":
                    value = ";".join(sorted(set(split_list(value))))
                if running and opt not in LIVE and not DISK.match(opt):
                    current.pending[opt] = value
                else:
                    current.options[opt] = value
                    current.pending.pop(opt, None)
            self.save(node, vmid, current)

        if sync:
            change(None)
            return None
        return self.cluster.start_task(node, "qmconfig", str(vmid), user, change)

    def config(self, node: str, vmid: int, current: bool = False) -> dict[str, Any]:
        conf, conf_digest = self.load(node, vmid)
        data = to_api(conf.effective(current), self.config_props)
        data["digest"] = conf_digest
        return data

    def pending(self, node: str, vmid: int) -> list[dict[str, Any]]:
        return self.load(node, vmid)[0].pending_rows()

    def status(self, node: str, vmid: int) -> dict[str, Any]:
        conf, _ = self.load(node, vmid)
        options = conf.options
        running = vmid in self.cluster.running
        memory = parse_property_string(fmt(self.props, "memory"), options.get("memory", "512")).get("current", "512")
        disk = next((options[k] for k in ("scsi0", "virtio0", "sata0", "ide0") if k in options), "")
        size = re.search(r"(?:^|,)size=([^,]+)", disk)
        data: dict[str, Any] = {
            "vmid": vmid, "status": "running" if running else "stopped", "qmpstatus": "running" if running else
            "stopped", "name": options.get("name", f"VM {vmid}"), "cpus": int(options.get("cores", "1")),
            "maxmem": int(memory) * MiB, "maxdisk": parse_size(size.group(1)) or 0 if size else 0, "uptime": 0,
            "cpu": 0, "mem": 0, "disk": 0, "netin": 0, "netout": 0, "diskread": 0, "diskwrite": 0,
            "ha": {"managed": 0},
        }
        for key in ("lock", "tags"):
            if key in options:
                data[key] = options[key]
        if options.get("template") == "1":
            data["template"] = 1
        return data

    def list(self, node: str) -> list[dict[str, Any]]:
        return [self.status(n, vmid) for n, vmid in self.cluster.qemu_vmids() if n == node]

    # --- power and destroy --------------------------------------------------------------------------
    def _pci_ids(self, node: str, vmid: int, conf: Mapping[str, str]) -> list[str]:
        """``parse_hostpci_devices`` + ``prepare_pci_device`` for the node's PCI devices: the ids a start takes."""
        q35 = "q35" in conf.get("machine", "")
        devices = self.cluster.nodes[node].pci
        taken: list[str] = []
        for key in sorted((k for k in conf if re.match(r"^hostpci\d+$", k)), key=lambda k: int(k[7:])):
            parsed = parse_property_string(PROPERTY_FORMATS["pve-qm-hostpci"], conf[key])
            if parsed.get("host") and parsed.get("mapping"):
                raise TaskAbort("Cannot set both 'host' and 'mapping'.")
            if parsed.get("mapping"):
                path = self.cluster.pci_mappings.get(parsed["mapping"], {}).get(node)
                if path is None:
                    raise TaskAbort(f"PCI device mapping not found for '{parsed['mapping']}'")
                wanted = path.split(";")
            elif parsed.get("host"):
                wanted = parsed["host"].split(";")
            else:
                raise TaskAbort("Either 'host' or 'mapping' must be set.")
            if parsed.get("pcie") == "1" and not q35:
                raise TaskAbort("q35 machine model is not enabled")
            for pci_id in wanted:
                normal = pci_id if re.match(r"^[a-f0-9]{4,}:", pci_id) else f"0000:{pci_id}"
                found = [str(d["id"]) for d in devices if str(d["id"]).startswith(normal)]
                if not found:
                    raise TaskAbort(f"no PCI device found for '{pci_id}'")
                for found_id in found:
                    device = next(d for d in devices if d["id"] == found_id)
                    if int(str(device.get("iommugroup", -1))) == -1:
                        raise TaskAbort("cannot prepare PCI pass-through, IOMMU not present")
                taken += found
        return taken

    def _boot(self, node: str, vmid: int, task: Task) -> None:
        conf, _ = self.load(node, vmid)
        if conf.options.get("template") == "1":
            raise TaskAbort("you can't start a vm if it's a template")
        if conf.options.get("lock"):
            raise TaskAbort(f"VM is locked ({conf.options['lock']})")
        if vmid in self.cluster.running:
            raise TaskAbort(f"VM {vmid} already running")
        if conf.pending or conf.pending_delete:
            conf.apply_pending()
            self.save(node, vmid, conf)
        ids = self._pci_ids(node, vmid, conf.options)
        for other in self.cluster.running:
            if other == vmid or self.cluster.locate_guest(other) != (node, "qemu"):
                continue
            other_conf, _ = self.load(node, other)
            clash = sorted(set(ids) & set(self._pci_ids(node, other, other_conf.options)))
            if clash:
                raise TaskAbort(f"PCI device '{clash[0]}' already in use by VMID '{other}'")
        task.checkpoint()
        self.cluster.running.add(vmid)

    def start(self, user: str, node: str, vmid: int) -> str:
        self.load(node, vmid)
        return self.cluster.start_task(node, "qmstart", str(vmid), user, lambda task: self._boot(node, vmid, task))

    def stop(self, user: str, node: str, vmid: int, kind: str = "qmstop") -> str:
        self.load(node, vmid)

        def work(task: Task) -> None:
            conf, _ = self.load(node, vmid)
            if conf.options.get("lock"):
                raise TaskAbort(f"VM is locked ({conf.options['lock']})")
            task.checkpoint()
            self.cluster.running.discard(vmid)

        return self.cluster.start_task(node, kind, str(vmid), user, work)

    def destroy(self, user: str, node: str, vmid: int) -> str:
        conf, _ = self.load(node, vmid)
        if conf.options.get("protection") == "1":
            raise PveApiError(500, f"can't remove VM {vmid} - protection mode enabled")
        if vmid in self.cluster.running:
            raise PveApiError(500, f"VM {vmid} is running - destroy failed")

        def work(task: Task) -> None:
            task.checkpoint()
            current, _ = self.load(node, vmid)
            self._free_volumes(current.options)
            self.cluster.qemu_conf_path(node, vmid).unlink()

        return self.cluster.start_task(node, "qmdestroy", str(vmid), user, work)

    # --- the node's PCI devices ---------------------------------------------------------------------
    def hardware_pci(self, node: str, params: Mapping[str, str]) -> list[dict[str, Any]]:
        blacklist = params.get("pci-class-blacklist", "05;06;0b")
        classes = [c for c in split_list(blacklist) if c]
        verbose = params.get("verbose", "1") == "1"
        rows = []
        for device in self.cluster.nodes[node].pci:
            if classes and re.match(rf"^0x(?:{'|'.join(map(re.escape, classes))})", str(device.get("class", ""))):
                continue
            rows.append(dict(device) if verbose else {k: device[k] for k in _UNBLACKLISTED_KEYS if k in device})
        return rows
