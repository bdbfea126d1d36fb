"""A small, fast client for the LXD/Incus REST API.

Why not pylxd (no longer a dependency, docs/cli.md): its ``execute()`` opened websockets for every command and
cost ~130 ms; the raw API with ``record-output`` on a kept-alive connection costs ~15 ms. So exec and
file transfer go through this client, over the unix socket (local) or HTTPS with client
certificates (remotes), and both the lab and the ``@lxd`` connector share it.
"""

from __future__ import annotations

import http.client
import json
import math
import os
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

from labwright.errors import BadInput, LxdError, LxdNotFound, OperationFailed, OperationTimeout
from labwright.textio import loads_json

#: Where the local daemon's socket lives, first match wins. The order is the clients' own (client/connection.go
#: ConnectLXDUnixWithContext in canonical/lxd, ConnectIncusUnixWithContext in lxc/incus): ``LXD_SOCKET`` /
#: ``INCUS_SOCKET`` first, then ``LXD_DIR`` / ``INCUS_DIR`` (the only place looked at when set, as lxd/shared/util.go
#: VarPath: $LXD_DIR replaces the default directory), then the default paths (Incus: ``/run/incus`` before
#: ``/var/lib/incus``), so a daemon elsewhere is never talked to by accident.
SOCKET_CANDIDATES = {
    "lxd": ("/var/snap/lxd/common/lxd/unix.socket", "/var/lib/lxd/unix.socket"),
    "incus": ("/run/incus/unix.socket", "/var/lib/incus/unix.socket"),
}
#: The variables naming the socket itself, by flavour.
SOCKET_VARIABLES = {"lxd": "LXD_SOCKET", "incus": "INCUS_SOCKET"}


def socket_variable(path: str) -> str | None:
    """The variable (``LXD_SOCKET``/``INCUS_SOCKET``) that named ``path``, or None."""
    return next((var for var in SOCKET_VARIABLES.values() if path and os.environ.get(var) == path), None)


def find_local_socket(flavour: str = "lxd", fallback: bool = True) -> str:
    """Return the path of the local LXD (or Incus) unix socket, or raise with the fix. ``fallback``: an LXD that is
    not here falls back to a local Incus (the ``@lxd`` connector on an Incus-only host); the lab, which names its
    daemon (``lab_backend``), asks for that one only."""
    named = SOCKET_VARIABLES["incus" if flavour == "incus" else "lxd"]
    from_env = os.environ.get(named)
    if from_env:
        if not os.path.exists(from_env):
            raise BadInput(f"{named}={from_env}: no socket there; start the {flavour} daemon on it, or fix or unset "
                           f"{named} to use the default one")
        return from_env
    variable = "INCUS_DIR" if flavour == "incus" else "LXD_DIR"
    env = os.environ.get(variable)
    if env:
        candidates = [os.path.join(env, "unix.socket")]
    else:
        candidates = list(SOCKET_CANDIDATES[flavour])
        if flavour == "lxd" and fallback:
            candidates += list(SOCKET_CANDIDATES["incus"])
    for path in candidates:
        if os.path.exists(path):
            return path
    if env:
        raise OperationFailed(f"no {flavour} daemon socket at {candidates[0]} ({variable}={env}); start the daemon "
                              f"there, or unset {variable} to use the default one")
    raise OperationFailed(
        f"no {flavour} daemon socket found (looked at {', '.join(candidates)}); "
        "start the daemon or run `labwright lab up`"
    )


def _unix_socket(path: str, timeout: float | None) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(path)
    except BaseException:
        sock.close()
        raise
    return sock



def _operation_path(doc: dict[str, Any], what: str, title: str) -> str:
    """The ``operation`` an async answer names (``/1.0/operations/UUID``); LxdError when it names none."""
    operation = doc.get("operation")
    if not isinstance(operation, str) or not operation.startswith("/1.0/operations/"):
        raise LxdError(f"{what}: {title} answered an async operation without its path ({operation!r}); run again "
                       "once it answers as LXD does")
    return operation

class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        self.sock = _unix_socket(self.socket_path, self.timeout)


