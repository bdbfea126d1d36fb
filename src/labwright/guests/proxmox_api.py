"""Talking to the Proxmox VE API with proxmoxer: credentials from the environment, verified TLS, one-line
errors, and task (UPID) waits that raise.

proxmoxer's own ``Tasks.blocking_status`` returns None on a timeout and a status dict for a failed
task, so a caller that forgets to check proceeds as if all went well; ``TaskWaiter.wait`` raises in
both cases, and stops a task that overran so nothing keeps running behind labwright's back.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

import requests
from proxmoxer import AuthenticationError, ProxmoxAPI, ResourceException

from labwright.errors import BadInput, OperationFailed
from labwright.guests.pve_role import denied, missing_privilege_line

T = TypeVar("T")
ROOT = "root@pam"
DEFAULT_PORT = 8006


@dataclass(frozen=True)
class Credentials:
    """An API token (``user@realm!name`` + secret) or a user and password (a ticket)."""

    user: str
    secret: str
    token: str | None = None

    @property
    def principal(self) -> str:
        return f"{self.user}!{self.token}" if self.token else self.user

    @property
    def is_root(self) -> bool:
        """Only the literal ``root@pam`` logged in with a ticket passes PVE's root-only checks; a token of
        root (``root@pam!ci``) does not."""
        return self.token is None and self.user == ROOT

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Credentials:
        from labwright.schema.env import read

        env = os.environ if environ is None else environ
        token_id, secret = read("PROXMOX_TOKEN_ID", env), read("PROXMOX_TOKEN_SECRET", env)
        if token_id:
            user, sep, name = token_id.partition("!")
            if not sep or "@" not in user or not name:
                raise BadInput(f"PROXMOX_TOKEN_ID {token_id!r} is not a token id; write USER@REALM!TOKENNAME, "
                               "e.g. root@pam!labwright")
            if not secret:
                raise BadInput("PROXMOX_TOKEN_ID is set but PROXMOX_TOKEN_SECRET is empty; export the token's secret")
            return cls(user, secret, name)
        login, password = read("PROXMOX_USER", env), read("PROXMOX_PASSWORD", env)
        if login and password:
            if "@" not in login:
                raise BadInput(f"PROXMOX_USER {login!r} needs its realm, e.g. root@pam")
            return cls(login, password)
        raise BadInput("no Proxmox credentials: export PROXMOX_TOKEN_ID and PROXMOX_TOKEN_SECRET (an API token), "
                       "or PROXMOX_USER and PROXMOX_PASSWORD")


def api_endpoint(node: str, node_data: Mapping[str, Any]) -> tuple[str, str | None, bool | str]:
    """(host:port, path prefix, verify) from the node's host data: ``proxmox_api_url`` (default
    https://NODE:8006, NODE being ``ssh_hostname`` or the node name), ``proxmox_ca_file`` (or
    ``$PROXMOX_CA_FILE``) and ``proxmox_verify_tls`` (default true; false only for throwaway labs)."""
    from labwright.guests.node_data import node_settings
    from labwright.schema.env import read

    settings = node_settings(node_data, f"node {node}")  # a bad URL, port or "false" as text: one line, no contact
    url = settings["proxmox_api_url"]
    if not url:  # https://NODE:8006, NODE checked as a host name before it is dialled
        from labwright.schema.fields import host_problem

        name = str(node_data.get("ssh_hostname") or node)
        problem = host_problem(name)
        if problem is not None:
            raise BadInput(f"node {node}: {'ssh_hostname' if node_data.get('ssh_hostname') else 'the node name'} "
                           f"{problem}; or set proxmox_api_url (e.g. https://pve1.lan:8006)")
        url = f"https://{f'[{name}]' if ':' in name else name}:{DEFAULT_PORT}"
    parts = urlsplit(str(url))
    hostname = parts.hostname or ""  # checked above: a URL with a host
    host = hostname if ":" not in hostname else f"[{hostname}]"
    prefix = parts.path.strip("/").removesuffix("api2/json").strip("/") or None
    ca_file = settings["proxmox_ca_file"] or read("PROXMOX_CA_FILE")
    verify: bool | str = True
    if ca_file:
        path = os.path.expanduser(str(ca_file))
        if not os.path.isfile(path):
            raise BadInput(f"proxmox_ca_file {ca_file} does not exist; copy the cluster CA there "
                           "(/etc/pve/pve-root-ca.pem on a node)")
        verify = path
    if settings["proxmox_verify_tls"] is False:
        verify = False
    return f"{host}:{parts.port or DEFAULT_PORT}", prefix, verify


def connect(credentials: Credentials, node: str, node_data: Mapping[str, Any], timeout: float = 30) -> ProxmoxAPI:
    host, prefix, verify = api_endpoint(node, node_data)
    where = f"https://{host}"
    try:
        if credentials.token:
            return ProxmoxAPI(host, user=credentials.user, token_name=credentials.token,
                              token_value=credentials.secret, verify_ssl=verify, timeout=timeout, path_prefix=prefix)
        return ProxmoxAPI(host, user=credentials.user, password=credentials.secret, verify_ssl=verify,
                          timeout=timeout, path_prefix=prefix)
    except AuthenticationError as exc:
        raise OperationFailed(f"Proxmox at {where} refused the login of {credentials.user}: check PROXMOX_USER and "
                              "PROXMOX_PASSWORD") from exc
    except requests.exceptions.SSLError as exc:
        raise OperationFailed(f"TLS verification of {where} failed; set proxmox_ca_file to the cluster CA "
                              "(/etc/pve/pve-root-ca.pem on a node)") from exc
    except requests.exceptions.RequestException as exc:
        raise OperationFailed(f"cannot reach Proxmox at {where}: {type(exc).__name__}") from exc


def reason(exc: ResourceException) -> str:
    """PVE's message (the HTTP reason) plus its per-parameter errors, on one line."""
    text = str(exc.content or exc.status_message).strip()
    if isinstance(exc.errors, Mapping):
        # A 401 has an empty body (pve-http-server AnyEvent.pm): proxmoxer then reports {"errors": b""}.
        errors = {k: v.decode(errors="replace") if isinstance(v, bytes) else v for k, v in exc.errors.items()}
        shown = [f"{k}: {' '.join(str(v).split())}" for k, v in sorted(errors.items()) if str(v).strip()]
        if shown:
            text += " (" + "; ".join(shown) + ")"
    return " ".join(text.split())


