"""The keys engines answer to: where each engine keeps its own, and the one-line refusals about those files.

Every engine deploy makes its key ON THE HOST (labwright.operations.secrets.engine_key; tabbyAPI's api_tokens.yml,
labwright.operations.tabbyapi_deploy.api_tokens) and keeps it there; the LiteLLM gateway and Open WebUI read it from
that file. See docs/security.md, "Every engine behind a key".
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any


def mode_of(info: Mapping[str, Any]) -> int:
    """pyinfra's File fact gives a mode as its octal digits read as a decimal number (640): the real bits."""
    return int(str(info.get("mode", 0)), 8)


def key_file_refusal(data_key: str, path: str, info: Mapping[str, Any] | bool | None, host_name: str,
                     missing: str = "") -> str | None:
    """One line (naming the path and the fix) when the key file at ``path`` (its File fact ``info``) must not be
    used: readable or writable by every user, or not owned by root; or absent when ``missing`` says how it is made.
    None when it is fine (or absent with no ``missing``)."""
    if not info or not isinstance(info, Mapping):
        if missing:
            return f"{data_key}: {path} does not exist on {host_name}; {missing} (nothing was changed)"
        return None
    mode = mode_of(info)
    if mode & 0o007:
        return (f"{data_key}: {path} on {host_name} is open to every user (mode {mode:04o}): a key anyone on the "
                f"host can read is no key; run `chmod 640 {path}` there, or delete it to have a new key made, and "
                "re-run (nothing was changed)")
    if info.get("user") != "root":
        return (f"{data_key}: {path} on {host_name} is owned by {info.get('user')}, not root (its owner could swap "
                f"the key); run `chown root {path}` there, or delete it to have a new key made, and re-run (nothing "
                "was changed)")
    return None


def is_entrance(data: Mapping[str, Any]) -> bool:
    """Whether a host's data declares an entrance clients use instead of the engines: the LiteLLM gateway (a
    ``litellm_*`` key other than ``litellm_engine_address``, which engine hosts carry) or the TLS gateway
    (``gateway_*``, deploys/gateway.py)."""
    return any((key.startswith("litellm_") and key != "litellm_engine_address") or key.startswith("gateway_")
               for key in data)


def is_consumer(data: Mapping[str, Any]) -> bool:
    """Whether a host's data declares something that calls engines over the network: an entrance
    (``is_entrance``), Open WebUI or Prometheus (``monitoring_*``, deploys/monitoring.py)."""
    return is_entrance(data) or any(key.startswith(("openwebui_", "monitoring_")) for key in data)


def gateway_only(this: Mapping[str, Any], others: Iterable[Mapping[str, Any]]) -> bool:
    """Whether only the gateway on this same guest uses this host's engine: this host's data declares the LiteLLM
    gateway or the TLS gateway (``is_entrance``) and no other host of the inventory declares a gateway, Open WebUI or
    Prometheus (``is_consumer``). Then the engine binds 127.0.0.1 (``llamacpp_host = "auto"``): the gateway reaches it
    on loopback, the LAN not at all."""
    return is_entrance(this) and not any(is_consumer(data) for data in others)


def is_loopback(address: str) -> bool:
    """Whether a listen address reaches only the host itself (127.0.0.0/8, ::1, localhost)."""
    text = address.strip().strip("[]")
    if text == "localhost":
        return True
    try:
        return ipaddress.ip_address(text).is_loopback
    except ValueError:
        return False