@dataclass
class Endpoint:
    """How to reach a daemon: a unix socket, or an HTTPS URL with a client certificate."""

    socket_path: str | None = None
    url: str | None = None
    client_cert: str | None = None
    client_key: str | None = None
    server_cert: str | None = None  # pinned certificate (lxc's servercerts/REMOTE.crt); else system CAs
    verify: bool = True
    #: How messages name the daemon ("LXD", "Incus"); empty: told by the socket (an Incus one, or INCUS_SOCKET's).
    daemon: str = ""

    def describe(self) -> str:
        return self.socket_path or self.url or "?"

    @property
    def title(self) -> str:
        """``Incus`` or ``LXD``: the daemon this endpoint reaches, for messages."""
        if self.daemon:
            return self.daemon
        path = self.socket_path or ""
        if path and (socket_variable(path) == "INCUS_SOCKET" or path in SOCKET_CANDIDATES["incus"]
                     or (os.environ.get("INCUS_DIR") and path == os.path.join(os.environ["INCUS_DIR"], "unix.socket"))):
            return "Incus"
        return "LXD"

    @property
    def tool(self) -> str:
        """The daemon's command line client: ``incus`` or ``lxc``."""
        return "incus" if self.title == "Incus" else "lxc"

    def address(self) -> tuple[str, int]:
        """(host, port) of an HTTPS endpoint."""
        assert self.url, "endpoint needs a socket path or a URL"
        parsed = urllib.parse.urlsplit(self.url)
        if parsed.scheme != "https":
            raise OperationFailed(f"{self.title} remote {self.url}: only https:// remotes are supported")
        return parsed.hostname or "", parsed.port or 8443

    def ssl_context(self) -> ssl.SSLContext:
        """TLS settings of an HTTPS endpoint: pinned server certificate or system CAs, client certificate."""
        ctx = ssl.create_default_context(cafile=self.server_cert) if self.verify else ssl._create_unverified_context()
        if self.server_cert and self.verify:
            # lxc pins the server's self-signed certificate; its CN rarely matches the address.
            ctx.check_hostname = False
        if self.client_cert:
            ctx.load_cert_chain(self.client_cert, self.client_key)
        return ctx


@dataclass
class ExecResult:
    exit_code: int
    stdout: bytes
    stderr: bytes
    timed_out: bool = False  # set by runners that enforce the timeout themselves (the exec agent)


@dataclass(frozen=True)
class ServerInfo:
    """What ``GET /1.0`` says of the daemon: ``environment.server`` ("lxd" or "incus"), ``server_version`` ("5.0.2",
    "6.5", "6.0.4") and the ``api_extensions`` it offers (shared/version/api.go in both projects)."""

    name: str
    version: str
    api_extensions: frozenset[str]

    @classmethod
    def of(cls, meta: Mapping[str, Any]) -> ServerInfo:
        env = meta.get("environment") or {}
        return cls(str(env.get("server") or "lxd"), str(env.get("server_version") or "?"),
                   frozenset(str(x) for x in meta.get("api_extensions") or ()))

    def describe(self) -> str:
        """``lxd 6.5``, ``incus 6.0.4``."""
        return f"{self.name} {self.version}"

    def has(self, extension: str) -> bool:
        return extension in self.api_extensions

    def as_dict(self) -> dict[str, str]:
        return {"name": self.name, "version": self.version}


