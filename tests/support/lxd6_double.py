"""A double of today's LXD (5.21/6.x) REST API over a unix socket: the subset labwright uses, answered the way
LXD 6.x answers it where that differs from the 5.0.2 this machine runs (no newer LXD can be installed here).

Derived from canonical/lxd's source (the mirror's HEAD a83edf2a, and the tags named):

- ``GET /1.0/operations/ID/wait?timeout=N`` (lxd/operations.go operationWaitGet; lxd-5.0.3 227524b0 lines 879-981,
  lxd-6.1 5a492a3f lines 929-1035): a ManualResponse that writes HTTP 200 and ``Connection: keep-alive`` first, then
  ``op.Wait(ctx)``; when the deadline passes with the operation still running the body is
  ``response.SmartError(ctx.Err())``: ``{"type": "error", "error": "context deadline exceeded", "error_code": 500}``
  under the HTTP 200 already sent (lxd/response/response.go errorResponse.Render writes the code only when
  ``Connection`` is not keep-alive). A failed operation's wait is the same shape with the operation's error
  (lxd/operations/operations.go Operation.Wait returns ``api.NewStatusError(errCode, err)``). LXD 5.0.2 (lxd-5.0.2
  d3bdc6b0 lines 854-936) and Incus (lxc/incus cmd/incusd/operations.go operationWaitGet, be7afc5d lines 968-1070:
  ``_ = op.Wait(ctx)`` then ``op.Render()``) answer the running operation instead: ``flavour="incus"`` does that.
- Error answers (lxd/response/response.go errorResponse.Render, shared/api/response.go ResponseRaw):
  ``{"type": "error", "status": "", "status_code": 0, "operation": "", "error_code": CODE, "error": MSG,
  "metadata": null}`` with HTTP CODE, the JSON followed by a blank line (``fmt.Fprintln`` of an encoded line).
- ``GET /1.0`` (lxd/api_1.0.go, shared/api/server.go): ``environment.server`` "lxd", ``server_version``,
  ``server_name``, and ``api_extensions`` (shared/version/api.go; ``gpu_cdi`` from LXD 6.2, commit 0f6aff58).
- exec with ``record-output`` (lxd/instance_exec.go, lxd-5.21.0 line 735): the outputs are
  ``/1.0/instances/NAME/logs/exec-output/exec_ID.stdout`` (5.0.2: ``.../logs/exec_ID.stdout``).

An operation runs until the test finishes it (``finish``/``fail``), or for ``op_seconds`` of the double's clock; a
wait's ``timeout=N`` lasts ``N * time_scale`` real seconds, so a test sees a deadline in milliseconds.
"""

from __future__ import annotations

import json
import os
import socketserver
import threading
import urllib.parse
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

#: A sample of LXD 6.5's api_extensions (shared/version/api.go): the ones labwright asks about, plus neighbours.
LXD6_EXTENSIONS = ("storage_zfs_remove_snapshots", "container_exec_recording", "resources_gpu", "gpu_mig",
                   "instances", "gpu_cdi", "gpu_cdi_amd")
#: Incus has no CDI (lxc/incus be7afc5d internal/version/api.go has no gpu_cdi; its gpu device keeps nvidia.runtime).
INCUS_EXTENSIONS = ("storage_zfs_remove_snapshots", "container_exec_recording", "resources_gpu", "gpu_mig",
                    "instances")


@dataclass
class Operation:
    id: str
    description: str
    resources: dict[str, list[str]]
    metadata: dict[str, Any] = field(default_factory=dict)
    done: threading.Event = field(default_factory=threading.Event)
    err: str = ""
    status: str = "Running"
    status_code: int = 103
    on_done: Callable[[], None] | None = None

    def render(self) -> dict[str, Any]:
        return {"id": self.id, "class": "task", "description": self.description, "created_at": "",
                "updated_at": "", "status": self.status, "status_code": self.status_code,
                "resources": self.resources, "metadata": self.metadata, "may_cancel": False, "err": self.err,
                "location": "none"}


