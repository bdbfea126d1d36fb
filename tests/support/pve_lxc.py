"""The LXC endpoints' behaviour after schema validation: pve-container ``API2/LXC.pm`` and ``LXC/Config.pm``.

Each function gets parameters that already passed the schema (strings, as PVE sees form data) and
raises ``PveApiError`` with PVE's status and text. What runs inside a worker in PVE runs inside a
simulated task here, so failures that PVE reports in the task (a template that does not exist, a
device node missing at start) are task failures here too, not HTTP errors.

Provenance (proxmox/pve-container 6.1.10, commit 94f558522ef6; read for these behaviours):
- create's permission order, ``create_vm`` in src/PVE/API2/LXC.pm: ``unprivileged`` defaults to 1 and a
  privileged create needs Sys.Modify on / (lines 271-273), then VM.Allocate (295-319), then
  ``check_ct_modify_config_perm`` on the parameters (324-326), all before anything is created.
- ``check_ct_modify_config_perm`` in src/PVE/LXC.pm (lines 1655-1756, ``support.pve_perms``): only the literal
  ``root@pam`` returns early (1658); an API token's user is ``USER@REALM!NAME`` (pve-manager 9.2.11
  PVE/HTTPServer.pm lines 85-113), so a token of root never passes. ``features`` on a privileged container,
  nesting alone included, is "changing feature flags for privileged container is only allowed for
  root@pam" (1691-1692); on an unprivileged one everything but nesting is (1731-1732); devN always (1686-1687).
- a devN path is stat()ed on every config change (src/PVE/LXC/Config.pm 1377-1383) and at every start
  (``vm_start`` -> ``update_lxc_config``, src/PVE/LXC.pm 3136 and 769-776), by
  ``get_device_mode_and_rdev`` (src/PVE/LXC/Tools.pm 157-166): "Device /dev/X does not exist".
- create (src/PVE/API2/LXC.pm ``create_vm`` 141-658): storage without rootdir content is a parameter error
  (353), mount points without rootfs (387), "Only root can pass arbitrary filesystem paths." (401), the task
  error prefix "unable to create CT N -" (417), ``create_and_lock_config`` (419), worker ``vzcreate`` (655);
  "CT N already exists on node 'X'" is pve-cluster 9.1.6 src/PVE/Cluster.pm 796.
- destroy (``destroy_vm`` 805-927): ``check_lock`` (860), "unable to destroy CT N - container is running" (879).
- src/PVE/API2/LXC/Status.pm: start 120-216 ("CT N already running" 162, template 191, ``check_lock`` 195,
  worker ``vzstart`` 214), stop 220-312 ("CT N not running" 264, ``vzstop`` 310), shutdown 316-396.
- src/PVE/API2/LXC/Config.pm ``update_vm`` (112-270): "no options specified" (161), ``check_lock`` (174),
  revert/delete parameter errors (187-206); "CT is locked (X)" is pve-guest-common 6.0.2 AbstractConfig.pm 339.
- "Path is not defined for passthrough device devN" (src/PVE/LXC.pm 774).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from support.pve_config import (
    FASTPLUG,
    HOTPLUG,
    HOTPLUG_DELETE,
    NEW_DISK_RE,
    CtConfig,
    detect_ostype,
    random_mac,
    to_api,
)
from support.pve_formats import parse_size, split_list
from support.pve_perms import ROOT, check_modify_perm, fmt, parse_mountpoint
from support.pve_schema import (
    PveApiError,
    indexed_schema,
    param_error,
    parse_property_string,
    print_property_string,
)
from support.pve_state import PassthroughNode, PveCluster, SimStorage, Task, TaskAbort

MiB = 1024**2


class Lxc:
    """The container endpoints of one simulated cluster; ``props`` is create_vm's parameter schema."""

    def __init__(self, cluster: PveCluster, props: Mapping[str, Any], config_props: Mapping[str, Any]):
        self.cluster = cluster
        self.props = props
        self.config_props = config_props  # GET .../config's return properties, for typing the answer

    # --- storages and disks -------------------------------------------------------------------------
    def storage(self, sid: str) -> SimStorage:
        storage = self.cluster.storages.get(sid)
        if storage is None:
            raise PveApiError(500, f"storage '{sid}' does not exist")
        return storage

    def _rootdir_storage(self, user: str, sid: str) -> None:
        if "rootdir" not in self.storage(sid).content:
            raise param_error({"storage": f"storage '{sid}' does not support container directories"})
        self.cluster.check_perm(user, f"/storage/{sid}", ["Datastore.AllocateSpace"])

    def _allocate(self, node: str, vmid: int, key: str, value: str) -> str:
        """A ``STORAGE:GiB`` volume becomes a real one (``create_disks``); every value is printed the way
        ``print_ct_mountpoint`` prints it."""
        data = parse_mountpoint(self.props, key, value)
        fresh = NEW_DISK_RE.match(data["volume"]) if data["type"] == "volume" else None
        skip = ("type", "mp") if key == "rootfs" else ("type",)
        if not fresh:
            return print_property_string(data, fmt(self.props, key), skip)
        storage = self.storage(fresh.group(1))
        used = {v for s in self.cluster.storages.values() for v in s.volumes}
        index = next(i for i in range(10_000) if storage.volume_name(vmid, i) not in used)
        volid = storage.volume_name(vmid, index)
        size = int(float(fresh.group(2)) * 1024**3)
        storage.volumes[volid] = (node, size)
        data.update(volume=volid, size=str(size))
        return print_property_string(data, fmt(self.props, key), skip)

    def _free_volumes(self, values: Mapping[str, str]) -> None:
        for key, value in values.items():
            if key == "rootfs" or re.match(r"^(mp|unused)\d+$", key):
                volume = value.split(",")[0].removeprefix("volume=")
                for storage in self.cluster.storages.values():
                    storage.volumes.pop(volume, None)

    # --- update_pct_config ----------------------------------------------------------------------------
    def _update(self, node: str, vmid: int, conf: CtConfig, running: bool, params: Mapping[str, str],
                delete: list[str]) -> None:
        for opt in delete:
            if opt not in conf.options and opt not in conf.pending:
                continue  # PVE only warns: "cannot delete 'x' - not set in current configuration!"
            if opt in ("memory", "rootfs", "ostype"):
                raise PveApiError(500, f"unable to delete required option '{opt}'")
            if opt == "unprivileged":
                raise PveApiError(500, f"unable to delete read-only option: '{opt}'")
            conf.pending.pop(opt, None)
            if opt not in conf.pending_delete:
                conf.pending_delete.append(opt)
        for opt in sorted(params):
            value = params[opt]
            if opt == "rootfs" or re.match(r"^mp\d+$", opt):
                data = parse_mountpoint(self.props, opt, value)
                if data["type"] == "volume":
                    sid = data["volume"].split(":", 1)[0]
                    if "rootdir" not in self.storage(sid).content:
                        raise PveApiError(500, f"storage '{sid}' does not allow content type 'rootdir' (Container)")
            elif opt == "unprivileged":
                raise PveApiError(500, f"unable to modify read-only option: '{opt}'")
            elif opt == "tags":
                value = ";".join(sorted(set(split_list(value))))
            elif re.match(r"^dev\d+$", opt):
                path = parse_property_string(fmt(self.props, opt), value).get("path")
                if path is None:
                    raise PveApiError(500, f"Path is not defined for passthrough device {opt}")
                if path not in self.cluster.nodes[node].devices:
                    raise PveApiError(500, f"Device {path} does not exist")
            conf.pending[opt] = value
            if opt in conf.pending_delete:
                conf.pending_delete.remove(opt)
        self._apply(node, vmid, conf, running)

    def _net(self, value: str) -> str:
        net_format = fmt(self.props, "net0")
        data = parse_property_string(net_format, value)
        data["type"] = "veth"
        data.setdefault("hwaddr", random_mac())
        return print_property_string(data, net_format)

    def _apply(self, node: str, vmid: int, conf: CtConfig, running: bool) -> None:
        """``vmconfig_apply_pending`` when stopped, ``vmconfig_hotplug_pending`` when running."""
        for opt in list(conf.pending_delete):
            live = opt in FASTPLUG or opt in HOTPLUG_DELETE or re.match(r"^(unused|net)\d+$", opt)
            if running and not live:
                continue
            old = conf.options.pop(opt, None)
            if old is not None and re.match(r"^unused\d+$", opt):
                self._free_volumes({opt: old})
            elif old is not None and re.match(r"^mp\d+$", opt):
                mountpoint = parse_mountpoint(self.props, opt, old)
                if mountpoint["type"] == "volume":  # a detached volume is kept as unusedN, as PVE keeps it
                    free = next(i for i in range(256) if f"unused{i}" not in conf.options)
                    conf.options[f"unused{free}"] = mountpoint["volume"]
            conf.pending_delete.remove(opt)
        for opt in sorted(conf.pending):
            value = conf.pending[opt]
            indexed = re.match(r"^(mp|dev|net)\d+$", opt)
            if running and not (opt in FASTPLUG or opt in HOTPLUG or (indexed and indexed.group(1) == "net")
                                or (indexed and opt not in conf.options)):
                continue
            if re.match(r"^net\d+$", opt):
                value = self._net(value)
            elif re.match(r"^mp\d+$", opt):
                value = self._allocate(node, vmid, opt, value)
            conf.options[opt] = value
            del conf.pending[opt]

    # --- endpoints ----------------------------------------------------------------------------------
    def create(self, user: str, node: str, params: dict[str, str]) -> str:
        vmid = int(params.pop("vmid"))
        params.pop("node", None)
        start = params.pop("start", "0") == "1"
        for ignored in ("ignore-unpack-errors", "bwlimit", "ha-managed", "unique", "force", "password",
                        "ssh-public-keys", "pool"):
            params.pop(ignored, None)
        if params.pop("restore", "0") == "1":
            raise PveApiError(501, "simulator: restoring a backup is not simulated")
        unprivileged = params.pop("unprivileged", "1") == "1"
        if not unprivileged:  # API2/LXC.pm 271-273
            self.cluster.check_perm(user, "/", ["Sys.Modify"])
        self.cluster.vmid_unused(vmid)
        if not self.cluster.has_privs(user, ["VM.Allocate"]):
            raise PveApiError(403, "Permission check failed")
        template = params.pop("ostemplate")
        storage = params.pop("storage", "local")
        # API2/LXC.pm 324-326: a token (never root@pam) is refused `features` on a privileged CT here, 403,
        # before storage checks or the config file exist (LXC.pm 1691-1692).
        check_modify_perm(self.cluster, user, vmid, None, params, [], unprivileged, self.props)
        tsid, _, tpath = template.partition(":")
        if not tpath:
            raise PveApiError(500, f"unable to parse volume ID '{template}'")
        self.storage(tsid)
        disks = {k: (f"{storage}:{v}" if re.match(r"^\d+(\.\d+)?$", v) else v)
                 for k, v in params.items() if k == "rootfs" or re.match(r"^mp\d+$", k)}
        rest = {k: v for k, v in params.items() if k not in disks}
        if disks and "rootfs" not in disks:
            raise PveApiError(500, "mount points configured, but 'rootfs' not set - aborting")
        for key, value in disks.items():
            data = parse_mountpoint(self.props, key, value)
            if data["type"] != "volume":
                if user != ROOT:
                    raise PveApiError(500, "Only root can pass arbitrary filesystem paths.")
            else:
                self._rootdir_storage(user, data["volume"].split(":", 1)[0])
        if "rootfs" not in disks:
            self._rootdir_storage(user, storage)
            disks["rootfs"] = f"{storage}:4"  # PVE's default: 4 GiB on the default storage
        conf = CtConfig()
        self._update(node, vmid, conf, False, rest, [])
        if unprivileged:
            conf.options["unprivileged"] = "1"
        self.cluster.save(node, vmid, CtConfig(options={"lock": "create"}))

        def work(task: Task) -> None:
            made: dict[str, str] = {}
            try:
                for key, value in sorted(disks.items()):
                    made[key] = conf.options[key] = self._allocate(node, vmid, key, value)
                task.log.append(f"extracting archive '{template}'")
                task.checkpoint()
                store = self.cluster.storages[tsid]
                if "vztmpl" not in store.content or tpath.removeprefix("vztmpl/") not in store.templates:
                    raise TaskAbort(f"volume '{template}' does not exist")
                ostype, arch = detect_ostype(tpath)
                conf.options.setdefault("ostype", ostype)
                conf.options.setdefault("arch", arch)
                conf.options.setdefault("hostname", f"CT{vmid}")
                conf.options.setdefault("memory", "512")
                conf.options.setdefault("swap", "512")
                self.cluster.save(node, vmid, conf)
            except Exception as exc:
                self._free_volumes(made)
                self.cluster.conf_path(node, vmid).unlink(missing_ok=True)
                raise TaskAbort(f"unable to create CT {vmid} - {exc}") from exc
            if start:
                self._boot(node, vmid, task)

        return self.cluster.start_task(node, "vzcreate", str(vmid), user, work)

    def update(self, user: str, node: str, vmid: int, params: dict[str, str]) -> None:
        for key in ("node", "vmid"):
            params.pop(key, None)
        wanted_digest = params.pop("digest", None)
        if not params:
            raise PveApiError(500, "no options specified")
        delete = split_list(params.pop("delete", ""))
        revert = split_list(params.pop("revert", ""))
        conf, current_digest = self.cluster.load(node, vmid)
        self._check_lock(conf)
        if wanted_digest and wanted_digest != current_digest:
            raise PveApiError(500, "detected modified configuration - file changed by other user? Try again.")
        unprivileged = conf.options.get("unprivileged") == "1"
        old = conf.effective()
        check_modify_perm(self.cluster, user, vmid, old, {}, delete + revert, unprivileged, self.props)
        for opt in revert:
            if indexed_schema(self.props, opt) is None:
                raise param_error({"revert": f"unknown option '{opt}'"})
            conf.pending.pop(opt, None)
            if opt in conf.pending_delete:
                conf.pending_delete.remove(opt)
        for opt in delete:
            if indexed_schema(self.props, opt) is None:
                raise param_error({"delete": f"unknown option '{opt}'"})
            if opt in params:
                raise param_error({"delete": f"you can't use '-{opt}' and -delete {opt}' at the same time"})
        check_modify_perm(self.cluster, user, vmid, old, params, [], unprivileged, self.props)
        self._update(node, vmid, conf, vmid in self.cluster.running, params, delete)
        self.cluster.save(node, vmid, conf)

    def config(self, node: str, vmid: int, current: bool = False) -> dict[str, Any]:
        conf, conf_digest = self.cluster.load(node, vmid)
        data = to_api(conf.effective(current), self.config_props)
        if conf.lxc:
            data["lxc"] = [list(pair) for pair in conf.lxc]
        data["digest"] = conf_digest
        return data

    def pending(self, node: str, vmid: int) -> list[dict[str, Any]]:
        return self.cluster.load(node, vmid)[0].pending_rows()

    def status(self, node: str, vmid: int) -> dict[str, Any]:
        conf, _ = self.cluster.load(node, vmid)
        options = conf.options
        running = vmid in self.cluster.running
        rootfs = options.get("rootfs", "")
        size = re.search(r"(?:^|,)size=([^,]+)", rootfs)
        data: dict[str, Any] = {
            "vmid": vmid, "type": "lxc", "status": "running" if running else "stopped",
            "name": options.get("hostname", f"CT{vmid}"), "cpus": int(options.get("cores", "1") or 1),
            "maxmem": int(options.get("memory", "512")) * MiB, "maxswap": int(options.get("swap", "512")) * MiB,
            "maxdisk": parse_size(size.group(1)) if size else 0, "uptime": 0, "cpu": 0, "mem": 0, "disk": 0,
            "netin": 0, "netout": 0, "diskread": 0, "diskwrite": 0, "ha": {"managed": 0},
        }
        for key in ("lock", "tags"):
            if key in options:
                data[key] = options[key]
        if options.get("template") == "1":
            data["template"] = 1
        return data

    def list(self, node: str) -> list[dict[str, Any]]:
        return [self.status(n, vmid) for n, vmid in self.cluster.vmids() if n == node]

    # --- power and destroy --------------------------------------------------------------------------
    @staticmethod
    def _check_lock(conf: CtConfig) -> None:
        if conf.options.get("lock"):
            raise PveApiError(500, f"CT is locked ({conf.options['lock']})")

    def _boot(self, node: str, vmid: int, task: Task) -> None:
        conf, _ = self.cluster.load(node, vmid)
        if conf.options.get("template") == "1":
            raise TaskAbort("you can't start a CT if it's a template")
        self._check_lock(conf)
        if conf.pending or conf.pending_delete:
            self._apply(node, vmid, conf, False)
            self.cluster.save(node, vmid, conf)
        nodes: dict[str, PassthroughNode] = {}
        for key, value in sorted(conf.options.items()):
            if re.match(r"^dev\d+$", key):
                device = parse_property_string(fmt(self.props, key), value)
                path = device.get("path", "")
                if path in self.cluster.nodes[node].devices:
                    # src/PVE/LXC.pm create_passthrough_device_node 1897-1921: mode default 0660, uid/gid 0
                    major, minor = self.cluster.nodes[node].devices[path]
                    nodes[path] = PassthroughNode(major, minor, int(str(device.get("mode", "0660")), 8),
                                                  int(device.get("uid", 0)), int(device.get("gid", 0)))
                if path not in self.cluster.nodes[node].devices:
                    # vm_start -> update_lxc_config stats every devN path before lxc-start and dies, so the
                    # task's status is that message (pve-container 6.1.10 src/PVE/LXC.pm 3136, 769-776;
                    # src/PVE/LXC/Tools.pm 157-166 get_device_mode_and_rdev).
                    task.log.append(f"Device {path} does not exist")
                    raise TaskAbort(f"Device {path} does not exist")
        task.checkpoint()
        if self.cluster.on_boot is not None:
            # The node's own side of a start (lxc-start on a real node; the pct double's CT in a lab "node").
            try:
                self.cluster.on_boot(node, vmid, conf)
            except Exception as exc:
                raise TaskAbort(f"startup for container '{vmid}' failed: {exc}") from exc
        self.cluster.running.add(vmid)
        self.cluster.passthrough[vmid] = nodes

    def start(self, user: str, node: str, vmid: int) -> str:
        self.cluster.load(node, vmid)
        if vmid in self.cluster.running:
            raise PveApiError(500, f"CT {vmid} already running")
        return self.cluster.start_task(node, "vzstart", str(vmid), user, lambda task: self._boot(node, vmid, task))

    def stop(self, user: str, node: str, vmid: int, kind: str = "vzstop") -> str:
        self.cluster.load(node, vmid)
        if vmid not in self.cluster.running:
            raise PveApiError(500, f"CT {vmid} not running")

        def work(task: Task) -> None:
            conf, _ = self.cluster.load(node, vmid)
            self._check_lock(conf)
            task.checkpoint()
            self.cluster.running.discard(vmid)
            self.cluster.passthrough.pop(vmid, None)

        return self.cluster.start_task(node, kind, str(vmid), user, work)

    def destroy(self, user: str, node: str, vmid: int, force: bool = False) -> str:
        conf, _ = self.cluster.load(node, vmid)
        if conf.options.get("protection") == "1":
            raise PveApiError(500, f"can't remove CT {vmid} - protection mode enabled")
        self._check_lock(conf)
        if vmid in self.cluster.running and not force:
            raise PveApiError(500, f"unable to destroy CT {vmid} - container is running")

        def work(task: Task) -> None:
            task.checkpoint()
            current, _ = self.cluster.load(node, vmid)
            self.cluster.running.discard(vmid)
            self.cluster.passthrough.pop(vmid, None)
            self._free_volumes(current.options)
            self.cluster.conf_path(node, vmid).unlink()

        return self.cluster.start_task(node, "vzdestroy", str(vmid), user, work)