class LxdClient:
    """Thread-safe (one connection per thread) client of one LXD/Incus daemon."""

    #: The longest labwright waits on any one LXD operation it did not give a deadline of its own (an image
    #: unpacked, a copy of a large guest on a ``dir`` pool): a wait is never unbounded.
    operation_timeout: float = 1800.0

    def __init__(self, endpoint: Endpoint | None = None, timeout: float = 120.0, project: str | None = None):
        self.endpoint = endpoint or Endpoint(socket_path=find_local_socket())
        self.timeout = timeout
        self.project = project
        self._local = threading.local()
        # Recorded exec outputs pile up in the instance's log dir unless deleted; deleting them in
        # batches keeps two round trips off every command.
        self._stale_logs: list[str] = []

    # --- transport -------------------------------------------------------------------------
    def _new_connection(self) -> http.client.HTTPConnection:
        ep = self.endpoint
        if ep.socket_path:
            return _UnixHTTPConnection(ep.socket_path, self.timeout)
        host, port = ep.address()
        return http.client.HTTPSConnection(host, port, timeout=self.timeout, context=ep.ssl_context())

    def new_socket(self, timeout: float | None = None) -> socket.socket:
        """A fresh connected socket to the daemon (TLS-wrapped for HTTPS), for protocols that leave
        HTTP behind after the first request (websockets). Errors come as OperationFailed."""
        ep = self.endpoint
        timeout = self.timeout if timeout is None else timeout
        try:
            if ep.socket_path:
                return _unix_socket(ep.socket_path, timeout)
            host, port = ep.address()
            raw = socket.create_connection((host, port), timeout=timeout)
            try:
                return ep.ssl_context().wrap_socket(raw, server_hostname=host)
            except BaseException:
                raw.close()
                raise
        except (OSError, ssl.SSLError) as exc:
            raise OperationFailed(f"{ep.title} at {ep.describe()} unreachable: {exc}") from exc

    @property
    def host_header(self) -> str:
        """What goes in the Host header of a raw request."""
        if self.endpoint.socket_path:
            return "localhost"
        host, port = self.endpoint.address()
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def api_path(self, path: str, params: Mapping[str, Any] | None = None) -> str:
        """``path`` with its query string (and this client's project)."""
        return self._path(path, params)

    def _conn(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._new_connection()
            self._local.conn = conn
        return conn

    def shutdown(self) -> None:
        """Tidy up (delete read exec outputs) and close the connection."""
        self.flush_logs()
        self.close()

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def _path(self, path: str, params: Mapping[str, Any] | None = None) -> str:
        query = dict(params or {})
        if self.project and "project" not in query:
            query["project"] = self.project
        return path + ("?" + urllib.parse.urlencode(query) if query else "")

    def raw(
        self,
        method: str,
        path: str,
        body: bytes | IO[bytes] | None = None,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> http.client.HTTPResponse:
        """Send one request and return the response, unread. Retries once on a dropped keep-alive."""
        url = self._path(path, params)
        hdrs = dict(headers or {})
        for attempt in (0, 1):
            conn = self._conn()
            try:
                if hasattr(body, "seek") and attempt:
                    body.seek(0)  # type: ignore[union-attr]
                conn.request(method, url, body=body, headers=hdrs)
                return conn.getresponse()
            except (ConnectionError, http.client.RemoteDisconnected, http.client.CannotSendRequest,
                    BrokenPipeError) as exc:
                self.close()
                if attempt:
                    # A refused connect on a unix socket: the socket file is there but no daemon listens.
                    raise self._unreachable(f"{self.endpoint.title} at {self.endpoint.describe()} unreachable: "
                                            f"{exc}") from exc
            except FileNotFoundError as exc:
                self.close()
                raise self._unreachable(f"{self.endpoint.title} socket {self.endpoint.describe()} is gone: "
                                        f"{exc}") from exc
            except PermissionError as exc:
                self.close()
                raise OperationFailed(
                    f"permission denied on {self.endpoint.describe()}; run as root or join the "
                    f"{'incus-admin' if self.endpoint.title == 'Incus' else 'lxd'} group"
                ) from exc
            except (TimeoutError, OSError) as exc:
                self.close()
                raise self._unreachable(f"{self.endpoint.title} at {self.endpoint.describe()} unreachable: "
                                        f"{exc}") from exc
        raise AssertionError("unreachable")

    def _unreachable(self, message: str) -> LxdError | OperationFailed | BadInput:
        """A daemon that does not answer: OperationFailed (``lab up`` starts it), or BadInput (exit 2) naming the
        variable when ``LXD_SOCKET``/``INCUS_SOCKET`` chose the socket: starting the default daemon would not help."""
        variable = socket_variable(self.endpoint.socket_path or "")
        if variable:
            return BadInput(f"{variable}={self.endpoint.socket_path}: no daemon answers there ({message}); start it "
                            f"there, or fix or unset {variable} to use the default socket")
        return OperationFailed(message)

    def request(
        self,
        method: str,
        path: str,
        json_body: Any = None,
        params: Mapping[str, Any] | None = None,
        wait: bool = True,
    ) -> Any:
        """A JSON request. Async operations are waited for (``wait=True``); returns the metadata."""
        body = None if json_body is None else json.dumps(json_body).encode()
        headers = {"Content-Type": "application/json"} if body is not None else {}
        resp = self.raw(method, path, body=body, headers=headers, params=params)
        data = resp.read()
        return self._handle(method, path, resp.status, data, wait)

    def _handle(self, method: str, path: str, status: int, data: bytes, wait: bool) -> Any:
        try:
            doc = loads_json(data) if data else {}
        except ValueError as exc:
            raise LxdError(f"{method} {path}: non-JSON answer (HTTP {status})", status) from exc
        if not isinstance(doc, dict):
            raise LxdError(f"{method} {path}: {self.endpoint.title} answered {type(doc).__name__} instead of an "
                           "object "
                           f"(HTTP {status})", status)
        if doc.get("type") == "error" or status >= 400:
            message = doc.get("error") or f"HTTP {status}"
            if status == 403 and self.endpoint.url:
                message += (f" (trust this client's certificate on the server: `{self.endpoint.tool} config trust "
                            "add`)")
            cls = LxdNotFound if status == 404 else LxdError
            raise cls(f"{method} {path}: {message}", status)
        if doc.get("type") == "async" and wait:
            return self.wait_operation(_operation_path(doc, f"{method} {path}", self.endpoint.title))
        return doc.get("metadata")

    def wait_operation(self, operation: str, timeout: float | None = None, what: str = "",
                       every: float = 60, on_wait: Callable[[dict[str, Any]], None] | None = None) -> Any:
        """Wait for an operation, at most ``timeout`` seconds (default ``operation_timeout``: no wait is unbounded);
        raise with its error when it fails, and ``OperationTimeout`` naming ``what`` (else the operation's own
        description) when it is still running at the deadline. ``on_wait`` is called with the operation's metadata
        after each wait of at most ``every`` seconds that ended with it still running."""
        limit = self.operation_timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        meta: dict[str, Any] = {}
        while True:
            # LXD takes whole seconds (strconv.Atoi on "timeout"): at least 1, so the last wait may pass the deadline
            # by under a second instead of asking in a loop.
            step = max(1, min(int(every), math.ceil(deadline - time.monotonic())))
            try:
                meta = self.request("GET", f"{operation}/wait", params={"timeout": step}) or {}
            except LxdNotFound:
                raise
            except LxdError as exc:
                # From LXD 5.0.3 (and 5.21, 6.x), a wait that times out on a running operation is an error answer:
                # operationWaitGet sends HTTP 200 first, then renders SmartError(op.Wait(ctx)), the context's
                # "context deadline exceeded" with error_code 500 (canonical/lxd lxd/operations.go operationWaitGet,
                # lxd-5.0.3 227524b0 lines 879-981, lxd-6.1 5a492a3f lines 929-1035; lxd/response/response.go
                # errorResponse.Render keeps the 200 once "Connection: keep-alive" is set). LXD 5.0.2 and Incus
                # (lxc/incus cmd/incusd/operations.go operationWaitGet, be7afc5d lines 968-1070: `_ = op.Wait(ctx)`,
                # then op.Render()) answer the running operation instead. Both mean: still running
                # (tests/support/lxd6_double.py answers both ways).
                if "deadline exceeded" not in str(exc):
                    raise
                meta = {"status_code": 103}
            if not isinstance(meta, dict):
                raise LxdError(f"operation {operation}: {self.endpoint.title} answered {type(meta).__name__} "
                               "metadata, not an operation; run again once it answers as LXD does")
            status = meta.get("status_code") or 0
            if isinstance(status, bool) or not isinstance(status, int):  # LXD's api.StatusCode is an int
                raise LxdError(f"operation {operation}: status_code {status!r} is not a number; run again once "
                               f"{self.endpoint.title} answers as LXD does")
            code = status
            if code == 200:
                return meta
            if code >= 400:
                raise LxdError(f"operation {meta.get('description', operation)}: {meta.get('err')}")
            if on_wait is not None:
                on_wait(meta)
            if time.monotonic() >= deadline:
                daemon = self.endpoint.title
                described = what or f"{daemon} operation {meta.get('description') or operation!s}"
                ident = operation.rsplit("/", 1)[-1]
                raise OperationTimeout(f"{described} did not finish within {limit:.0f} s ({daemon} operation {ident} "
                                       f"still {str(meta.get('status') or 'running').lower()}; "
                                       f"`{self.endpoint.tool} operation show {ident}` shows it)")

    # --- instances --------------------------------------------------------------------------
    def instances(self) -> list[dict[str, Any]]:
        return self.request("GET", "/1.0/instances", params={"recursion": 1})

    def instance(self, name: str) -> dict[str, Any]:
        return self.request("GET", f"/1.0/instances/{name}")

    def instance_or_none(self, name: str) -> dict[str, Any] | None:
        try:
            return self.instance(name)
        except LxdNotFound:
            return None

    def instance_state(self, name: str) -> dict[str, Any]:
        return self.request("GET", f"/1.0/instances/{name}/state")

    def set_state(self, name: str, action: str, force: bool = False, timeout: int = 30) -> None:
        self.request("PUT", f"/1.0/instances/{name}/state", {"action": action, "force": force, "timeout": timeout})

    def create_instance(self, spec: dict[str, Any]) -> None:
        self.request("POST", "/1.0/instances", spec)

    def delete_instance(self, name: str) -> None:
        self.request("DELETE", f"/1.0/instances/{name}")

    # --- exec -------------------------------------------------------------------------------
    def exec(
        self,
        name: str,
        command: Sequence[str],
        environment: Mapping[str, str] | None = None,
        cwd: str | None = None,
        user: int | None = None,
        group: int | None = None,
    ) -> ExecResult:
        """Run ``command`` in instance ``name`` with recorded output (no websockets)."""
        body: dict[str, Any] = {
            "command": list(command),
            "environment": dict(environment or {}),
            "wait-for-websocket": False,
            "record-output": True,
            "interactive": False,
        }
        if cwd:
            body["cwd"] = cwd
        if user is not None:
            body["user"] = user
        if group is not None:
            body["group"] = group
        resp = self.raw(
            "POST",
            f"/1.0/instances/{name}/exec",
            body=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        op = self._handle_async(resp, f"exec in {name}")
        meta = self.wait_operation(op)["metadata"]
        outputs = meta.get("output") or {}
        stdout = self._fetch_log(outputs.get("1"))
        stderr = self._fetch_log(outputs.get("2"))
        return ExecResult(int(meta.get("return", -1)), stdout, stderr)

    def _handle_async(self, resp: http.client.HTTPResponse, what: str) -> str:
        try:
            doc = loads_json(resp.read() or b"{}")
        except (ValueError, OSError) as exc:  # a daemon restarting mid-answer: cut or non-JSON bodies
            ep = self.endpoint
            raise LxdError(f"{what}: no usable answer from {ep.title} (HTTP {resp.status}: {exc}); is the daemon "
                           f"restarting? run again once `{ep.tool} list` answers", resp.status) from exc
        if not isinstance(doc, dict):
            raise LxdError(f"{what}: {self.endpoint.title} answered {type(doc).__name__} instead of an object "
                           f"(HTTP {resp.status})",
                           resp.status)
        if doc.get("type") == "error" or resp.status >= 400:
            cls = LxdNotFound if resp.status == 404 else LxdError
            raise cls(f"{what}: {doc.get('error') or 'HTTP ' + str(resp.status)}", resp.status)
        return _operation_path(doc, what, self.endpoint.title)

    def _fetch_log(self, path: str | None) -> bytes:
        if not path:
            return b""
        resp = self.raw("GET", path)
        data = resp.read()
        if resp.status >= 400:
            return b""
        self._stale_logs.append(path)
        if len(self._stale_logs) >= 64:
            self.flush_logs()
        return data

    def flush_logs(self) -> None:
        """Delete the recorded exec outputs already read."""
        stale, self._stale_logs = self._stale_logs, []
        for path in stale:
            try:
                self.raw("DELETE", path).read()
            except (OperationFailed, OSError, http.client.HTTPException):
                break  # the daemon went away; nothing left to tidy

    # --- files ------------------------------------------------------------------------------
    def push_file(
        self,
        name: str,
        path: str,
        data: bytes | IO[bytes],
        mode: int | None = None,
        uid: int | None = None,
        gid: int | None = None,
    ) -> None:
        """Write ``path`` in instance ``name``. Mode/owner left unset keep an existing file's
        (as an SFTP upload does); a new file then gets 0644 root:root."""
        headers = {"Content-Type": "application/octet-stream", "X-LXD-type": "file", "X-LXD-write": "overwrite"}
        if mode is not None:
            headers["X-LXD-mode"] = f"{mode:04o}"
        if uid is not None:
            headers["X-LXD-uid"] = str(uid)
        if gid is not None:
            headers["X-LXD-gid"] = str(gid)
        resp = self.raw("POST", f"/1.0/instances/{name}/files", body=data, headers=headers, params={"path": path})
        self._handle("POST", f"{name}:{path}", resp.status, resp.read(), wait=True)

    def pull_file(self, name: str, path: str, out: IO[bytes], chunk: int = 1 << 20) -> int:
        """Stream file ``path`` of instance ``name`` into ``out``; return the bytes written."""
        resp = self.raw("GET", f"/1.0/instances/{name}/files", params={"path": path})
        if resp.status >= 400:
            self._handle("GET", f"{name}:{path}", resp.status, resp.read(), wait=True)
        if resp.getheader("X-LXD-type", "file") != "file":
            resp.read()
            raise LxdError(f"{name}:{path} is a {resp.getheader('X-LXD-type')}, not a file")
        written = 0
        while True:
            block = resp.read(chunk)
            if not block:
                break
            out.write(block)
            written += len(block)
        return written

    def delete_file(self, name: str, path: str) -> None:
        resp = self.raw("DELETE", f"/1.0/instances/{name}/files", params={"path": path})
        resp.read()

    # --- images, networks, pools, profiles ---------------------------------------------------
    def image_alias(self, alias: str) -> dict[str, Any] | None:
        try:
            return self.request("GET", f"/1.0/images/aliases/{alias}")
        except LxdNotFound:
            return None

    def import_image(self, tarball: str, alias: str, properties: Mapping[str, str] | None = None) -> str:
        """Import a unified image tarball and point ``alias`` at it; return the fingerprint."""
        headers = {"Content-Type": "application/octet-stream", "X-LXD-public": "0"}
        if properties:
            headers["X-LXD-properties"] = urllib.parse.urlencode(dict(properties))
        with open(tarball, "rb") as fh:
            headers["Content-Length"] = str(os.fstat(fh.fileno()).st_size)
            resp = self.raw("POST", "/1.0/images", body=fh, headers=headers)
            meta = self._handle("POST", "/1.0/images", resp.status, resp.read(), wait=True)
        fingerprint = str(meta["metadata"]["fingerprint"])
        existing = self.image_alias(alias)
        if existing:
            self.request("PUT", f"/1.0/images/aliases/{alias}", {"target": fingerprint, "description": ""})
        else:
            self.request("POST", "/1.0/images/aliases", {"name": alias, "target": fingerprint})
        return fingerprint

    def delete_image(self, fingerprint: str) -> None:
        self.request("DELETE", f"/1.0/images/{fingerprint}")

    def get_or_none(self, path: str) -> Any:
        try:
            return self.request("GET", path)
        except LxdNotFound:
            return None

    def server(self) -> dict[str, Any]:
        return self.request("GET", "/1.0")

    def server_info(self) -> ServerInfo:
        """The daemon's name, version and API extensions from ``GET /1.0`` (read once per client)."""
        info = getattr(self, "_server_info", None)
        if info is None:
            info = self._server_info = ServerInfo.of(self.server() or {})
        return info

    def iter_instance_names(self) -> Iterator[str]:
        for url in self.request("GET", "/1.0/instances"):
            yield url.rsplit("/", 1)[-1]
