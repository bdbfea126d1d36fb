"""Proxmox VE qemu VMs (``kind: vm``) through the API: create, update, power, destroy, with PCI passthrough.

``ProxmoxBackend`` hands a ``kind: vm`` guest to ``VmOps``; both share one API connection per node.

- Plan reads only: the node is in the cluster, the vmid is free or this VM's, the disk storage takes VM images,
  and every ``hostpci`` device given by address is on the node in an IOMMU group it can be passed alone
  (``GET /nodes/NODE/hardware/pci``, ``proxmox_vm_render.check_iommu``). A refusal is one line; nothing is sent.
- Create: ``POST /nodes/NODE/qemu`` (a ``qmcreate`` task that allocates ``scsi0``/``efidisk0``), then the start.
  A failed create is rolled back by PVE itself (the config file is removed, the volumes freed); a failed start
  after it destroys the VM again, so nothing half-made stays.
- Update: one ``POST .../config`` (PVE's asynchronous ``update_vm_async``: a disk to allocate runs in a task,
  whose UPID is waited for) with the config's ``digest``; nothing differs, nothing is sent. Changes to a running
  VM's hardware stay pending until its next start, as PVE keeps them; the plan says so.
- Devices given by address (``host``) are root-only (qemu-server ``check_hostpci_perm``): with an API token,
  plan names the ways out (a resource ``mapping``, root@pam, or ``proxmox_root_via: ssh``, which writes the
  ``hostpciN`` lines into ``/etc/pve/nodes/NODE/qemu-server/VMID.conf`` over SSH).

Provenance: qemu-server 9.2.6 (commit e6352be67f70) ``src/PVE/API2/Qemu.pm``: ``create_vm`` 1159-1627 (worker
``qmcreate`` 1598; "unable to create VM N -" 1372), ``check_hostpci_perm`` 918-936, ``update_vm_async`` 2646-2716,
``destroy_vm`` 2776-2893 ("VM N is running - destroy failed" 2842), start/stop workers ``qmstart``/``qmstop``
(3676, 3798).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from labwright.errors import BadInput
from labwright.guests.model import Change, GuestSpec, Plan
from labwright.guests.proxmox_api import call
from labwright.guests.proxmox_render import TAG, Diff, edit_conf
from labwright.guests.proxmox_vm_render import (
    BOOT_DISK,
    EFI_DISK,
    VmDesired,
    check_iommu,
    diff_vm,
    disk_note,
    render_vm,
    vm_of,
)
from labwright.guests.pve_props import HOSTPCI, parse

if TYPE_CHECKING:
    from labwright.guests.proxmox import ProxmoxBackend

#: Applied to a running VM at once (PVE's hotplug default covers none of the hardware labwright sets).
VM_LIVE_KEYS = frozenset({"name", "description", "onboot", "tags"})


@dataclass
class _VmState:
    config: dict[str, Any] | None
    status: str | None
    desired: VmDesired
    diff: Diff
    via_ssh: dict[str, str] = field(default_factory=dict)
    via_ssh_delete: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def exists(self) -> bool:
        return self.config is not None


class VmOps:
    """The ``kind: vm`` half of a ``ProxmoxBackend``: same node, API, credentials and SSH seam."""

    def __init__(self, backend: ProxmoxBackend):
        self.backend = backend
        self._pci: list[dict[str, Any]] | None = None

    @property
    def node(self) -> str:
        return self.backend.node

    @property
    def api(self) -> Any:
        return self.backend.api

    def _conf_path(self, spec: GuestSpec) -> str:
        return f"/etc/pve/nodes/{self.node}/qemu-server/{spec.vmid}.conf"

    # --- reading -------------------------------------------------------------------------------------------
    def _pci_devices(self, spec: GuestSpec) -> list[dict[str, Any]]:
        if self._pci is None:
            self._pci = list(call(f"{spec.where}: listing PCI devices of {self.node}",
                                  self.api.nodes(self.node).hardware.pci.get))
        return self._pci

    def _state(self, spec: GuestSpec) -> _VmState:
        self.backend._node_version(spec)  # the node is in the cluster
        config, status = self.backend._locate(spec)
        if config is not None and TAG not in str(config.get("tags") or "") and config.get("name") not in (
                None, spec.name):
            raise BadInput(f"{spec.where}: VM {spec.vmid} on {self.node} is {config.get('name')!r}, not made by "
                           f"labwright; pick another vmid, or tag it {TAG} to let labwright manage it")
        vm = vm_of(spec)
        storage = "" if config is not None else self.backend.disk_storage(
            spec, vm.disk.storage if vm.disk else None, "images", "VM", "disk")
        desired = render_vm(spec, storage)
        changes = diff_vm(spec, config, desired)
        notes = list(desired.notes)
        if any(entry.host for entry in vm_of(spec).hostpci):
            notes += check_iommu(spec, self._pci_devices(spec), self.node)
        if config is not None:
            note = disk_note(spec, config)
            if note:
                notes.append(note)
        state = _VmState(config, status, desired, changes, notes=notes)
        self._root_only(spec, state)
        return state

    def _root_only(self, spec: GuestSpec, state: _VmState) -> None:
        """Devices given by address are root@pam's (``check_hostpci_perm`` runs on the old and the new value, so
        replacing or detaching one is too)."""
        credentials = self.backend.credentials
        current = state.config or {}

        def by_address(value: Any) -> bool:  # check_hostpci_perm parses the value: a `host` key is root's
            return bool(parse(value, HOSTPCI).get("host"))

        keys = [k for k, v in state.diff.put.items() if k.startswith("hostpci") and (by_address(v) or
                                                                                     by_address(current.get(k)))]
        keys += [k for k in state.diff.delete if k.startswith("hostpci") and by_address(current.get(k))]
        if credentials.is_root or not keys:
            return
        if self.backend.root_via == "ssh":
            state.via_ssh = {k: state.diff.put[k] for k in keys if k in state.diff.put}
            state.via_ssh_delete = [k for k in keys if k in state.diff.delete]
            return
        who = (f"{credentials.principal} is an API token, which PVE never treats as root@pam"
               if credentials.token else f"{credentials.principal} is not root@pam")
        raise BadInput(
            f"{spec.where}: {', '.join(sorted(keys))} (a PCI device by address) can only be set by root@pam, and "
            f"{who}; nothing was created or changed. Three ways out: map the device (Datacenter > Resource Mappings) "
            "and write hostpci as {\"mapping\": \"ID\"}, which a token with Mapping.Use may set; log in as root@pam "
            "with a password (export PROXMOX_USER=root@pam PROXMOX_PASSWORD=...; unset PROXMOX_TOKEN_ID); or set "
            f"proxmox_root_via: \"ssh\" in the host data of {self.node}")

    # --- plan ----------------------------------------------------------------------------------------------
    def plan(self, spec: GuestSpec) -> Plan:
        return self._plan(spec, self._state(spec))

    def _plan(self, spec: GuestSpec, state: _VmState) -> Plan:
        changes = list(state.diff.changes)
        lines = state.diff.config_lines()
        notes = list(state.notes)
        if not state.exists:
            disks = [f"{BOOT_DISK}: {state.desired.disk}"]
            disks += [f"{EFI_DISK}: {state.desired.efidisk}"] if state.desired.efidisk else []
            lines = [*disks, *lines]
            changes = [Change("vm", None, f"VM {spec.vmid} ({vm_of(spec).ostype}, {vm_of(spec).bios}"
                              f"{', ' + str(vm_of(spec).machine) if vm_of(spec).machine else ''})"),
                       *(Change(f"config {line.split(': ', 1)[0]}", None, line.split(": ", 1)[1]) for line in disks),
                       *changes]
        if state.via_ssh or state.via_ssh_delete:
            notes.append(f"written over SSH into {self._conf_path(spec)}: "
                         + ", ".join([*state.via_ssh, *(f"delete {k}" for k in state.via_ssh_delete)]))
        if state.status == "running":
            later = [c.what.removeprefix("config ") for c in state.diff.changes
                     if c.what.removeprefix("config ") not in VM_LIVE_KEYS]
            if later:
                notes.append(f"{', '.join(later)} take(s) effect when VM {spec.vmid} is stopped and started again "
                             "(PVE keeps them pending)")
        if spec.start and state.status != "running":
            changes.append(Change("state", state.status, "running"))
        elif not spec.start and state.status == "running":
            changes.append(Change("state", "running", "stopped"))
        action: Literal["create", "update", "none"] = "create" if not state.exists else (
            "update" if changes else "none")
        return Plan(spec.name, "proxmox", action, changes, lines, notes)

    # --- apply ---------------------------------------------------------------------------------------------
    def apply(self, spec: GuestSpec) -> list[Change]:
        state = self._state(spec)
        plan = self._plan(spec, state)
        if not plan.changes:
            return []
        if not state.exists:
            self._create(spec, state)
            return plan.changes
        self._update(spec, state)
        if spec.start and state.status != "running":
            self.backend._power(spec, "start")
        elif not spec.start and state.status == "running":
            self.backend._power(spec, "stop")
        return plan.changes

    def _api_params(self, state: _VmState) -> tuple[dict[str, str], list[str]]:
        return state.diff.through_api(state.via_ssh, state.via_ssh_delete)

    def _create(self, spec: GuestSpec, state: _VmState) -> None:
        put, _ = self._api_params(state)
        params: dict[str, Any] = {"vmid": spec.vmid, BOOT_DISK: state.desired.disk, **put}
        if state.desired.efidisk:
            params[EFI_DISK] = state.desired.efidisk
        upid = call(f"{spec.where}: creating VM {spec.vmid} on {self.node}",
                    lambda: self.api.nodes(self.node).qemu.post(**params),
                    needs=(f"/vms/{spec.vmid}", "VM.Allocate"))  # API2/Qemu.pm 1309-1321: a bare raise_perm_exc()
        # A failed create task is rolled back by PVE itself (config removed, volumes freed).
        self.backend._wait(upid, f"{spec.where}: creating VM {spec.vmid}")
        try:
            self._write_file(spec, state)
            if spec.start:
                self.backend._power(spec, "start")
        except Exception as exc:
            self.backend._remove_made(spec, exc)
            raise

    def _update(self, spec: GuestSpec, state: _VmState) -> None:
        put, delete = self._api_params(state)
        if put or delete:
            params: dict[str, Any] = {**put, "digest": (state.config or {}).get("digest")}
            if delete:
                params["delete"] = ",".join(delete)
            config = self.backend._ct(spec).config
            upid = call(f"{spec.where}: updating VM {spec.vmid}'s config", lambda: config.post(**params))
            if upid:  # update_vm_async answers null when nothing ran in a task
                self.backend._wait(str(upid), f"{spec.where}: updating VM {spec.vmid}'s config")
        self._write_file(spec, state)

    def _write_file(self, spec: GuestSpec, state: _VmState) -> None:
        """``hostpciN`` by address with ``proxmox_root_via: ssh``: straight into the node's config file."""
        if not state.via_ssh and not state.via_ssh_delete:
            return
        path = self._conf_path(spec)
        node = self.backend.pve_node
        node.write_file(path, edit_conf(node.read_file(path), state.via_ssh, state.via_ssh_delete, None, frozenset()))
