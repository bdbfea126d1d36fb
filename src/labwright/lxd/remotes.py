"""Resolve ``REMOTE:NAME`` the way the ``lxc``/``incus`` clients do, from their config.yml.

A remote is either the local unix socket (``unix://``) or an HTTPS address authenticated with
the client certificate in the config directory; the server's certificate pinned by
``lxc remote add`` (``servercerts/REMOTE.crt``) is verified, else the system CAs are.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from labwright.errors import BadInput
from labwright.lxd.client import Endpoint, find_local_socket
from labwright.textio import read_yaml


def config_dirs(flavour: str = "lxd") -> list[Path]:
    home = Path(os.path.expanduser("~"))
    if flavour == "incus":
        env = os.environ.get("INCUS_CONF")
        dirs = [Path(env)] if env else []
        return [*dirs, home / ".config" / "incus"]
    env = os.environ.get("LXD_CONF")
    dirs = [Path(env)] if env else []
    return [*dirs, home / ".config" / "lxc", home / "snap" / "lxd" / "common" / "config"]


def load_client_config(config_dir: str | Path | None = None, flavour: str = "lxd") -> tuple[Path | None, dict]:
    candidates = [Path(config_dir)] if config_dir else config_dirs(flavour)
    for directory in candidates:
        path = directory / "config.yml"
        if path.exists():
            config = read_yaml(path, f"the {flavour} client configuration (remotes)") or {}
            if not isinstance(config, dict) or not isinstance(config.get("remotes") or {}, dict):
                raise BadInput(f"{path}: not an {flavour} client configuration (expected a mapping with `remotes:`); "
                               "fix or remove the file")
            from labwright.schema.files import ClientConfig, check  # pydantic: only where the file is read

            check(ClientConfig, config, path, f"an {flavour} client configuration",
                  f"fix it with `{'incus' if flavour == 'incus' else 'lxc'} remote` or by hand")
            return directory, config
    return None, {}


def split_target(target: str) -> tuple[str | None, str]:
    """``REMOTE:NAME`` -> (REMOTE, NAME); ``NAME`` -> (None, NAME)."""
    if ":" in target:
        remote, name = target.split(":", 1)
        return remote or None, name
    return None, target


def resolve_endpoint(
    remote: str | None,
    config_dir: str | Path | None = None,
    flavour: str = "lxd",
    socket_path: str | None = None,
) -> tuple[Endpoint, str | None]:
    """Return (endpoint, project) for ``remote`` (None: the config's default remote, else local)."""
    directory, config = load_client_config(config_dir, flavour)
    remotes: dict[str, Any] = config.get("remotes") or {}
    daemon, tool = ("Incus", "incus") if flavour == "incus" else ("LXD", "lxc")
    # messages name the daemon: an @incus host's is Incus whatever its socket or URL (an @lxd host's is told by its
    # socket: the @lxd connector falls back to Incus's; Endpoint.title)
    named = "Incus" if flavour == "incus" else ""
    name = remote or config.get("default-remote") or "local"
    if name == "local" and name not in remotes:
        return Endpoint(socket_path=socket_path or find_local_socket(flavour), daemon=named), None
    if name not in remotes:
        known = ", ".join(sorted(remotes)) or "none"
        raise BadInput(f"{daemon} remote {name!r} is not configured (known: {known}); add it with "
                       f"`{tool} remote add {name} https://HOST:8443`")
    entry = remotes[name]
    addr = str(entry.get("addr", ""))
    project = entry.get("project") or None
    if addr.startswith("unix:"):
        path = addr.removeprefix("unix:").lstrip("/")
        return Endpoint(socket_path=socket_path or ("/" + path if path else find_local_socket(flavour)),
                        daemon=named), project
    if not addr.startswith("https://"):
        raise BadInput(f"{daemon} remote {name!r}: address {addr!r} is not https:// or unix://")
    assert directory is not None
    server_cert = directory / "servercerts" / f"{name}.crt"
    client_cert, client_key = directory / "client.crt", directory / "client.key"
    if not client_cert.exists():
        raise BadInput(f"{daemon} remote {name!r}: no client certificate at {client_cert}; run `{tool} remote add` "
                       "first")
    return Endpoint(
        daemon=named,
        url=addr,
        client_cert=str(client_cert),
        client_key=str(client_key),
        server_cert=str(server_cert) if server_cert.exists() else None,
    ), project
