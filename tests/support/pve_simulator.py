"""A Proxmox VE API simulator for tests: HTTPS on 127.0.0.1, schema-validated, stateful.

proxmoxer (or anything else that speaks PVE's API) talks to it unchanged: ``/api2/json`` paths,
the ``{"data": ...}`` envelope, errors with PVE's status, reason phrase and ``errors`` map, and both
ways to log in (a ticket from ``POST /access/ticket`` plus its CSRF token on writes, or an
``Authorization: PVEAPIToken=USER@REALM!ID=SECRET`` header). Every request is validated against the
real API schema (see ``pve_schema``) and recorded, so a test can assert that no write was sent.

.. code:: python

    with PveSimulator(nodes=[SimNode("pve1", "8.2.4", devices=NVIDIA)], tokens={"root@pam!ci": "s3cret"}) as sim:
        api = ProxmoxAPI(sim.host, user="root@pam", password=sim.root_password, verify_ssl=sim.ca_file)
        upid = api.nodes("pve1").lxc.post(vmid=101, ostemplate=sim.template, rootfs="local-lvm:8")
        sim.fail_next_task("command 'lxc-start' failed")   # or sim.hang_next_task("vzstart")
        assert sim.writes[-1].path == "/nodes/pve1/lxc"

See docs/pve-simulator.md for what is simulated and what is not.

Provenance (read for these behaviours; versions and commits in docs/pve-simulator.md):
- pve-http-server 6.0.5 (5c9e4ea77336), src/PVE/APIServer/AnyEvent.pm: the ticket comes from the
  ``PVEAuthCookie`` cookie, else the ``Authorization`` header, and only then a ``PVEAPIToken=`` value
  (1578-1596); authentication runs before the request reaches routing (1604-1612); an auth error is a status
  line with the error as reason and no body (1614-1646); the reason phrase is the message's first line
  (``response`` 306-315). Deliberately not copied: the 3 s delay on every 401 (1618, 1036-1040).
- pve-manager 9.2.11 (14a22df35955), PVE/HTTPServer.pm ``auth_handler``: ``/access/ticket`` needs no auth
  (69-78); a token or ticket that does not verify is "Authentication failed!" whatever the reason (85-103);
  no ticket is "No ticket" (93); writes need the CSRF token unless authenticated by API token (123-130).
- pve-common 9.2.1 (f665029eac78), src/PVE/Ticket.pm: CSRF token ``%08X:`` + HMAC (19-27), a bad one is 401
  "Permission denied - invalid csrf token" (29-50); the ticket ``PVE:USER:%08X::SIG`` (53-72).
- pve-access-control 9.1.1 (5ccd07d93025), src/PVE/API2/AccessControl.pm ``create_ticket_do``: a valid
  ticket as the password renews it (138-160); any failure is 401 "authentication failure" (300-311);
  ``clustername`` only when clustered (316-319). src/PVE/AccessControl.pm ``verify_token`` (487-516).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import ssl
import stat
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from support.pve_api import PveApi
from support.pve_config import CtConfig
from support.pve_schema import ApiSchema, PveApiError, param_error, validate
from support.pve_state import Principal, PveCluster, SimNode, SimStorage
from support.pve_tls import write_certificates

PREFIX = "/api2/json"
ROOT_PASSWORD = "simulated-root-password"
#: What pveproxy answers for any ticket or token it cannot verify (pve-manager PVE/HTTPServer.pm 89-90, 101-102).
AUTH_FAILED = "Authentication failed!"
DEBIAN_TEMPLATE = "debian-12-standard_12.7-1_amd64.tar.zst"
#: The device nodes of a host with one NVIDIA GPU (nvidia-uvm's major is dynamic; 508 is a common one).
NVIDIA_DEVICES = {"/dev/nvidia0": (195, 0), "/dev/nvidiactl": (195, 255), "/dev/nvidia-modeset": (195, 254),
                  "/dev/nvidia-uvm": (508, 0), "/dev/nvidia-uvm-tools": (508, 1),
                  "/dev/nvidia-caps/nvidia-cap1": (511, 1), "/dev/nvidia-caps/nvidia-cap2": (511, 2)}


def host_devices(root: str | Path) -> dict[str, tuple[int, int]]:
    """The character devices below ``root/dev`` as a node's ``devices`` (``/dev/...`` -> (major, minor)), so a
    simulated node can share a fake host tree (``support.fake_nvidia``) with the code under test."""
    devices = {}
    for path in sorted(Path(root, "dev").rglob("*")):
        info = path.lstat()
        if stat.S_ISCHR(info.st_mode):
            devices["/" + str(path.relative_to(root))] = (os.major(info.st_rdev), os.minor(info.st_rdev))
    return devices


def default_storages() -> list[SimStorage]:
    """A stock LVM-thin install: ``local`` (templates, ISOs, backups) and ``local-lvm`` (container disks)."""
    return [SimStorage("local", "dir", ("iso", "vztmpl", "backup"), templates=[DEBIAN_TEMPLATE]),
            SimStorage("local-lvm", "lvmthin", ("rootdir", "images"))]


@dataclass(frozen=True)
class Request:
    """One request as the simulator saw it: ``path`` without ``/api2/json``; ``params`` from query and body."""

    method: str
    path: str
    params: dict[str, Any]
    user: str | None
    status: int


@dataclass
class _Session:
    user: str
    csrf: str
    issued: float = field(default_factory=time.time)


class PveSimulator:
    """One simulated cluster behind one HTTPS listener. Use as a context manager (or ``start``/``stop``)."""

    def __init__(self, nodes: list[SimNode] | None = None, storages: list[SimStorage] | None = None,
                 users: dict[str, str] | None = None, tokens: dict[str, str] | None = None,
                 privileges: dict[str, frozenset[str]] | None = None, task_seconds: float = 0.05,
                 cluster_name: str | None = None, schema: ApiSchema | None = None,
                 on_boot: Callable[[str, int, CtConfig], None] | None = None):
        """``users``: userid -> password (default root@pam); ``tokens``: ``user@realm!id`` -> secret;
        ``privileges``: userid or token id -> the privileges it holds (default: all, like Administrator);
        ``on_boot(node, vmid, config)``: run when a CT starts (e.g. make it in a pct double's node)."""
        self.root_password = ROOT_PASSWORD
        self.schema = schema or ApiSchema.load()
        self._dir = Path(tempfile.mkdtemp(prefix="pve-sim-"))
        self.pmxcfs = self._dir / "etc-pve"
        users = {"root@pam": ROOT_PASSWORD} if users is None else users
        grants = privileges or {}
        principals = [Principal(u, s, grants.get(u)) for u, s in {**users, **(tokens or {})}.items()]
        self.cluster = PveCluster(nodes or [SimNode("pve1")], storages if storages is not None else default_storages(),
                                  principals, self.pmxcfs, task_seconds, cluster_name)
        self.cluster.on_boot = on_boot
        self.api = PveApi(self.schema, self.cluster)
        self.ca_file, cert, key = write_certificates(self._dir)
        self.requests: list[Request] = []
        self._sessions: dict[str, _Session] = {}
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._tls.load_cert_chain(cert, key)

    # --- lifecycle ----------------------------------------------------------------------------------
    def start(self) -> PveSimulator:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        server.daemon_threads = True
        server.socket = self._tls.wrap_socket(server.socket, server_side=True)
        server.simulator = self  # type: ignore[attr-defined]
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, args=(0.05,), name="pve-simulator", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.cluster.shutdown()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> PveSimulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None, "start the simulator first"
        return int(self._server.server_address[1])

    @property
    def host(self) -> str:
        """``127.0.0.1:PORT``: what proxmoxer's ``host`` argument takes."""
        return f"127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"https://{self.host}{PREFIX}"

    @property
    def template(self) -> str:
        """The volume id of the first template on the first storage that has one."""
        for storage in self.cluster.storages.values():
            if storage.templates:
                return f"{storage.name}:vztmpl/{storage.templates[0]}"
        raise LookupError("no storage holds a template")

    # --- what tests look at and steer ---------------------------------------------------------------
    @property
    def writes(self) -> list[Request]:
        """Every request that could change state (all but GET and logging in), rejected ones included."""
        return [r for r in self.requests if r.method != "GET" and r.path != "/access/ticket"]

    def fail_next_task(self, message: str = "command 'lxc-start -F -n 101' failed: exit code 1",
                       task_type: str | None = None) -> None:
        """The next task (of ``task_type`` such as ``vzcreate``/``vzstart``) ends with ``message`` as its
        exitstatus, after doing what it did up to its failure point (a create cleans up, as PVE's does)."""
        self.cluster.plan_task("fail", task_type, message)

    def warn_next_task(self, *warnings: str, task_type: str | None = None) -> None:
        """The next task does its work, logs each of ``warnings`` as ``WARN: ...`` and ends with exitstatus
        ``WARNINGS: N`` (a success: PVE's ``status_is_error`` is false for it)."""
        self.cluster.plan_task("warn", task_type, "\n".join(warnings) or "a warning")

    def hang_next_task(self, task_type: str | None = None) -> None:
        """The next task stays ``running`` until ``DELETE /nodes/N/tasks/UPID`` or the simulator stops."""
        self.cluster.plan_task("hang", task_type)

    def conf_path(self, node: str, vmid: int) -> Path:
        """The container's pmxcfs file, ``/etc/pve/nodes/NODE/lxc/VMID.conf`` on a node."""
        return self.cluster.conf_path(node, vmid)

    def config(self, node: str, vmid: int) -> CtConfig:
        return self.cluster.load(node, vmid)[0]

    def vm_conf_path(self, node: str, vmid: int) -> Path:
        """The VM's pmxcfs file, ``/etc/pve/nodes/NODE/qemu-server/VMID.conf`` on a node."""
        return self.cluster.qemu_conf_path(node, vmid)

    def vm_config(self, node: str, vmid: int) -> CtConfig:
        """The VM's parsed config file (options, ``[PENDING]`` values)."""
        return self.api.qemu.load(node, vmid)[0]

    def is_running(self, vmid: int) -> bool:
        return vmid in self.cluster.running

    # --- one request --------------------------------------------------------------------------------
    def handle(self, method: str, target: str, headers: Any, body: bytes) -> tuple[int, str, Any]:
        """(status, reason, JSON body) for one HTTP request."""
        url = urlsplit(target)
        params: dict[str, Any] = dict(parse_qsl(url.query, keep_blank_values=True))
        path = unquote(url.path)
        user: str | None = None
        status, reason, payload = 200, "OK", None
        try:
            if not path.startswith(PREFIX + "/"):
                raise PveApiError(501, f"Method '{method} {path}' not implemented")
            path = path[len(PREFIX):]
            if path.rstrip("/") != "/access/ticket":
                try:  # pveproxy authenticates before it looks the path up (AnyEvent.pm 1604-1646)
                    user = self._authenticate(method, headers)
                except PveApiError as exc:  # an auth error is a bare status line: reason, no body
                    self.requests.append(Request(method, path, {}, None, exc.status))
                    return exc.status, exc.message, None
            params.update(_body_params(headers, body))
            self.api.route(method, path)
            payload = self._login(method, params) if user is None else self.api.call(user, method, path, params)
        except PveApiError as exc:
            status, reason = exc.status, exc.message
            payload = {"data": None, "message": exc.message + "\n", **({"errors": exc.errors} if exc.errors else {})}
        else:
            payload = {"data": payload}
        recorded = {k: ("<redacted>" if k in ("password",) else v) for k, v in params.items()}
        self.requests.append(Request(method, path, recorded, user, status))
        return status, reason, payload

    def _login(self, method: str, params: dict[str, Any]) -> Any:
        if method == "GET":
            return None
        problems = validate(self.api.schema.endpoints["/access/ticket"].properties("POST"), params)
        if problems:
            raise param_error(problems)
        username = params["username"]
        if "@" not in username and params.get("realm"):
            username = f"{username}@{params['realm']}"
        principal = self.cluster.principals.get(username)
        renewal = self._sessions.get(params["password"])  # a valid ticket as the password renews it (proxmoxer)
        if renewal is not None and renewal.user == username:
            pass
        elif principal is None or principal.is_token or not secrets.compare_digest(principal.secret,
                                                                                    params["password"]):
            raise PveApiError(401, "authentication failure")
        stamp = f"{int(time.time()):08X}"
        ticket = f"PVE:{username}:{stamp}::{secrets.token_hex(32)}"
        csrf = f"{stamp}:{secrets.token_hex(16)}"
        self._sessions[ticket] = _Session(username, csrf)
        return {"username": username, "ticket": ticket, "CSRFPreventionToken": csrf,
                "clustername": self.cluster.cluster_name, "cap": {}}

    def _authenticate(self, method: str, headers: Any) -> str:
        """The caller's userid (a token's is ``user@realm!id``), or 401 as PVE's auth handler answers."""
        header = headers.get("Authorization") or ""
        ticket = _cookie(headers.get("Cookie") or "", "PVEAuthCookie") or _cookie(header, "PVEAuthCookie")
        if not ticket and header.startswith("PVEAPIToken="):
            # verify_token's own reasons ("no such token", "invalid token value!") only reach the log; the
            # client gets "Authentication failed!" (pve-manager HTTPServer.pm 85-91)
            tokenid, sep, secret = header[len("PVEAPIToken="):].rpartition("=")
            principal = self.cluster.principals.get(tokenid) if sep and "!" in tokenid else None
            if principal is None or not principal.is_token or not secrets.compare_digest(principal.secret, secret):
                raise PveApiError(401, AUTH_FAILED)
            return tokenid
        if not ticket:
            raise PveApiError(401, "No ticket")
        session = self._sessions.get(ticket)
        if session is None:  # verify_ticket's "permission denied - invalid PVE ticket" is logged, not sent
            raise PveApiError(401, AUTH_FAILED)
        if method != "GET" and headers.get("CSRFPreventionToken") != session.csrf:
            raise PveApiError(401, "Permission denied - invalid csrf token")
        return session.user


def _cookie(header: str, name: str) -> str | None:
    for part in header.split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return unquote(value.strip('"'))
    return None


def _body_params(headers: Any, body: bytes) -> dict[str, Any]:
    if not body:
        return {}
    kind = (headers.get("Content-Type") or "").split(";")[0].strip().lower()
    if kind == "application/json":
        data = json.loads(body or b"{}")
        if not isinstance(data, dict):
            raise PveApiError(400, "Parameter verification failed.", {"_root": "an object is required"})
        # JSON true/false stay booleans (PVE accepts them for boolean parameters only); the rest as text.
        return {k: v if isinstance(v, bool) else str(v) for k, v in data.items() if v is not None}
    return dict(parse_qsl(body.decode(), keep_blank_values=True))


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as proxmoxer's session expects
    disable_nagle_algorithm = True  # headers and body go out as two writes; Nagle would hold the body ~40 ms
    server_version = "pve-api-daemon/3.0"
    sys_version = ""

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        simulator: PveSimulator = self.server.simulator  # type: ignore[attr-defined]
        status, reason, payload = simulator.handle(self.command, self.path, self.headers, body)
        data = b"" if payload is None else json.dumps(payload).encode()
        self.send_response(status, (reason.strip().splitlines() or [""])[0])  # first line only (AnyEvent.pm 306-315)
        if payload is not None:
            self.send_header("Content-Type", "application/json;charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = _serve

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests read ``PveSimulator.requests`` instead of a request log."""