class Lxd6Double:
    """The daemon's state and answers. ``serve(path)`` listens on a unix socket in a thread."""

    def __init__(self, flavour: str = "lxd", version: str = "6.5", extensions: Iterable[str] | None = None,
                 time_scale: float = 0.01, op_seconds: float | None = None):
        self.flavour = flavour
        self.version = version
        default = INCUS_EXTENSIONS if flavour == "incus" else LXD6_EXTENSIONS
        self.extensions = list(default if extensions is None else extensions)
        self.time_scale = time_scale
        self.op_seconds = op_seconds  # None: operations run until the test finishes them
        self.instances: dict[str, dict[str, Any]] = {}
        self.files: dict[tuple[str, str], bytes] = {}
        self.logs: dict[str, bytes] = {}
        self.operations: dict[str, Operation] = {}
        self.profiles = {"default": {"name": "default", "config": {}, "devices": {}}}
        self.networks = {"lxdbr0": {"name": "lxdbr0", "managed": True}}
        self.pools = {"default": {"name": "default", "driver": "dir"}}
        self.gpu_cards: list[dict[str, Any]] = []
        self.exec_runner: Callable[[list[str]], tuple[int, bytes, bytes]] = _echo
        self.requests: list[tuple[str, str]] = []
        self.timed_out_waits = 0
        self.hold_operations = False  # True: every new operation runs until finish()
        self._server: socketserver.ThreadingUnixStreamServer | None = None

    # --- operations --------------------------------------------------------------------------
    def start_operation(self, description: str, resources: dict[str, list[str]], work: Callable[[], None],
                        metadata: dict[str, Any] | None = None) -> Operation:
        op = Operation(str(uuid.uuid4()), description, resources, {} if metadata is None else metadata)
        op.on_done = work
        self.operations[op.id] = op
        if not self.hold_operations and self.op_seconds is None:
            self.finish(op)
        elif self.op_seconds is not None:
            timer = threading.Timer(self.op_seconds * self.time_scale, self.finish, (op,))
            timer.daemon = True
            timer.start()
        return op

    def finish(self, op: Operation | None = None) -> None:
        """Complete ``op`` (default: every running operation), running its work first."""
        for one in [op] if op else [o for o in self.operations.values() if not o.done.is_set()]:
            if one.done.is_set():
                continue
            try:
                if one.on_done:
                    one.on_done()
                one.status, one.status_code = "Success", 200
            except Exception as exc:  # the work's failure is the operation's
                one.status, one.status_code, one.err = "Failure", 400, str(exc)
            one.done.set()

    def fail(self, op: Operation, err: str) -> None:
        op.status, op.status_code, op.err = "Failure", 400, err
        op.done.set()

    def running(self) -> list[Operation]:
        return [o for o in self.operations.values() if not o.done.is_set()]

    # --- server --------------------------------------------------------------------------------
    def server_meta(self) -> dict[str, Any]:
        return {"api_extensions": list(self.extensions), "api_status": "stable", "api_version": "1.0",
                "auth": "trusted", "public": False, "auth_methods": ["tls"],
                "environment": {"server": self.flavour, "server_version": self.version, "server_name": "double",
                                "server_clustered": False, "kernel": "Linux", "storage": "dir",
                                "firewall": "nftables", "driver": "lxc"}}

    def serve(self, path: str) -> Lxd6Double:
        double = self

        class Handler(_Handler):
            owner = double

        if os.path.exists(path):
            os.unlink(path)
        self._server = socketserver.ThreadingUnixStreamServer(path, Handler)
        self._server.daemon_threads = True
        thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True)
        thread.start()
        return self

    def close(self) -> None:
        self.finish()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def _echo(command: list[str]) -> tuple[int, bytes, bytes]:
    """The default exec: ``echo ARGS`` prints them, ``false`` fails, anything else prints its argv."""
    if command[:1] == ["false"]:
        return 1, b"", b""
    if command[:1] == ["echo"]:
        return 0, (" ".join(command[1:]) + "\n").encode(), b""
    return 0, (" ".join(command) + "\n").encode(), b""