def call(what: str, fn: Callable[[], T], needs: tuple[str, str] | None = None) -> T:
    """Run one API call; any failure becomes ``OperationFailed`` naming ``what`` and PVE's reason. A 403 names the
    privilege the credentials lack, and where (PVE's own text does; for a check that says only "Permission check
    failed", as a create without VM.Allocate does, ``needs`` = (path, privilege) says it)."""
    try:
        return fn()
    except ResourceException as exc:
        if exc.status_code == 401:
            raise BadInput(f"{what} failed: Proxmox rejected the credentials (401 {reason(exc)}): check "
                           "PROXMOX_TOKEN_ID and PROXMOX_TOKEN_SECRET (or PROXMOX_USER and PROXMOX_PASSWORD)") from exc
        if exc.status_code == 403:
            found = denied(reason(exc)) or needs
            if found:
                raise OperationFailed(missing_privilege_line(what, *found)) from exc
        raise OperationFailed(f"{what} failed: {exc.status_code} {reason(exc)}") from exc
    except requests.exceptions.SSLError as exc:
        raise OperationFailed(f"{what} failed: TLS verification failed; set proxmox_ca_file") from exc
    except requests.exceptions.RequestException as exc:
        raise OperationFailed(f"{what} failed: {type(exc).__name__}: {exc}") from exc


class TaskWaiter:
    """Polls ``/nodes/NODE/tasks/UPID/status`` until the task stops; raises unless it ended OK."""

    def __init__(self, api: ProxmoxAPI, timeout: float = 600.0, interval: float = 0.5):
        self.api = api
        self.timeout = timeout
        self.interval = interval

    def wait(self, upid: str, what: str) -> dict[str, Any]:
        node = upid.split(":")[1] if upid.startswith("UPID:") and upid.count(":") == 8 else ""
        if not node:
            raise OperationFailed(f"{what}: Proxmox answered {upid!r}, not a task id (UPID)")
        task = self.api.nodes(node).tasks(upid)
        deadline = time.monotonic() + self.timeout
        delay = min(0.05, self.interval)
        while True:
            status = call(f"{what}: reading task status", task.status.get)
            if status.get("status") == "stopped":
                break
            if time.monotonic() >= deadline:
                stopped = self._stop(node, upid)
                raise OperationFailed(f"{what}: Proxmox task {upid} did not finish within {self.timeout:g} s; "
                                      + ("labwright stopped it" if stopped else
                                         f"stop it with `pvenode task stop {upid}` on {node}"))
            time.sleep(delay)
            delay = min(delay * 2, self.interval)
        exitstatus = str(status.get("exitstatus") or "")
        if exitstatus == "OK" or exitstatus.startswith("WARNINGS"):
            return status
        raise OperationFailed(f"{what} failed on {node}: {exitstatus or 'no exit status'}{self._log_tail(task)} "
                              f"(task {upid})")

    def _log_tail(self, task: Any) -> str:
        try:
            lines = [e.get("t", "") for e in task.log.get(limit=500)]
        except (ResourceException, requests.exceptions.RequestException):
            return ""
        useful = [line for line in lines if line and not line.startswith("TASK ")][-2:]
        return f"; log: {' | '.join(useful)}" if useful else ""

    def _stop(self, node: str, upid: str) -> bool:
        """Stop an overrunning task and give it a few seconds to unwind (a stopped create removes its config)."""
        try:
            self.api.nodes(node).tasks(upid).delete()
            for _ in range(50):
                if self.api.nodes(node).tasks(upid).status.get().get("status") == "stopped":
                    return True
                time.sleep(0.2)
        except (ResourceException, requests.exceptions.RequestException):
            return False
        return False
