"""Request dispatch for the simulator, in the order PVE's API server applies its checks.

Order (pve-http-server + ``PVE::HTTPServer::rest_handler``): the path and method must exist (501),
the caller must be authenticated (401, done by the server), URI and body parameters merge (a
parameter given twice is a 400), a real endpoint the simulator does not implement is its own 501
(the vendored schema keeps only implemented methods' parameters), the schema's ``permissions.check``
is evaluated (403), the node in the path must be a cluster node (proxying fails with 500), then the
method's parameters are validated against the schema (400) and the handler runs (its own 4xx/5xx).

Provenance (read for these behaviours; versions and commits in docs/pve-simulator.md):
- pve-manager 9.2.11 (14a22df35955), PVE/HTTPServer.pm ``rest_handler``: unknown path or method is 501
  "Method 'M PATH' not implemented" (148-158); a URI parameter repeated with another value is the 400
  "duplicate parameter (already defined in URI) with conflicting values!" (160-168); permissions (174); proxying
  to the path's node (176-190); a PVE::Exception keeps its code and ``errors``, anything else is 500 (221-230).
- pve-access-control 9.1.1 (5ccd07d93025), src/PVE/RPCEnvironment.pm: ``check`` fails on the first missing
  privilege, "Permission check failed (PATH, PRIV)" (291-305); ``check_any`` names them joined by "|" (307-326).
- pve-common 9.2.1 (f665029eac78), src/PVE/RESTHandler.pm ``handle`` validates parameters (510-540) with
  src/PVE/JSONSchema.pm ``validate`` (1694-1700, "Parameter verification failed.").
- pve-manager 9.2.11, PVE/API2/Tasks.pm: list filters (150-240), stop (312-331), log ``start``/``limit``
  default 0/50 and ``n``/``t`` rows (395-450), status (510-545); a UPID that does not parse is the parameter
  error "unable to parse worker upid" (315, 397, 516), an unknown one "no such task" (316, 517).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from typing import Any

from support.pve_lxc import Lxc
from support.pve_qemu import Qemu
from support.pve_schema import ApiSchema, Endpoint, PveApiError, param_error, validate
from support.pve_snapshot import QemuSnapshots, Snapshots, snapshot_routes
from support.pve_state import GiB, PveCluster, Task

Handler = Callable[[str, dict[str, str]], Any]
#: Properties a node's API only has from a given release on (first seen in pve-docs' schema then).
ADDED_IN = {"dev[n]": (8, 1)}
_UPID = re.compile(r"^UPID:([a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?):([0-9A-F]{8}):([0-9A-F]{8,9}):([0-9A-F]{8}):"
                   r"([^:\s]+):([^:\s]*):([^:\s]+):$")


def _subdirs(*names: str, key: str = "subdir") -> list[dict[str, str]]:
    return [{key: n} for n in names]


class PveApi:
    """The simulated API of one cluster: ``call`` answers one authenticated request."""

    def __init__(self, schema: ApiSchema, cluster: PveCluster, repoid: str = "ec58e45e1bcdf2ac"):
        self.schema = schema
        self.cluster = cluster
        self.repoid = repoid
        create = schema.endpoints["/nodes/{node}/lxc"]
        config = schema.endpoints["/nodes/{node}/lxc/{vmid}/config"].methods["GET"]["returns"]["properties"]
        self.lxc = Lxc(cluster, create.properties("POST"), config)
        self.snapshots = Snapshots(cluster)
        qm_create = schema.endpoints["/nodes/{node}/qemu"]
        qm_config = schema.endpoints["/nodes/{node}/qemu/{vmid}/config"].methods["GET"]["returns"]["properties"]
        self.qemu = Qemu(cluster, qm_create.properties("POST"), qm_config)
        self.qemu_snapshots = QemuSnapshots(cluster, self.qemu)
        qm = "/nodes/{node}/qemu/{vmid}"
        vm = "/nodes/{node}/lxc/{vmid}"
        self.routes: dict[tuple[str, str], Handler] = {
            ("GET", "/version"): lambda u, p: self._version(next(iter(cluster.nodes))),
            ("GET", "/nodes"): lambda u, p: [self._node_entry(n) for n in cluster.nodes],
            ("GET", "/nodes/{node}"): lambda u, p: _subdirs("hardware", "lxc", "qemu", "status", "storage", "tasks",
                                                            "version"),
            ("GET", "/nodes/{node}/version"): lambda u, p: self._version(p["node"]),
            ("GET", "/nodes/{node}/status"): lambda u, p: self._node_status(p["node"]),
            ("GET", "/nodes/{node}/lxc"): lambda u, p: self.lxc.list(p["node"]),
            ("POST", "/nodes/{node}/lxc"): lambda u, p: self.lxc.create(u, p["node"], p),
            ("GET", vm): lambda u, p: _subdirs("config", "status", "pending"),
            ("DELETE", vm): lambda u, p: self.lxc.destroy(u, p["node"], int(p["vmid"]), p.get("force") == "1"),
            ("GET", vm + "/config"): lambda u, p: self.lxc.config(p["node"], int(p["vmid"]), p.get("current") == "1"),
            ("PUT", vm + "/config"): lambda u, p: self.lxc.update(u, p["node"], int(p["vmid"]), p),
            ("GET", vm + "/pending"): lambda u, p: self.lxc.pending(p["node"], int(p["vmid"])),
            ("GET", vm + "/status"): lambda u, p: _subdirs("current", "start", "stop", "shutdown"),
            ("GET", vm + "/status/current"): lambda u, p: self.lxc.status(p["node"], int(p["vmid"])),
            ("POST", vm + "/status/start"): lambda u, p: self.lxc.start(u, p["node"], int(p["vmid"])),
            ("POST", vm + "/status/stop"): lambda u, p: self.lxc.stop(u, p["node"], int(p["vmid"])),
            ("POST", vm + "/status/shutdown"):
                lambda u, p: self.lxc.stop(u, p["node"], int(p["vmid"]), "vzshutdown"),
            ("GET", "/nodes/{node}/qemu"): lambda u, p: self.qemu.list(p["node"]),
            ("POST", "/nodes/{node}/qemu"): lambda u, p: self.qemu.create(u, p["node"], p),
            ("GET", qm): lambda u, p: _subdirs("config", "pending", "status"),
            ("DELETE", qm): lambda u, p: self.qemu.destroy(u, p["node"], int(p["vmid"])),
            ("GET", qm + "/config"): lambda u, p: self.qemu.config(p["node"], int(p["vmid"]), p.get("current") == "1"),
            ("POST", qm + "/config"): lambda u, p: self.qemu.update(u, p["node"], int(p["vmid"]), p, sync=False),
            ("PUT", qm + "/config"): lambda u, p: self.qemu.update(u, p["node"], int(p["vmid"]), p, sync=True),
            ("GET", qm + "/pending"): lambda u, p: self.qemu.pending(p["node"], int(p["vmid"])),
            ("GET", qm + "/status"): lambda u, p: _subdirs("current", "start", "stop", "shutdown"),
            ("GET", qm + "/status/current"): lambda u, p: self.qemu.status(p["node"], int(p["vmid"])),
            ("POST", qm + "/status/start"): lambda u, p: self.qemu.start(u, p["node"], int(p["vmid"])),
            ("POST", qm + "/status/stop"): lambda u, p: self.qemu.stop(u, p["node"], int(p["vmid"])),
            ("POST", qm + "/status/shutdown"):
                lambda u, p: self.qemu.stop(u, p["node"], int(p["vmid"]), "qmshutdown"),
            ("GET", "/nodes/{node}/hardware"): lambda u, p: [{"type": "pci"}, {"type": "usb"}],
            ("GET", "/nodes/{node}/hardware/pci"): lambda u, p: self.qemu.hardware_pci(p["node"], p),
            ("GET", "/nodes/{node}/tasks"): lambda u, p: self._tasks(p),
            ("GET", "/nodes/{node}/tasks/{upid}"): lambda u, p: self._task(p) and _subdirs("log", "status", key="name"),
            ("DELETE", "/nodes/{node}/tasks/{upid}"): lambda u, p: self.cluster.stop_task(self._task(p).upid),
            ("GET", "/nodes/{node}/tasks/{upid}/status"): lambda u, p: self._task(p).as_status(),
            ("GET", "/nodes/{node}/tasks/{upid}/log"): lambda u, p: self._task_log(p),
            **snapshot_routes("lxc", self.snapshots, self.lxc._boot),
            **snapshot_routes("qemu", self.qemu_snapshots, self.qemu._boot),
            ("GET", "/cluster/status"): lambda u, p: self._cluster_status(),
            ("GET", "/cluster/resources"): lambda u, p: self._resources(p.get("type")),
            ("GET", "/cluster/nextid"): lambda u, p: self._nextid(p.get("vmid")),
            ("GET", "/nodes/{node}/storage"): lambda u, p: self._storages(p),
            ("GET", "/nodes/{node}/storage/{storage}"): lambda u, p: _subdirs("content", "status"),
            ("GET", "/nodes/{node}/storage/{storage}/status"):
                lambda u, p: self._storage_status(p["node"], p["storage"]),
            ("GET", "/nodes/{node}/storage/{storage}/content"): lambda u, p: self._content(p),
        }

    # --- dispatch ---------------------------------------------------------------------------------
    def route(self, method: str, path: str) -> tuple[Endpoint, dict[str, str]]:
        found = self.schema.match(path.rstrip("/") or "/")
        if found is None or method not in found[0].methods:
            raise PveApiError(501, f"Method '{method} {path}' not implemented")
        return found

    def call(self, user: str, method: str, path: str, params: dict[str, Any]) -> Any:
        """Answer one request by an authenticated ``user`` (``root@pam``, ``root@pam!token``)."""
        endpoint, uri = self.route(method, path)
        for key in params:
            if key in uri and str(params[key]) != uri[key]:
                raise param_error({key: "duplicate parameter (already defined in URI) with conflicting values!"})
        params = {**params, **uri}
        handler = self.routes.get((method, endpoint.path))
        if handler is None:  # before the checks: the vendored schema keeps only implemented methods' parameters
            raise PveApiError(501, f"simulator: '{method} {endpoint.path}' is a real PVE endpoint that the "
                                   "simulator does not implement")
        self._check_permissions(user, endpoint.methods[method].get("permissions") or {}, params)
        node = self.cluster.nodes.get(uri.get("node", ""))
        if "node" in uri and node is None:
            raise PveApiError(500, f"hostname lookup '{uri['node']}' failed - failed to get address info for: "
                                   f"{uri['node']}: Name or service not known")
        if node is not None and not node.online:
            raise PveApiError(595, f"Connection refused (node '{node.name}' is offline)")
        properties = dict(endpoint.properties(method))
        for prop, (major, minor) in ADDED_IN.items():
            if node is not None and prop in properties and not node.at_least(major, minor):
                del properties[prop]  # an older node's schema does not know it at all
        errors = validate(properties, params)
        if errors:
            raise param_error(errors)
        params = {k: ("1" if v else "0") if isinstance(v, bool) else v for k, v in params.items()}
        with self.cluster.lock:
            return handler(user, params)

    def _check_permissions(self, user: str, permissions: Mapping[str, Any], params: Mapping[str, str]) -> None:
        check = permissions.get("check")
        if not check or check[0] != "perm":
            return  # "user": "all"/"world", or a check kind the simulator leaves to the handler
        path = re.sub(r"\{(\w+)\}", lambda m: params.get(m.group(1), m.group(0)), check[1])
        any_of = len(check) > 4 and check[3] == "any" and bool(check[4])
        self.cluster.check_perm(user, path, list(check[2]), any_of)

    # --- nodes and cluster ------------------------------------------------------------------------
    def _version(self, node: str) -> dict[str, str]:
        return {"version": self.cluster.nodes[node].version, "release": self.cluster.nodes[node].release,
                "repoid": self.repoid}

    def _node_entry(self, name: str) -> dict[str, Any]:
        node = self.cluster.nodes[name]
        return {"node": name, "id": f"node/{name}", "type": "node", "status": "online" if node.online else "offline",
                "level": "", "cpu": 0.01, "maxcpu": node.maxcpu, "mem": 2 * GiB, "maxmem": node.maxmem,
                "uptime": 3600, "disk": 0, "maxdisk": 0}

    def _node_status(self, name: str) -> dict[str, Any]:
        node = self.cluster.nodes[name]
        return {"pveversion": f"pve-manager/{node.version}/{self.repoid}", "kversion": "Linux 6.8.12-4-pve",
                "uptime": 3600, "cpu": 0.01, "cpuinfo": {"cpus": node.maxcpu},
                "memory": {"total": node.maxmem, "used": 2 * GiB, "free": node.maxmem - 2 * GiB}}

    def _cluster_status(self) -> list[dict[str, Any]]:
        nodes = list(self.cluster.nodes.values())
        items: list[dict[str, Any]] = []
        if self.cluster.cluster_name:
            items.append({"type": "cluster", "id": "cluster", "name": self.cluster.cluster_name, "nodes": len(nodes),
                          "quorate": 1, "version": len(nodes)})
        for number, node in enumerate(nodes, 1):
            items.append({"type": "node", "id": f"node/{node.name}", "name": node.name, "nodeid": number,
                          "ip": node.ip, "online": int(node.online), "local": int(number == 1), "level": ""})
        return items

    def _resources(self, kind: str | None) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        if kind in (None, "node"):
            items += [self._node_entry(n) for n in self.cluster.nodes]
        if kind in (None, "storage"):
            for node in self.cluster.nodes:
                for storage in self.cluster.storages.values():
                    items.append({"id": f"storage/{node}/{storage.name}", "type": "storage", "node": node,
                                  "storage": storage.name, "plugintype": storage.type, "status": "available",
                                  "content": ",".join(storage.content), "shared": int(storage.shared),
                                  "maxdisk": storage.total, "disk": storage.used(node)})
        if kind in (None, "vm"):
            for node, vmid in self.cluster.vmids():
                status = self.lxc.status(node, vmid)
                items.append({"id": f"lxc/{vmid}", "type": "lxc", "vmid": vmid, "node": node, "name": status["name"],
                              "status": status["status"], "maxmem": status["maxmem"], "maxdisk": status["maxdisk"],
                              "maxcpu": status["cpus"], "template": status.get("template", 0),
                              **({"lock": status["lock"]} if "lock" in status else {})})
            for node, vmid in self.cluster.qemu_vmids():
                status = self.qemu.status(node, vmid)
                items.append({"id": f"qemu/{vmid}", "type": "qemu", "vmid": vmid, "node": node, "name": status["name"],
                              "status": status["status"], "maxmem": status["maxmem"], "maxdisk": status["maxdisk"],
                              "maxcpu": status["cpus"], "template": status.get("template", 0),
                              **({"lock": status["lock"]} if "lock" in status else {})})
        return items

    def _nextid(self, wanted: str | None) -> int:
        used = {vmid for _, vmid in [*self.cluster.vmids(), *self.cluster.qemu_vmids()]}
        if wanted is not None:
            if int(wanted) in used:
                raise param_error({"vmid": f"VM {wanted} already exists"})
            return int(wanted)
        return next(v for v in range(100, 1_000_000_000) if v not in used)

    # --- storage ----------------------------------------------------------------------------------
    def _storages(self, params: Mapping[str, str]) -> list[dict[str, Any]]:
        wanted = set(params.get("content", "").replace(";", ",").split(",")) - {""}
        rows = []
        for storage in self.cluster.storages.values():
            if wanted and not wanted & set(storage.content):
                continue
            if params.get("storage") and params["storage"] != storage.name:
                continue
            used = storage.used(params["node"])
            rows.append({"storage": storage.name, "type": storage.type, "content": ",".join(storage.content),
                         "active": 1, "enabled": 1, "shared": int(storage.shared), "total": storage.total,
                         "used": used, "avail": storage.total - used, "used_fraction": used / storage.total})
        return rows

    def _storage_status(self, node: str, sid: str) -> dict[str, Any]:
        storage = self.lxc.storage(sid)
        used = storage.used(node)
        return {"type": storage.type, "content": ",".join(storage.content), "active": 1, "enabled": 1,
                "shared": int(storage.shared), "total": storage.total, "used": used, "avail": storage.total - used}

    def _content(self, params: Mapping[str, str]) -> list[dict[str, Any]]:
        storage = self.lxc.storage(params["storage"])
        rows: list[dict[str, Any]] = []
        if params.get("content") in (None, "vztmpl") and "vztmpl" in storage.content:
            for name in storage.templates:
                rows.append({"volid": f"{storage.name}:vztmpl/{name}", "content": "vztmpl", "size": 130 * 1024**2,
                             "format": name.rsplit(".", 1)[-1].replace("zst", "tzst"), "ctime": 1_700_000_000})
        if params.get("content") in (None, "rootdir", "images"):
            for volid, (node, size) in sorted(storage.volumes.items()):
                owner = int(re.findall(r"(?:vm|subvol)-(\d+)-disk", volid)[0])
                elsewhere = not storage.shared and node != params["node"]
                if elsewhere or (params.get("vmid") and int(params["vmid"]) != owner):
                    continue
                rows.append({"volid": volid, "content": "rootdir", "size": size, "vmid": owner, "format": "raw"})
        return rows

    # --- tasks ------------------------------------------------------------------------------------
    def _task(self, params: Mapping[str, str]) -> Task:
        upid = params["upid"]
        if not _UPID.match(upid):
            raise param_error({"upid": "unable to parse worker upid"})
        task = self.cluster.tasks.get(upid)
        if task is None or task.node != params["node"]:
            raise param_error({"upid": "no such task"})
        return task

    def _task_log(self, params: Mapping[str, str]) -> list[dict[str, Any]]:
        task = self._task(params)
        start, limit = int(params.get("start", "0")), int(params.get("limit", "50"))
        lines = task.log[start : start + limit] if limit else task.log[start:]
        return [{"n": start + i + 1, "t": line} for i, line in enumerate(lines)]

    def _tasks(self, params: Mapping[str, str]) -> list[dict[str, Any]]:
        source = params.get("source", "archive")
        rows = []
        for task in sorted(self.cluster.tasks.values(), key=lambda t: -t.starttime):
            if task.node != params["node"] or (source == "archive" and task.status == "running"):
                continue
            if (source == "active" and task.status != "running") or (
                    params.get("vmid") and task.id != params["vmid"]) or (
                    params.get("typefilter") and task.type != params["typefilter"]) or (
                    params.get("errors") == "1" and (task.exitstatus or "OK").split(":")[0] in ("OK", "WARNINGS")):
                continue
            row = task.as_status()
            row.pop("exitstatus", None)
            if task.status == "stopped":
                row.update(status=task.exitstatus, endtime=task.endtime or int(time.time()))
            rows.append(row)
        start, limit = int(params.get("start", "0")), int(params.get("limit", "50"))
        return rows[start : start + limit]