class _Handler(BaseHTTPRequestHandler):
    owner: Lxd6Double
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return

    # --- answers ---------------------------------------------------------------------------------
    def _send(self, code: int, doc: Any, raw: bytes | None = None, headers: dict[str, str] | None = None) -> None:
        body = raw if raw is not None else (json.dumps(doc) + "\n\n").encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json" if raw is None else "application/octet-stream")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def sync(self, metadata: Any, code: int = 200) -> None:
        self._send(code, {"type": "sync", "status": "Success", "status_code": 200, "operation": "",
                          "error_code": 0, "error": "", "metadata": metadata})

    def error(self, code: int, message: str) -> None:
        self._send(code, {"type": "error", "status": "", "status_code": 0, "operation": "", "error_code": code,
                          "error": message, "metadata": None})

    def async_(self, op: Operation) -> None:
        self._send(202, {"type": "async", "status": "Operation created", "status_code": 100,
                         "operation": f"/1.0/operations/{op.id}", "error_code": 0, "error": "",
                         "metadata": op.render()}, headers={"Location": f"/1.0/operations/{op.id}"})

    def _manual(self, doc: dict[str, Any]) -> None:
        """LXD's ManualResponse: HTTP 200 and keep-alive sent before the body is known; Go's server then chunks it."""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Connection", "keep-alive")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        body = (json.dumps(doc) + "\n\n").encode()
        self.wfile.write(f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n")

    # --- routing -----------------------------------------------------------------------------------
    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_PUT(self) -> None:
        self._route("PUT")

    def do_DELETE(self) -> None:
        self._route("DELETE")

    def _route(self, method: str) -> None:
        d = self.owner
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        parts = [p for p in url.path.split("/") if p][1:]  # after "1.0"
        body = self._body()
        d.requests.append((method, self.path))
        if not parts:
            return self.sync(d.server_meta())
        kind = parts[0]
        if kind == "operations":
            return self._operation(method, parts, query)
        if kind == "instances":
            return self._instances(method, parts, query, body)
        if kind == "resources":
            return self.sync({"gpu": {"cards": d.gpu_cards, "total": len(d.gpu_cards)}})
        table = {"profiles": d.profiles, "networks": d.networks, "storage-pools": d.pools}.get(kind)
        if table is not None and len(parts) == 2 and method == "GET":
            if parts[1] in table:
                return self.sync(table[parts[1]])
            return self.error(404, f"{ {'profiles': 'Profile', 'networks': 'Network'}.get(kind, 'Storage pool')} "
                                   "not found")
        if kind == "images" and method == "GET":
            return self.error(404, "Image alias not found" if parts[1:2] == ["aliases"] else "Image not found")
        return self.error(404, "not found")

    def _operation(self, method: str, parts: list[str], query: dict[str, str]) -> None:
        d = self.owner
        op = d.operations.get(parts[1]) if len(parts) > 1 else None
        if len(parts) == 1:
            # lxd/operations.go operationsGet (Incus: cmd/incusd/operations.go): with recursion the operations
            # themselves, by status; without, their URLs
            if query.get("recursion"):
                return self.sync({"running": [o.render() for o in d.running()]})
            return self.sync({"running": [f"/1.0/operations/{o.id}" for o in d.running()]})
        if op is None:
            return self.error(404, "Operation not found")
        if len(parts) == 2:
            return self.sync(op.render())
        timeout = int(query.get("timeout", "-1"))  # shared.AtoiEmptyDefault(r.FormValue("timeout"), -1)
        finished = op.done.wait(None if timeout < 0 else timeout * d.time_scale)
        if not finished:
            d.timed_out_waits += 1
        if d.flavour == "incus":
            return self.sync(op.render())  # Incus: `_ = op.Wait(ctx)`, then the operation as it is now
        if not finished:
            return self._manual({"type": "error", "status": "", "status_code": 0, "operation": "",
                                 "error_code": 500, "error": "context deadline exceeded", "metadata": None})
        if op.err:
            return self._manual({"type": "error", "status": "", "status_code": 0, "operation": "",
                                 "error_code": 500, "error": op.err, "metadata": None})
        return self._manual({"type": "sync", "status": "Success", "status_code": 200, "operation": "",
                             "error_code": 0, "error": "", "metadata": op.render()})

    def _instances(self, method: str, parts: list[str], query: dict[str, str], body: bytes) -> None:
        d = self.owner
        if len(parts) == 1:
            if method == "POST":
                spec = json.loads(body)
                name = spec["name"]
                if name in d.instances:
                    return self.error(409, "Instance already exists")

                def create() -> None:
                    d.instances[name] = {"name": name, "status": "Stopped", "status_code": 102, "type": "container",
                                         "config": dict(spec.get("config") or {}),
                                         "devices": dict(spec.get("devices") or {}),
                                         "expanded_devices": dict(spec.get("devices") or {}),
                                         "profiles": spec.get("profiles") or ["default"]}

                return self.async_(d.start_operation("Creating instance", {"instances": [f"/1.0/instances/{name}"]},
                                                     create))
            if query.get("recursion"):
                return self.sync(list(d.instances.values()))
            return self.sync([f"/1.0/instances/{n}" for n in d.instances])
        name = parts[1]
        inst = d.instances.get(name)
        if inst is None:
            return self.error(404, "Instance not found")
        rest = parts[2:]
        if not rest:
            if method == "GET":
                return self.sync(inst)
            if method == "PUT":
                spec = json.loads(body)

                def update() -> None:
                    inst.update({k: spec[k] for k in ("config", "devices", "profiles") if k in spec})
                    inst["expanded_devices"] = dict(inst.get("devices") or {})

                return self.async_(d.start_operation("Updating instance", {"instances": [self.path]}, update))
            if method == "DELETE":
                if inst["status"] == "Running":
                    return self.error(400, "Instance is running")
                return self.async_(d.start_operation("Deleting instance", {"instances": [self.path]},
                                                     lambda: d.instances.pop(name, None)))
        if rest == ["snapshots"] and method == "POST":
            # lxd/instance_snapshot.go instanceSnapshotsPost: an async "Snapshotting instance" operation on the
            # instance; the snapshot exists once it succeeds
            snap = json.loads(body)["name"]

            def take() -> None:
                inst.setdefault("snapshots", []).append(snap)

            return self.async_(d.start_operation("Snapshotting instance", {"instances": [f"/1.0/instances/{name}"]},
                                                 take))
        if rest == ["state"]:
            if method == "GET":
                return self.sync({"status": inst["status"], "status_code": inst["status_code"], "network": {}})
            action = json.loads(body)["action"]

            def change() -> None:
                inst["status"], inst["status_code"] = {"start": ("Running", 103), "stop": ("Stopped", 102),
                                                       "restart": ("Running", 103), "freeze": ("Frozen", 110),
                                                       "unfreeze": ("Running", 103)}[action]

            return self.async_(d.start_operation(f"{action.capitalize()}ing instance", {"instances": [self.path]},
                                                 change))
        if rest == ["exec"]:
            spec = json.loads(body)
            ident = uuid.uuid4().hex[:8]
            out = f"/1.0/instances/{name}/logs/exec-output/exec_{ident}.stdout"
            err = f"/1.0/instances/{name}/logs/exec-output/exec_{ident}.stderr"
            meta: dict[str, Any] = {}

            def run() -> None:
                code, stdout, stderr = d.exec_runner(list(spec["command"]))
                d.logs[out], d.logs[err] = stdout, stderr
                meta.update({"return": code, "output": {"1": out, "2": err}})

            return self.async_(d.start_operation("Executing command", {"instances": [f"/1.0/instances/{name}"]},
                                                 run, meta))
        if rest[:2] == ["logs", "exec-output"]:
            key = "/1.0/instances/" + "/".join([name, *rest])
            if key not in d.logs:
                return self.error(404, "Log file not found")
            if method == "DELETE":
                d.logs.pop(key)
                return self.sync(None)
            return self._send(200, None, raw=d.logs[key])
        if rest == ["files"]:
            path = query.get("path", "")
            if method == "POST":
                d.files[(name, path)] = body
                return self.sync(None)
            if method == "DELETE":
                d.files.pop((name, path), None)
                return self.sync(None)
            if (name, path) not in d.files:
                return self.error(404, "Not found")
            return self._send(200, None, raw=d.files[(name, path)], headers={"X-LXD-type": "file"})
        return self.error(404, "not found")


def write_nvidia_cdi_spec(root: str | os.PathLike[str], gpus: int = 1, dynamic: bool = False) -> str:
    """Write the CDI spec ``nvidia-ctk cdi generate`` writes for ``gpus`` GPUs below ``root``; return its path.

    As NVIDIA/nvidia-container-toolkit (d34b3046) writes it: YAML by default (cmd/nvidia-ctk/cdi/generate/generate.go
    ``--format`` default yaml), ``kind: nvidia.com/gpu`` (``--vendor nvidia.com --class gpu``), one device per GPU
    for each of the default ``--device-name-strategy index,uuid`` (names "0" and "GPU-<uuid>") plus "all", each with
    its ``/dev/nvidiaN`` node, and the shared nodes in the top ``containerEdits`` (pkg/nvcdi/spec/spec_test.go
    shows the layout). ``dynamic``: where the toolkit's nvidia-cdi-refresh unit writes it, /var/run/cdi/nvidia.yaml
    (deployments/systemd/nvidia-cdi-refresh.service); else /etc/cdi/nvidia.yaml (``--output``).
    """
    devices = []
    for index in range(gpus):
        node = {"containerEdits": {"deviceNodes": [{"path": f"/dev/nvidia{index}"}]}}
        devices.append({"name": str(index), **node})
        devices.append({"name": f"GPU-{uuid.UUID(int=index + 1)}", **node})
    devices.append({"name": "all", "containerEdits": {"deviceNodes": [
        {"path": f"/dev/nvidia{index}"} for index in range(gpus)]}})
    shared = {"deviceNodes": [{"path": p} for p in ("/dev/nvidia-modeset", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
                                                   "/dev/nvidiactl")],
              "hooks": [{"hookName": "createContainer", "path": "/usr/bin/nvidia-cdi-hook",
                         "args": ["nvidia-cdi-hook", "update-ldcache", "--folder", "/usr/lib/x86_64-linux-gnu"]}],
              "mounts": [{"hostPath": "/usr/bin/nvidia-smi", "containerPath": "/usr/bin/nvidia-smi",
                          "options": ["ro", "nosuid", "nodev", "bind"]}]}
    import yaml

    text = "---\n" + yaml.safe_dump({"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": devices,
                                     "containerEdits": shared}, sort_keys=False)
    where = "var/run/cdi" if dynamic else "etc/cdi"
    directory = os.path.join(root, where)
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "nvidia.yaml")
    with open(path, "w") as fh:
        fh.write(text)
    return "/" + where + "/nvidia.yaml"
