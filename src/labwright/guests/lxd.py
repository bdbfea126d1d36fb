"""The LXD/Incus guest backend: create or update an instance by diffing its own config and devices.

A no-change ``apply`` costs one GET per guest (plus one /1.0/resources per run for GPU guests) and
writes nothing. The rules of what an instance should look like are in ``lxd_render`` (pure).
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

from labwright import ui
from labwright.errors import BadInput, LxdError, LxdNotFound, OperationFailed, SafetyCheckFailed
from labwright.gpu.dri import RENDER_GID, RENDER_GROUP, VENDOR_IDS, DriFacts, read_dri, resolve_vendor, vendor_of_id
from labwright.gpu.nvidia.boot_unit import (
    BOOT_UNIT,
    BOOT_UNIT_PATH,
    LAZY_NODES,
    BootUnit,
    boot_unit,
    install_boot_unit,
    installed_unit,
    unit_paths,
)
from labwright.gpu.nvidia.host import GpuHost
from labwright.guests.base import GuestBackend
from labwright.guests.lxd_cdi import CdiOffer, read_spec
from labwright.guests.lxd_render import (
    MARKER_KEY,
    Desired,
    GpuWiring,
    diff,
    render,
    resolve_dri,
    resolve_gpu,
    restart_needed,
)
from labwright.guests.lxd_render import daemon_title as _daemon
from labwright.guests.lxd_render import daemon_tool as _tool
from labwright.guests.model import Change, GuestSpec, Plan
from labwright.lxd.client import LxdClient
from labwright.lxd.remotes import load_client_config, resolve_endpoint
from labwright.shell import join, quote
from labwright.snapshots.lxd import freeze_note
from labwright.textio import ascii_digits


class LxdBackend(GuestBackend):
    """Guests of one LXD/Incus daemon. ``gpu_host`` reads the local machine's GPU facts through its Host (a
    double over a tree in tests); it is None for a remote daemon, whose GPUs are known only through its API."""

    name = "lxd"

    def __init__(self, client: LxdClient, gpu_host: GpuHost | None = None, remote: str | None = None):
        self.client = client
        self.gpu_host = gpu_host
        self.remote = remote or "local"
        # Paths in the spec (mount sources) are this machine's only when the daemon is local.
        self.local = client.endpoint.socket_path is not None and remote in (None, "local")
        self._nvidia_cards: int | None = None
        self._cards: list[dict[str, Any]] | None = None
        self._unit_text: str | bool | None = False  # the host's boot unit, read once (False: not read yet)

    @property
    def _unit_what(self) -> str:
        return f"host {BOOT_UNIT}"

    @classmethod
    def for_spec(cls, spec: GuestSpec, client: LxdClient | None = None, gpu_host: GpuHost | None = None,
                 **_options: Any) -> LxdBackend:
        if client is None:
            flavour = "incus" if spec.host.startswith("@incus/") else "lxd"
            endpoint, project = resolve_endpoint(spec.node, flavour=flavour)
            client = LxdClient(endpoint, project=project)
        local = client.endpoint.socket_path is not None
        return cls(client, (gpu_host or GpuHost()) if local else None, spec.node)

    def close(self) -> None:
        self.client.close()

    # --- reading ------------------------------------------------------------------------------
    def _instance(self, spec: GuestSpec) -> dict[str, Any] | None:
        return self.client.instance_or_none(spec.name)

    def _instance_by_name(self, name: str) -> dict[str, Any] | None:
        return self.client.instance_or_none(name)

    def _lxd_cards(self) -> list[dict[str, Any]]:
        """The GPU cards the daemon reports (/1.0/resources; cached: one request a run)."""
        if self._cards is None:
            resources = self.client.request("GET", "/1.0/resources") or {}
            self._cards = list((resources.get("gpu") or {}).get("cards") or [])
        return self._cards

    def nvidia_cards(self) -> int:
        """NVIDIA cards with the nvidia driver as the daemon reports them (cached: one request a run)."""
        if self._nvidia_cards is None:
            cards = self._lxd_cards()
            self._nvidia_cards = sum(1 for c in cards if c.get("driver") == "nvidia" or c.get("vendor_id") == "10de")
        return self._nvidia_cards

    def vendor_cards(self, vendor: str) -> int:
        """Cards of ``vendor`` (amd, intel) as the daemon reports them: its ``vendor_id`` is hex without 0x."""
        return sum(1 for c in self._lxd_cards() if _hex_id(c.get("vendor_id")) in VENDOR_IDS[vendor])

    def _dri_facts(self) -> DriFacts | None:
        """This host's /sys/class/drm and /dev/dri (None for a remote daemon)."""
        return read_dri(self.gpu_host.host) if self.gpu_host is not None else None

    def resolved(self, spec: GuestSpec) -> GuestSpec:
        """``spec`` with ``gpu: auto`` made the vendor this host has (the local /sys/class/drm and NVIDIA driver, or
        the cards a remote daemon reports), and a named AMD/Intel vendor checked against the host."""
        if spec.gpu not in ("auto", "amd", "intel"):
            return spec
        facts = self._dri_facts()
        if facts is None:
            if spec.gpu != "auto":
                return spec  # a remote's cards are checked by resolve_dri
            vendors = [vendor_of_id(_hex_id(c.get("vendor_id"))) for c in self._lxd_cards()]
            present = [v for v in ("nvidia", "amd", "intel") if v in vendors]
            if not present:
                raise BadInput(f"{spec.where}: gpu: auto, but {_daemon(spec)} remote {spec.node} reports no GPU; "
                               "set gpu: none")
            return replace(spec, gpu=present[0])
        label = self.gpu_host.label if self.gpu_host is not None else "this host"
        return replace(spec, gpu=resolve_vendor(spec.gpu, facts, spec.where, label))

    def _render_gid(self, spec: GuestSpec, current: dict[str, Any] | None) -> int:
        """The guest's ``render`` gid when it runs and has the group, else RENDER_GID (community-scripts' fallback);
        the guest side makes the group with that gid where the image has none (docs/gpu.md)."""
        if current is None or current.get("status") != "Running":
            return RENDER_GID
        try:
            result = self.client.exec(spec.name, ["getent", "group", RENDER_GROUP])
        except LxdError:
            return RENDER_GID
        fields = result.stdout.decode(errors="replace").strip().split(":")
        return int(fields[2]) if result.exit_code == 0 and len(fields) > 2 and ascii_digits(fields[2]) else RENDER_GID

    def _gpu(self, spec: GuestSpec, current: dict[str, Any] | None = None) -> GpuWiring:
        if spec.wants_dri:
            label = self.gpu_host.label if self.gpu_host is not None else "this host"
            return resolve_dri(spec, self._dri_facts(), self.vendor_cards(spec.gpu),
                               self._render_gid(spec, current), label)
        if not spec.wants_gpu:
            return resolve_gpu(spec, self.gpu_host, 0)
        return resolve_gpu(spec, self.gpu_host, self.nvidia_cards(), self._cdi_offer())

    def _cdi_offer(self) -> CdiOffer:
        """What the daemon (GET /1.0: name, version, api_extensions) and this host (its CDI spec) offer for CDI."""
        host = self.gpu_host
        spec = read_spec(host.host) if host is not None and self.local else None
        return CdiOffer(self.client.server_info(), spec, local=host is not None and self.local)

    def _root_pool(self, profiles: list[str], current: dict[str, Any] | None) -> str | None:
        if current is not None:
            return ((current.get("expanded_devices") or {}).get("root") or {}).get("pool")
        pool = None
        for profile in profiles:
            found = self.client.get_or_none(f"/1.0/profiles/{profile}")
            pool = ((found or {}).get("devices") or {}).get("root", {}).get("pool") or pool
        return pool

    def _desired(self, spec: GuestSpec, current: dict[str, Any] | None) -> Desired:
        profiles = list(spec.profiles) if spec.profiles is not None else ["default"]
        needs_pool = spec.rootfs is not None and spec.rootfs.storage is None
        pool = self._root_pool(profiles, current) if needs_pool else None
        return render(spec, self._gpu(spec, current), pool)

    # --- checks that need the daemon (only for what is about to change: a no-change run skips them) ----
    def _check_profiles(self, spec: GuestSpec, profiles: list[str]) -> None:
        for profile in profiles:
            if self.client.get_or_none(f"/1.0/profiles/{profile}") is None:
                raise BadInput(f"{spec.where}: profile {profile!r} does not exist on {_daemon(spec)} {self.remote}; "
                               "create it or fix `profiles`")

    def _check_devices(self, spec: GuestSpec, changes: list[Change]) -> None:
        for change in changes:
            dev = change.after if change.what.startswith("device ") else None
            if not isinstance(dev, dict):
                continue
            if dev.get("type") == "nic" and self.client.get_or_none(f"/1.0/networks/{dev['parent']}") is None:
                raise BadInput(f"{spec.where}: bridge {dev['parent']!r} does not exist on {_daemon(spec)} "
                               f"{self.remote}; fix `net` or create the bridge")
            if dev.get("type") == "disk" and dev.get("pool") and \
                    self.client.get_or_none(f"/1.0/storage-pools/{dev['pool']}") is None:
                raise BadInput(f"{spec.where}: storage pool {dev['pool']!r} does not exist on {_daemon(spec)} "
                               f"{self.remote}; fix `rootfs`")
            if dev.get("type") == "disk" and dev.get("source") and dev.get("required", "true") == "true" \
                    and self.local and not os.path.exists(dev["source"]):
                raise BadInput(f"{spec.where}: mount source {dev['source']} does not exist on this host; create it "
                               "or mark the mount required: false")

    def _source(self, spec: GuestSpec) -> dict[str, Any]:
        if spec.clone:
            if self._instance_by_name(spec.clone) is None:
                raise BadInput(f"{spec.where}: clone source {spec.clone!r} does not exist on {_daemon(spec)} "
                               f"{self.remote}")
            return {"type": "copy", "source": spec.clone}
        template = spec.template
        if not template:
            raise BadInput(f"{spec.where}: set `image` (an {_daemon(spec)} image alias or fingerprint) or `clone` to "
                           "create this guest")
        remote, _, alias = template.rpartition(":")
        if remote:
            _, config = load_client_config()
            entry = (config.get("remotes") or {}).get(remote)
            if not entry or entry.get("protocol") != "simplestreams":
                raise BadInput(f"{spec.where}: image {template!r}: {remote!r} is not an image server in the "
                               f"{_tool(spec)} config; use a local alias or `{_tool(spec)} remote add` it")
            return {"type": "image", "mode": "pull", "server": entry["addr"], "protocol": "simplestreams",
                    "alias": alias}
        if self.client.image_alias(alias) is not None:
            return {"type": "image", "alias": alias}
        if self.client.get_or_none(f"/1.0/images/{alias}") is not None:
            return {"type": "image", "fingerprint": alias}
        raise BadInput(f"{spec.where}: image {template!r} does not exist on {_daemon(spec)} {self.remote}; "
                       f"list them with `{_tool(spec)} image list`")

    # --- interface ----------------------------------------------------------------------------
    def plan(self, spec: GuestSpec) -> Plan:
        plan, _, _ = self._plan(spec)
        return plan

    def _plan(self, spec: GuestSpec) -> tuple[Plan, dict[str, Any] | None, Desired]:
        spec = self.resolved(spec)
        plan, current, desired = self._plan_guest(spec)
        self._boot_check(spec, plan, current, desired)
        return plan, current, desired

    def _boot_unit(self, current: dict[str, Any] | None = None) -> BootUnit | None:
        """The boot unit for this host's NVIDIA nodes, those the guest passes now and those the installed unit
        makes; None where labwright cannot install it (a remote daemon, or a run that is not root's)."""
        host = self.gpu_host
        if host is None or os.geteuid() != 0:
            return None
        if self._unit_text is False:
            self._unit_text = installed_unit(host)
        passed = [d["path"] for d in ((current or {}).get("devices") or {}).values()
                  if d.get("type") == "unix-char" and str(d.get("path", "")).startswith("/dev/nvidia")]
        installed = self._unit_text if isinstance(self._unit_text, str) else None
        return boot_unit([*unit_paths(installed), *(n.path for n in host.device_nodes()), *LAZY_NODES, *passed])

    def _boot_check(self, spec: GuestSpec, plan: Plan, current: dict[str, Any] | None, desired: Desired) -> None:
        """Flag the GPU nodes the guest passes that this host lacks right now (as after a reboot), and add the
        boot unit that makes them to the plan when the host lacks it."""
        host = self.gpu_host
        if not spec.wants_gpu or host is None:
            return
        devices = {**((current or {}).get("devices") or {}), **desired.devices}
        required = sorted(d["path"] for d in devices.values() if d.get("type") == "unix-char"
                          and d.get("required", "true") != "false" and not os.path.exists(d.get("source") or ""))
        lazy = [p for p in LAZY_NODES if not host.host.exists(p)]
        plan.missing_nodes = [*required, *lazy]
        unit = self._boot_unit(current)
        if unit is not None and self._unit_text != unit.text:
            plan.changes.append(Change(self._unit_what, None if self._unit_text is None else "another version",
                                       unit.summary()))
            plan.notes.append(f"writes {BOOT_UNIT_PATH} on {host.label} and enables it: `{unit.summary()}` at "
                              f"every boot, before {_daemon(spec)} starts its guests")
            if plan.action == "none":
                plan.action = "update"
        fix = (f"apply creates them now and installs {BOOT_UNIT} so that they exist after every boot"
               if any(c.what == self._unit_what for c in plan.changes) else
               f"{BOOT_UNIT} makes them at boot: see `systemctl status {BOOT_UNIT}`" if unit is not None else
               f"run labwright as root once to install {BOOT_UNIT}, which makes them at every boot")
        if required:
            plan.warnings.append(f"{_daemon(spec)} refuses to start {spec.name} while {', '.join(required)} "
                                 f"{'is' if len(required) == 1 else 'are'} missing on this host; {fix}")
        if lazy:
            plan.warnings.append(f"{', '.join(lazy)} missing on this host: {spec.name} starts, but CUDA fails inside "
                                 f"it until they exist; {fix}")

    def _plan_guest(self, spec: GuestSpec) -> tuple[Plan, dict[str, Any] | None, Desired]:
        current = self._instance(spec)
        desired = self._desired(spec, current)
        if current is None:
            self._source(spec)
            profiles = desired.profiles or ["default"]
            self._check_profiles(spec, profiles)
            changes = [Change("instance", None, spec.name), Change("profiles", None, ",".join(profiles))]
            changes += [Change(f"config {k}", None, v) for k, v in sorted(desired.config.items())]
            changes += [Change(f"device {k}", None, v) for k, v in sorted(desired.devices.items())]
            self._check_devices(spec, changes)
            if spec.start:
                changes.append(Change("state", None, "Running"))
            return Plan(spec.name, self.name, "create", changes, notes=desired.notes), None, desired
        changes, _ = diff(spec, current, desired)
        if desired.profiles is not None and desired.profiles != current.get("profiles"):
            self._check_profiles(spec, desired.profiles)
        self._check_devices(spec, changes)
        notes = list(desired.notes)
        status = current.get("status")
        restart = restart_needed(changes)
        if restart and status == "Running":
            notes.append(f"{', '.join(restart)} take(s) effect when the guest restarts (guest stop, then apply)")
        if spec.start and status != "Running":
            changes.append(Change("state", status, "Running"))
        elif not spec.start and status == "Running":
            changes.append(Change("state", status, "Stopped"))
        return Plan(spec.name, self.name, "update" if changes else "none", changes, notes=notes), current, desired

    def apply(self, spec: GuestSpec) -> list[Change]:
        spec = self.resolved(spec)
        plan, current, desired = self._plan(spec)
        if not plan.changes:
            return []
        unit = self._boot_unit(current)
        if unit is not None and self.gpu_host is not None and any(c.what == self._unit_what for c in plan.changes):
            # First, so that the start below finds the nodes: the unit runs once now, then at every boot.
            install_boot_unit(self.gpu_host, unit, spec.where)
            self._unit_text = unit.text
        if current is None:
            self._create(spec, desired)
            return plan.changes
        config_changes = [c for c in plan.changes if c.what not in ("state", self._unit_what)]
        if config_changes:
            _, body = diff(spec, current, desired)
            try:
                self.client.request("PUT", f"/1.0/instances/{spec.name}", body)
            except LxdError as exc:
                raise OperationFailed(f"{spec.where}: {_daemon(spec)} refused the update: {_lxd_reason(exc)}") from exc
        for change in plan.changes:
            if change.what == "state":
                self._set_running(spec, change.after == "Running")
        return plan.changes

    def _create(self, spec: GuestSpec, desired: Desired) -> None:
        source = self._source(spec)
        config = dict(desired.config)
        if source["type"] == "copy":
            # A copy inherits the source's config; labwright's own marks (a lab's membership, another guest's
            # bookkeeping) must not come along, or `lab down` would count the clone as a lab container.
            inherited = (self._instance_by_name(spec.clone or "") or {}).get("config") or {}
            config.update({k: "" for k in inherited if k.startswith("user.labwright.") and k not in config})
        body = {
            "name": spec.name, "type": "container", "source": source,
            "profiles": desired.profiles or ["default"], "config": config, "devices": desired.devices,
            "description": spec.description or "",
        }
        try:
            # a progress step (labwright.ui): LXD's create includes pulling a remote image, the long part
            with ui.progress(f"{spec.where}: create {spec.name} from {_describe(source)}"):
                self.client.create_instance(body)
        except LxdError as exc:
            self._remove_if_made(spec)
            raise OperationFailed(f"{spec.where}: {_daemon(spec)} could not create it: {_lxd_reason(exc)}") from exc
        if spec.start:
            try:
                self._set_running(spec, True)
            except OperationFailed:
                # Nothing half-made stays behind: the guest is removed and the start error goes up.
                self._remove_if_made(spec)
                raise

    def _remove_if_made(self, spec: GuestSpec) -> None:
        current = self._instance(spec)
        if current is None or (current.get("config") or {}).get(MARKER_KEY) != spec.name:
            return
        if current.get("status") == "Running":
            self.client.set_state(spec.name, "stop", force=True)
        self.client.delete_instance(spec.name)

    def _preflight(self, spec: GuestSpec) -> None:
        """Create /dev/nvidia-uvm on this host before a GPU guest starts (see gpu.nvidia.host.UVM_PREFLIGHT)."""
        if not spec.wants_gpu or self.gpu_host is None:
            return
        for command in self.gpu_host.preflight_commands():
            # without the tool, nothing: the uvm nodes are optional devices, the guest gets them when they appear
            line = f"command -v {quote(command[0])} >/dev/null 2>&1 || exit 0; {join(command)}"
            result = self.gpu_host.shell.run(line, timeout=60)
            if not result.ok:
                raise OperationFailed(f"{spec.where}: `{' '.join(command)}` failed on the host: "
                                      f"{(result.stderr or result.stdout).strip()[:200]}")

    def _set_running(self, spec: GuestSpec, running: bool) -> None:
        if running:
            self._preflight(spec)
        verb = "start" if running else "stop"
        try:
            with ui.progress(f"{spec.where}: {verb} {spec.name}"):
                self.client.set_state(spec.name, verb, timeout=30)
        except LxdError as exc:
            if running:
                raise OperationFailed(f"{spec.where}: {_daemon(spec)} could not start it: {_lxd_reason(exc)}") from exc
            # A guest still booting, or one whose init ignores SIGPWR, never shuts down cleanly: force it.
            try:
                self.client.set_state(spec.name, "stop", force=True)
            except LxdError as forced:
                raise OperationFailed(f"{spec.where}: {_daemon(spec)} could not stop it: "
                                      f"{_lxd_reason(forced)}") from forced

    def show(self, spec: GuestSpec) -> dict[str, Any]:
        current = self._instance(spec)
        server = self.client.server_info()  # GET /1.0: environment.server, server_version
        info: dict[str, Any] = {"name": spec.name, "backend": self.name, "node": self.remote,
                                "server": server.name, "server_version": server.version,
                                "exists": current is not None, "status": "absent"}
        if current is None:
            return info
        state = self.client.instance_state(spec.name) or {}
        addresses = [
            f"{addr['address']} ({nic})"
            for nic, net in (state.get("network") or {}).items() if nic != "lo"
            for addr in net.get("addresses") or [] if addr.get("family") == "inet"
        ]
        missing: list[str] = []
        warnings: list[str] = []
        try:
            plan = self.plan(spec)
            drift: list[str] | None = [c.describe() for c in plan.changes]
            problem = None
            missing, warnings = plan.missing_nodes, plan.warnings
        except BadInput as exc:  # show is read-only: report what apply would refuse instead of failing
            drift, problem = None, str(exc)
        frozen = freeze_note(self.client, spec.name, str(current.get("status") or ""), _tool(spec))
        if frozen:
            warnings = [frozen, *warnings]
        info.update({
            "status": current.get("status"), "managed": (current.get("config") or {}).get(MARKER_KEY) == spec.name,
            "profiles": current.get("profiles"), "addresses": addresses,
            "config": {k: v for k, v in (current.get("config") or {}).items() if not k.startswith("volatile.")},
            "devices": current.get("devices") or {}, "in_sync": None if drift is None else not drift,
            "drift": drift or [], "problem": problem, "missing_nodes": missing, "warnings": warnings,
        })
        return info

    def exists(self, spec: GuestSpec) -> bool:
        return self._instance(spec) is not None

    def start(self, spec: GuestSpec) -> list[Change]:
        spec = self.resolved(spec)
        current = self._require(spec)
        if current.get("status") == "Running":
            return []
        self._set_running(spec, True)
        return [Change("state", current.get("status"), "Running")]

    def stop(self, spec: GuestSpec) -> list[Change]:
        current = self._require(spec)
        if current.get("status") != "Running":
            return []
        self._set_running(spec, False)
        return [Change("state", "Running", "Stopped")]

    def destroy(self, spec: GuestSpec) -> list[Change]:
        current = self._instance(spec)
        if current is None:
            return []
        if (current.get("config") or {}).get(MARKER_KEY) != spec.name:
            raise SafetyCheckFailed(f"{spec.where}: instance {spec.name} on {_daemon(spec)} {self.remote} was not made "
                                    f"by labwright (no {MARKER_KEY}); delete it yourself with "
                                    f"`{'incus' if _daemon(spec) == 'Incus' else 'lxc'} delete`")
        if current.get("status") == "Running":
            self.client.set_state(spec.name, "stop", force=True)
        try:
            self.client.delete_instance(spec.name)
        except LxdNotFound:
            return []
        return [Change("instance", spec.name, None)]

    def _require(self, spec: GuestSpec) -> dict[str, Any]:
        current = self._instance(spec)
        if current is None:
            raise OperationFailed(f"{spec.where}: no instance {spec.name} on {_daemon(spec)} {self.remote}; "
                                  "run `labwright guest apply` first")
        return current


def _hex_id(value: Any) -> int | None:
    """LXD's ``vendor_id`` ("1002") as a number; None when it is not hex."""
    try:
        return int(str(value), 16)
    except ValueError:
        return None


def _describe(source: dict[str, Any]) -> str:
    """What an instance is made from, for its progress line: ``image debian/12``, ``image debian/12 from
    https://images.lxd.canonical.com`` (pulled first), ``a copy of lw-base``."""
    if source.get("type") == "copy":
        return f"a copy of {source.get('source')}"
    name = source.get("alias") or str(source.get("fingerprint", ""))[:12]
    return f"image {name}" + (f" from {source['server']}" if source.get("server") else "")


def _lxd_reason(exc: LxdError) -> str:
    """LXD's own message without our 'METHOD /path:' prefix, on one line."""
    text = str(exc)
    for prefix in ("PUT ", "POST ", "DELETE ", "GET ", "operation "):
        if text.startswith(prefix) and ": " in text:
            text = text.split(": ", 1)[1]
            break
    return " ".join(text.split())
