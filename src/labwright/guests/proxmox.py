"""The Proxmox VE guest backend: LXC containers through the API (proxmoxer), GPU passthrough the way the
node's version allows, and the settings the API cannot make written to the node's config file.

- Create: ``POST /nodes/NODE/lxc`` (a task), then the file edits, then the start; if anything after
  the create fails, the container is destroyed again, so nothing half-made stays.
- Update: ``GET .../config`` is diffed first (``proxmox_render.diff``); nothing differs, nothing is
  sent. Otherwise one ``PUT .../config`` with the config's ``digest``, so a concurrent edit is refused.
- GPU: ``devN: /dev/nvidia0,...`` entries on PVE >= 8.1; before that ``lxc.cgroup2.devices.allow`` and
  ``lxc.mount.entry`` lines with majors read from the node when applying. Raw ``lxc.*`` keys are not
  in the API schema, so those lines go into ``/etc/pve/nodes/NODE/lxc/VMID.conf`` over SSH.
- Root-only settings (``devN``, bind mounts, features other than nesting) are refused by PVE for
  anyone but ``root@pam`` logged in with a password; with a token, ``plan`` says so and names the two
  ways out instead of letting the API answer 403 halfway through an apply.

Node host data (inventory): ``proxmox_api_url``, ``proxmox_ca_file``, ``proxmox_verify_tls``,
``ssh_hostname``/``ssh_user`` (SSH to the node), ``proxmox_root_via`` (``api`` or ``ssh``).
Credentials come from the environment only (see ``proxmox_api.Credentials``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from proxmoxer import ProxmoxAPI

from labwright import ui
from labwright.errors import BadInput, OperationFailed, SafetyCheckFailed
from labwright.gpu.dri import RENDER_GID, RENDER_GROUP, DriFacts, resolve_vendor
from labwright.gpu.nvidia.boot_unit import (
    BOOT_UNIT,
    BOOT_UNIT_PATH,
    BootUnit,
    boot_unit,
    install_boot_unit,
    installed_unit,
    missing_paths,
    unit_paths,
)
from labwright.gpu.nvidia.host import NodeGpu
from labwright.guests.base import GuestBackend
from labwright.guests.model import Change, GuestSpec, Plan
from labwright.guests.proxmox_api import Credentials, TaskWaiter, call, connect
from labwright.guests.proxmox_render import (
    MOUNT,
    TAG,
    Desired,
    Diff,
    diff,
    edit_conf,
    is_gpu_device,
    props,
    pve_version,
    render,
    resolve_dri,
    resolve_gpu,
    root_only,
)
from labwright.guests.pve_node import PveNode, SshPveNode
from labwright.hostnames import VMID_MAX, VMID_MIN
from labwright.textio import ascii_digits

if TYPE_CHECKING:
    from labwright.guests.proxmox_vm import VmOps

#: Applied to a running container at once; anything else waits for its next start (PVE's hotplug rules).
LIVE_KEYS = frozenset({"hostname", "cores", "memory", "swap", "description", "onboot", "tags"})


@dataclass
class _State:
    """What one plan found: the node's version, the container's config and status, and the diff."""

    version: tuple[int, int]
    config: dict[str, Any] | None
    status: str | None
    desired: Desired
    diff: Diff
    via_ssh: dict[str, str]  # root-only options that go into the config file instead of the API
    via_ssh_delete: list[str]
    unit: BootUnit | None = None  # the node's boot unit for this GPU guest's nodes
    unit_change: Change | None = None  # set when the node lacks that unit or has another one
    missing: list[str] = field(default_factory=list)  # GPU nodes the guest names that the node lacks now

    @property
    def exists(self) -> bool:
        return self.config is not None


class ProxmoxBackend(GuestBackend):
    """Containers on one Proxmox node (any node of its cluster answers the API)."""

    name = "proxmox"

    def __init__(self, node: str, credentials: Credentials, node_data: Mapping[str, Any] | None = None,
                 api: ProxmoxAPI | None = None, pve_node: PveNode | None = None, task_timeout: float = 600.0,
                 poll_interval: float = 0.5):
        self.node = node
        self.credentials = credentials
        self.node_data = dict(node_data or {})
        self._api = api
        self._pve_node = pve_node
        self.task_timeout = task_timeout
        self.poll_interval = poll_interval
        self.root_via = str(self.node_data.get("proxmox_root_via", "api"))
        if self.root_via not in ("api", "ssh"):
            raise BadInput(f"node {node}: proxmox_root_via {self.root_via!r} must be api or ssh")
        self._version: tuple[int, int] | None = None
        self._unit_read = False
        self._unit_text: str | None = None  # the node's boot unit as read once per backend
        self._vm_ops: VmOps | None = None
        self._dri: DriFacts | None = None  # the node's AMD/Intel GPUs, read once per backend

    def _vms(self) -> VmOps:
        """The ``kind: vm`` operations (qemu VMs), sharing this backend's API connection."""
        if self._vm_ops is None:
            from labwright.guests.proxmox_vm import VmOps

            self._vm_ops = VmOps(self)
        return self._vm_ops

    @classmethod
    def for_spec(cls, spec: GuestSpec, pve_node: PveNode | None = None, proxmox_api: ProxmoxAPI | None = None,
                 task_timeout: float = 600.0, poll_interval: float = 0.5, **_options: Any) -> ProxmoxBackend:
        assert spec.node is not None
        return cls(spec.node, Credentials.from_env(), spec.node_data, proxmox_api, pve_node, task_timeout,
                   poll_interval)

    # --- connections -----------------------------------------------------------------------------------
    @property
    def api(self) -> ProxmoxAPI:
        if self._api is None:
            self._api = connect(self.credentials, self.node, self.node_data)
        return self._api

    @property
    def pve_node(self) -> PveNode:
        if self._pve_node is None:
            self._pve_node = SshPveNode(self.node, self.node_data)
        return self._pve_node

    def close(self) -> None:
        closer = getattr(self._pve_node, "close", None)
        if closer is not None:
            closer()

    def _ct(self, spec: GuestSpec) -> Any:
        """The guest's API path: ``/nodes/NODE/lxc/VMID``, or ``.../qemu/VMID`` for a ``kind: vm`` guest."""
        return (self.api.nodes(self.node).qemu if spec.is_vm else self.api.nodes(self.node).lxc)(spec.vmid)

    @staticmethod
    def _label(spec: GuestSpec) -> str:
        """``CT 201`` or ``VM 120``, as PVE names them."""
        return f"{'VM' if spec.is_vm else 'CT'} {spec.vmid}"

    @staticmethod
    def _tool(spec: GuestSpec) -> str:
        return "qm" if spec.is_vm else "pct"

    def _wait(self, upid: str, what: str) -> None:
        # a progress step (labwright.ui): the phase (create, start, stop, destroy) and how long PVE's task took
        with ui.progress(what):
            TaskWaiter(self.api, self.task_timeout, self.poll_interval).wait(upid, what)

    # --- reading -------------------------------------------------------------------------------------------
    def _node_version(self, spec: GuestSpec) -> tuple[int, int]:
        if self._version is None:
            nodes = [n.get("node") for n in call(f"{spec.where}: listing Proxmox nodes", self.api.nodes.get)]
            if self.node not in nodes:
                raise BadInput(f"{spec.where}: node {self.node!r} is not in the Proxmox cluster (nodes: "
                               f"{', '.join(sorted(map(str, nodes))) or 'none'}); fix `node`")
            answer = call(f"{spec.where}: reading the version of {self.node}", self.api.nodes(self.node).version.get)
            self._version = pve_version(str(answer.get("version", "0")))
        return self._version

    def _locate(self, spec: GuestSpec) -> tuple[dict[str, Any] | None, str | None]:
        """(config, status) of the guest on this node; refuses a vmid used elsewhere or by the other kind."""
        if not (VMID_MIN <= int(spec.vmid or 0) <= VMID_MAX):
            raise BadInput(f"{spec.where}: vmid {spec.vmid} is outside {VMID_MIN}-{VMID_MAX}")
        resources = call(f"{spec.where}: listing cluster resources", lambda: self.api.cluster.resources.get(type="vm"))
        entry = next((r for r in resources if int(r.get("vmid", 0)) == spec.vmid), None)
        if entry is None:
            return None, None
        if entry.get("type") != ("qemu" if spec.is_vm else "lxc") or entry.get("node") != self.node:
            kind = "container" if entry.get("type") == "lxc" else "VM"
            raise BadInput(f"{spec.where}: vmid {spec.vmid} is already a {kind} on node {entry.get('node')}; "
                           "pick a free vmid")
        config = call(f"{spec.where}: reading {self._label(spec)}'s config", self._ct(spec).config.get)
        return config, str(entry.get("status") or "stopped")

    def _facts(self, spec: GuestSpec, config: Mapping[str, Any] | None) -> NodeGpu | None:
        """The node's NVIDIA facts, read only when the GPU wiring needs them (a GPU guest, or raw lines to clean)."""
        if spec.wants_gpu or (config or {}).get("lxc"):
            return self.pve_node.gpu()
        return None

    def _rootfs_storage(self, spec: GuestSpec) -> str:
        return self.disk_storage(spec, spec.rootfs.storage if spec.rootfs else None, "rootdir", "container", "rootfs")

    def disk_storage(self, spec: GuestSpec, wanted: str | None, content: str, what: str, field: str) -> str:
        """The storage for a new guest's disk: ``wanted`` if it takes ``content`` (rootdir, images), else the
        usual default (local-lvm, local-zfs, the first); refusals name ``field``."""
        storages = call(f"{spec.where}: listing storages of {self.node}",
                        lambda: self.api.nodes(self.node).storage.get(content=content))
        names = [str(s.get("storage")) for s in storages]
        if wanted is not None and wanted not in names:
            raise BadInput(f"{spec.where}: storage {wanted!r} on {self.node} does not exist or holds no {what} "
                           f"disks (storages for {what} disks: {', '.join(names) or 'none'}); fix `{field}`")
        if wanted is None and not names:
            raise BadInput(f"{spec.where}: {self.node} has no storage for {what} disks; name one in `{field}`")
        return wanted or next((n for n in ("local-lvm", "local-zfs") if n in names), names[0])

    def _check_template(self, spec: GuestSpec) -> None:
        if not spec.template:
            raise BadInput(f"{spec.where}: set `template` (STORAGE:vztmpl/FILE) to create CT {spec.vmid}")
        storage = spec.template.split(":", 1)[0]
        known = {str(s.get("storage")) for s in call(f"{spec.where}: listing storages",
                                                     self.api.nodes(self.node).storage.get)}
        if storage not in known:
            raise BadInput(f"{spec.where}: template {spec.template!r}: {self.node} has no storage {storage!r}")
        content = call(f"{spec.where}: listing templates on {storage}",
                       lambda: self.api.nodes(self.node).storage(storage).content.get(content="vztmpl"))
        if spec.template not in {c.get("volid") for c in content}:
            raise BadInput(f"{spec.where}: template {spec.template!r} does not exist on {self.node}; download it "
                           f"with `pveam download {storage} {spec.template.split('/', 1)[-1]}`")

    def resolved(self, spec: GuestSpec) -> GuestSpec:
        """``spec`` with ``gpu: auto`` made the vendor the node has (its /sys/class/drm and NVIDIA driver), and a
        named AMD/Intel vendor checked against the node (labwright.gpu.dri.resolve_vendor)."""
        if spec.gpu not in ("auto", "amd", "intel") or spec.is_vm:
            return spec
        return replace(spec, gpu=resolve_vendor(spec.gpu, self._dri_facts(), spec.where, self.pve_node_label))

    def _dri_facts(self) -> DriFacts:
        """The node's /sys/class/drm, /dev/dri and /dev/kfd, read once per run (one SSH round trip)."""
        if self._dri is None:
            self._dri = self.pve_node.dri()
        return self._dri

    def _render_gid(self, spec: GuestSpec, status: str | None) -> int:
        """The CT's ``render`` gid while it runs (``pct exec VMID -- getent group render`` on the node, as
        community-scripts' fix_gpu_gids reads it), else RENDER_GID."""
        if status != "running":
            return RENDER_GID
        result = self.pve_node.run(["pct", "exec", str(spec.vmid), "--", "getent", "group", RENDER_GROUP])
        fields = result.stdout.strip().split(":")
        return int(fields[2]) if result.ok and len(fields) > 2 and ascii_digits(fields[2]) else RENDER_GID

    def _state(self, spec: GuestSpec) -> _State:
        spec = self.resolved(spec)
        version = self._node_version(spec)
        config, status = self._locate(spec)
        if config is not None and TAG not in str(config.get("tags") or "") and \
                config.get("hostname") not in (None, spec.hostname):
            raise BadInput(f"{spec.where}: CT {spec.vmid} on {self.node} is {config.get('hostname')!r}, not made by "
                           f"labwright; pick another vmid, or tag it {TAG} to let labwright manage it")
        facts = self._facts(spec, config)
        if spec.wants_dri:
            wiring = resolve_dri(spec, version, self._dri_facts(), self.pve_node_label,
                                 self._render_gid(spec, status))
        else:
            wiring = resolve_gpu(spec, version, facts, self.pve_node_label)
        if config is None:
            self._check_template(spec)
        desired = render(spec, wiring, self._rootfs_storage(spec) if config is None else "")
        changes = diff(spec, config, desired)
        privileged = not spec.unprivileged
        via_ssh = {k: v for k, v in changes.put.items() if root_only(k, v, privileged) and self._root_by_ssh()}
        via_delete = [k for k in changes.delete if self._root_delete(k, config) and self._root_by_ssh()]
        state = _State(version, config, status, desired, changes, via_ssh, via_delete)
        if spec.wants_gpu and facts is not None:
            self._boot_check(state, facts)
        self._refuse_root_only(spec, state)
        return state

    def _boot_check(self, state: _State, facts: NodeGpu) -> None:
        """The GPU nodes this guest names (its devN now and after apply) that the node lacks right now, and
        whether the node's boot unit makes the nodes the wiring passes."""
        wiring = state.desired.wiring
        wanted = [props(v, "path")["path"] for v in wiring.devices]
        wanted += [v.split(" ", 1)[0] for k, v in wiring.lxc if k == MOUNT]
        have_devs = [props(v, "path")["path"] for k, v in (state.config or {}).items()
                     if re.fullmatch(r"(?a)dev\d+", k) and is_gpu_device(v)]
        state.missing = missing_paths([*have_devs, *wanted], [n.path for n in facts.nodes])
        if not self._unit_read:
            self._unit_text, self._unit_read = installed_unit(self.pve_node), True
        state.unit = boot_unit([*unit_paths(self._unit_text), *have_devs, *wanted])
        if self._unit_text != state.unit.text:
            state.unit_change = Change(f"node {self.node} {BOOT_UNIT}", None if self._unit_text is None else
                                       "another version", state.unit.summary())

    @property
    def pve_node_label(self) -> str:
        return f"node {self.node}"

    def _root_by_ssh(self) -> bool:
        return self.root_via == "ssh"

    @staticmethod
    def _root_delete(key: str, config: Mapping[str, Any] | None) -> bool:
        old = str((config or {}).get(key, ""))
        privileged = not int((config or {}).get("unprivileged") or 0)
        return key.startswith("dev") or (key == "features" and (privileged or bool(set(props(old)) - {"nesting"})))

    def _refuse_root_only(self, spec: GuestSpec, state: _State) -> None:
        if self.credentials.is_root or self._root_by_ssh():
            return
        keys = [k for k, v in state.diff.put.items() if root_only(k, v, not spec.unprivileged)]
        keys += [k for k in state.diff.delete if self._root_delete(k, state.config)]
        if not keys:
            return
        who = (f"{self.credentials.principal} is an API token, which PVE never treats as root@pam"
               if self.credentials.token else f"{self.credentials.principal} is not root@pam")
        if not spec.unprivileged and "features" in keys:
            # check_ct_modify_config_perm (pve-container src/PVE/LXC.pm): for a privileged container any
            # `features` value, nesting alone included, is refused to everyone but the literal root@pam.
            features = state.diff.put.get("features") or f"delete {(state.config or {}).get('features')}"
            others = sorted(set(keys) - {"features"})
            raise BadInput(
                f"{spec.where}: unprivileged: false with features {features}: Proxmox lets only root@pam set "
                f"feature flags (nesting too) on a privileged container, and {who}"
                + (f" (also root-only here: {', '.join(others)})" if others else "")
                + "; nothing was created or changed. Log in as root@pam with a password (export PROXMOX_USER=root@pam "
                "PROXMOX_PASSWORD=...; unset PROXMOX_TOKEN_ID), or make the guest unprivileged: true (the default), "
                f"or set proxmox_root_via: \"ssh\" in the host data of {self.node}")
        raise BadInput(
            f"{spec.where}: {', '.join(sorted(keys))} (GPU passthrough, bind mounts, features other than nesting) "
            f"can only be set by root@pam, and {who}. Two ways out: log in as root@pam with a password (export "
            "PROXMOX_USER=root@pam PROXMOX_PASSWORD=...; unset PROXMOX_TOKEN_ID), or let labwright write these "
            f"lines into /etc/pve/lxc/{spec.vmid}.conf over SSH as root (set proxmox_root_via: \"ssh\" in the host "
            f"data of {self.node})")

    # --- plan ----------------------------------------------------------------------------------------------
    def plan(self, spec: GuestSpec) -> Plan:
        if spec.is_vm:
            return self._vms().plan(spec)
        spec = self.resolved(spec)
        return self._plan(spec, self._state(spec))

    def _plan(self, spec: GuestSpec, state: _State) -> Plan:
        changes = list(state.diff.changes)
        lines = state.diff.config_lines()
        notes = list(state.desired.notes)
        if not state.exists:
            lines = [f"rootfs: {state.desired.rootfs}", f"unprivileged: {int(spec.unprivileged)}", *lines]
            changes = [Change("container", None, f"CT {spec.vmid} from {spec.template}"),
                       Change("config rootfs", None, state.desired.rootfs), *changes]
        if state.unit_change is not None and state.unit is not None:
            changes.append(state.unit_change)
            notes.append(f"writes {BOOT_UNIT_PATH} on {self.node} and enables it: `{state.unit.summary()}` at every "
                         "boot, before pve-guests starts the onboot containers")
        warnings = self._missing_warnings(spec, state)
        if state.via_ssh or state.diff.lxc is not None:
            notes.append(f"written over SSH into /etc/pve/nodes/{self.node}/lxc/{spec.vmid}.conf: "
                         + ", ".join([*state.via_ssh, *(["lxc.* GPU lines"] if state.diff.lxc is not None else [])]))
        if state.status == "running":
            later = [c.what.removeprefix("config ") for c in state.diff.changes
                     if c.what.removeprefix("config ") not in LIVE_KEYS and not c.what.startswith("config net")]
            if later:
                notes.append(f"{', '.join(later)} take(s) effect when CT {spec.vmid} restarts")
        if spec.start and state.status != "running":
            changes.append(Change("state", state.status, "running"))
        elif not spec.start and state.status == "running":
            changes.append(Change("state", "running", "stopped"))
        action: Literal["create", "update", "none"] = "create" if not state.exists else (
            "update" if changes else "none")
        return Plan(spec.name, self.name, action, changes, lines, notes, list(state.missing), warnings)

    def _missing_warnings(self, spec: GuestSpec, state: _State) -> list[str]:
        if not state.missing:
            return []
        nodes = ", ".join(state.missing)
        have_devs = any(re.fullmatch(r"(?a)dev\d+", k) and is_gpu_device(v) for k, v in (state.config or {}).items())
        if state.desired.wiring.mode == "dev" or have_devs:
            what = (f"CT {spec.vmid} cannot start while {nodes} {'is' if len(state.missing) == 1 else 'are'} missing "
                    f"on node {self.node} (PVE stats every devN path when a container starts; after a host reboot "
                    "nothing has made the uvm nodes yet)")
        else:
            what = (f"CT {spec.vmid} starts without {nodes} (missing on node {self.node}; its bind mounts are "
                    "optional), so CUDA fails inside it")
        if state.unit_change is not None:
            return [f"{what}; apply creates them now and installs {BOOT_UNIT} so that they exist after every boot"]
        return [f"{what}; {BOOT_UNIT} is installed and makes them at boot: see `systemctl status {BOOT_UNIT}` on "
                f"{self.node}, or run `labwright guest start`, which creates /dev/nvidia-uvm first"]

    # --- apply ---------------------------------------------------------------------------------------------
    def apply(self, spec: GuestSpec) -> list[Change]:
        if spec.is_vm:
            return self._vms().apply(spec)
        spec = self.resolved(spec)
        state = self._state(spec)
        plan = self._plan(spec, state)
        if not plan.changes:
            return []
        done: list[Change] = []
        if state.unit_change is not None and state.unit is not None:
            # First, so that a create or start below finds the nodes: the unit runs once now, then at every boot.
            install_boot_unit(self.pve_node, state.unit, spec.where)
            self._unit_text = state.unit.text
            done.append(state.unit_change)
        if state.desired.wiring.preflight or done:
            if state.desired.wiring.preflight:
                self._preflight(spec)
            state = self._state(spec)  # the uvm nodes and their major exist now
            plan = self._plan(spec, state)
        if not plan.changes:
            return done
        if not state.exists:
            self._create(spec, state)
            return done + plan.changes
        self._update(spec, state)
        if spec.start and state.status != "running":
            self._power(spec, "start")
        elif not spec.start and state.status == "running":
            self._power(spec, "stop")
        return done + plan.changes

    def _preflight(self, spec: GuestSpec) -> None:
        for command in resolve_gpu(spec, self._node_version(spec), self.pve_node.gpu(), self.pve_node_label).preflight:
            result = self.pve_node.run(command)
            if not result.ok:
                raise OperationFailed(f"{spec.where}: `{' '.join(command)}` failed on {self.node} (exit {result.rc}): "
                                      f"{(result.stdout + result.stderr).strip()[:200]}; without /dev/nvidia-uvm the "
                                      "container cannot start")

    def _api_params(self, state: _State) -> tuple[dict[str, str], list[str]]:
        return state.diff.through_api(state.via_ssh, state.via_ssh_delete)

    def _create(self, spec: GuestSpec, state: _State) -> None:
        put, _ = self._api_params(state)
        params = {"vmid": spec.vmid, "ostemplate": spec.template, "rootfs": state.desired.rootfs,
                  "unprivileged": int(spec.unprivileged), **put}
        upid = call(f"{spec.where}: creating CT {spec.vmid} on {self.node}",
                    lambda: self.api.nodes(self.node).lxc.post(**params),
                    needs=(f"/vms/{spec.vmid}", "VM.Allocate"))  # API2/LXC.pm 295-301: a bare raise_perm_exc()
        # A failed or stopped create task is rolled back by PVE itself; nothing to clean up here.
        self._wait(upid, f"{spec.where}: creating CT {spec.vmid}")
        try:
            self._write_file(spec, state)
            if spec.start:
                self._power(spec, "start")
        except Exception as exc:
            self._remove_made(spec, exc)
            raise

    def _remove_made(self, spec: GuestSpec, cause: Exception) -> None:
        """Destroy the guest this apply created; a failure here is added to the original error."""
        try:
            status = call("status", self._ct(spec).status.current.get).get("status")
            if status == "running":
                self._wait(call("stop", self._ct(spec).status.stop.post),
                           f"{spec.where}: stop the half-made {self._label(spec)}")
            self._wait(call("destroy", lambda: self._ct(spec).delete(purge=1)),
                       f"{spec.where}: destroy the half-made {self._label(spec)}")
        except OperationFailed as cleanup:
            cause.args = (f"{cause}; removing the half-made {self._label(spec)} failed too: {cleanup} (remove it with "
                          f"`{self._tool(spec)} destroy {spec.vmid}` on {self.node})",)

    def _update(self, spec: GuestSpec, state: _State) -> None:
        put, delete = self._api_params(state)
        if put or delete:
            params: dict[str, Any] = {**put, "digest": state.config.get("digest") if state.config else None}
            if delete:
                params["delete"] = ",".join(delete)
            call(f"{spec.where}: updating CT {spec.vmid}'s config", lambda: self._ct(spec).config.put(**params))
        self._write_file(spec, state)

    def _write_file(self, spec: GuestSpec, state: _State) -> None:
        """Root-only options (``proxmox_root_via: ssh``) and raw lxc lines, straight into the node's config file."""
        if not state.via_ssh and not state.via_ssh_delete and state.diff.lxc is None:
            return
        path = f"/etc/pve/nodes/{self.node}/lxc/{spec.vmid}.conf"
        text = self.pve_node.read_file(path)
        self.pve_node.write_file(path, edit_conf(text, state.via_ssh, state.via_ssh_delete, state.diff.lxc,
                                                 state.desired.wiring.majors, state.desired.wiring.prefixes))

    def _power(self, spec: GuestSpec, action: str) -> None:
        if action == "start" and spec.wants_gpu:
            self._preflight(spec)
        endpoint = getattr(self._ct(spec).status, action)
        upid = call(f"{spec.where}: {action} {self._label(spec)}", endpoint.post)
        self._wait(upid, f"{spec.where}: {action} {self._label(spec)}")

    # --- the rest of the interface -------------------------------------------------------------------------
    def show(self, spec: GuestSpec) -> dict[str, Any]:
        self._node_version(spec)
        config, status = self._locate(spec)
        info: dict[str, Any] = {"name": spec.name, "backend": self.name, "node": self.node, "vmid": spec.vmid,
                                "exists": config is not None, "status": status or "absent",
                                **({"kind": "vm"} if spec.is_vm else {})}
        if config is None:
            return info
        missing: list[str] = []
        warnings: list[str] = []
        try:
            plan = self.plan(spec)
            drift: list[str] | None = [c.describe() for c in plan.changes if c.what != "state"]
            problem = None
            missing, warnings = plan.missing_nodes, plan.warnings
        except BadInput as exc:  # show only reads: report what apply would refuse instead of failing
            drift, problem = None, str(exc)
        info.update({"managed": TAG in str(config.get("tags") or ""), "in_sync": None if drift is None else not drift,
                     "drift": drift or [], "problem": problem, "missing_nodes": missing, "warnings": warnings,
                     "config": {k: v for k, v in config.items() if k != "digest"}})
        return info

    def exists(self, spec: GuestSpec) -> bool:
        self._node_version(spec)
        return self._locate(spec)[0] is not None

    def start(self, spec: GuestSpec) -> list[Change]:
        spec = self.resolved(spec)
        status = self._require(spec)
        if status == "running":
            return []
        self._power(spec, "start")
        return [Change("state", status, "running")]

    def stop(self, spec: GuestSpec) -> list[Change]:
        status = self._require(spec)
        if status != "running":
            return []
        self._power(spec, "stop")
        return [Change("state", "running", "stopped")]

    def destroy(self, spec: GuestSpec) -> list[Change]:
        self._node_version(spec)
        config, status = self._locate(spec)
        if config is None:
            return []
        if TAG not in str(config.get("tags") or ""):
            raise SafetyCheckFailed(f"{spec.where}: {self._label(spec)} on {self.node} was not made by labwright (no "
                                    f"{TAG} tag); destroy it yourself with `{self._tool(spec)} destroy {spec.vmid}`")
        if status == "running":
            self._power(spec, "stop")
        upid = call(f"{spec.where}: destroying {self._label(spec)}", lambda: self._ct(spec).delete(purge=1))
        self._wait(upid, f"{spec.where}: destroying {self._label(spec)}")
        return [Change("vm" if spec.is_vm else "container", self._label(spec), None)]

    def _require(self, spec: GuestSpec) -> str:
        self._node_version(spec)
        config, status = self._locate(spec)
        if config is None:
            raise OperationFailed(f"{spec.where}: no {self._label(spec)} on {self.node}; run `labwright guest apply` "
                                  "first")
        return status or "stopped"

