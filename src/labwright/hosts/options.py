"""The one SSH option set: pyinfra's own ``ssh_*`` host data, declared once and read by every labwright path
that logs into a machine (the ``@pct`` connector's node, the Proxmox guest backend's node, the cluster runbooks).

The keys, their meaning and their defaults are pyinfra's (``pyinfra.connectors.ssh.connector_data_meta``), with
two labwright defaults for the nodes it manages, each applied only where neither host data nor the user's
``~/.ssh/config`` entry for the host decides:

- ``ssh_user``: ``root`` (Proxmox VE nodes are administered as root);
- ``ssh_strict_host_key_checking``: ``yes``: an unknown host key is refused, never added (pyinfra's own
  default, ``accept-new``, would write it to known_hosts).

``pct_ssh_*`` (the ``@pct`` connector's keys until 0.1) are read for one more release, each with a warning line
naming its replacement.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pyinfra import logger
from pyinfra.connectors.base import DataMeta
from pyinfra.connectors.ssh import connector_data_meta as PYINFRA_SSH_OPTIONS
from pyinfra.connectors.sshuserclient.client import get_ssh_config

from labwright.errors import BadInput
from labwright.textio import ascii_digits

#: The option set (pyinfra's declaration, with labwright's defaults where they differ).
SSH_OPTIONS: dict[str, DataMeta] = {
    **PYINFRA_SSH_OPTIONS,
    "ssh_user": DataMeta("SSH user (default: ~/.ssh/config's User, else root)"),
    "ssh_strict_host_key_checking": DataMeta(
        "yes (refuse an unknown host key), accept-new, no (accept any key: throwaway labs only), ask; default: "
        "~/.ssh/config's StrictHostKeyChecking, else yes", "yes"),
}

#: Deprecated key -> its replacement (read until labwright 0.2).
DEPRECATED_KEYS = {
    "pct_ssh_hostname": "ssh_hostname",
    "pct_ssh_port": "ssh_port",
    "pct_ssh_user": "ssh_user",
    "pct_ssh_key": "ssh_key",
    "pct_ssh_key_password": "ssh_key_password",
    "pct_ssh_known_hosts_file": "ssh_known_hosts_file",
    "pct_ssh_strict_host_key_checking": "ssh_strict_host_key_checking",
    "pct_ssh_config_file": "ssh_config_file",
}

_warned: set[str] = set()


def _warn_once(old: str, new: str) -> None:
    if old not in _warned:
        _warned.add(old)
        logger.warning(f"labwright: host data `{old}` is deprecated and will be removed in 0.2; use `{new}`")


def strictness(value: Any) -> str:
    """pyinfra's StrictHostKeyChecking word for a bool (the old pct_ssh_* form) or a word."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    word = str(value).strip().lower()
    word = {"true": "yes", "false": "no", "1": "yes", "0": "no", "off": "no"}.get(word, word)
    if word not in ("yes", "no", "accept-new", "ask"):
        raise BadInput(f"ssh_strict_host_key_checking={value!r}: use yes, accept-new, no or ask")
    return word


def ssh_config_entry(config_file: str | None, hostname: str) -> dict[str, Any]:
    """What the user's ssh config says for ``hostname`` (pyinfra's reader: the same file pyinfra consults)."""
    path = os.path.expanduser(config_file) if config_file else None
    if path and not os.path.isfile(path):
        raise BadInput(f"ssh config file {path} (ssh_config_file) does not exist")
    config = get_ssh_config(path)
    return dict(config.lookup(hostname)) if config is not None else {}


def ssh_options(data: Mapping[str, Any], default_hostname: str,
                warn: Callable[[str, str], None] = _warn_once) -> dict[str, Any]:
    """The ``ssh_*`` values to log into a node with: host data's ``ssh_*`` keys, then the deprecated
    ``pct_ssh_*`` ones, then labwright's defaults where neither host data nor ~/.ssh/config decides.
    ``ssh_hostname`` defaults to ``default_hostname`` (an ssh config alias works: pyinfra resolves it)."""
    options: dict[str, Any] = {key: data.get(key) for key in SSH_OPTIONS if data.get(key) is not None}
    for old, new in DEPRECATED_KEYS.items():
        if data.get(old) is not None:
            warn(old, new)
            options.setdefault(new, data.get(old))
    options.setdefault("ssh_hostname", default_hostname)
    entry = ssh_config_entry(options.get("ssh_config_file"), str(options["ssh_hostname"]))
    if not options.get("ssh_user") and "user" not in entry:
        options["ssh_user"] = "root"
    if "ssh_strict_host_key_checking" in options:
        options["ssh_strict_host_key_checking"] = strictness(options["ssh_strict_host_key_checking"])
    elif "stricthostkeychecking" not in entry:
        options["ssh_strict_host_key_checking"] = "yes"
    if options.get("ssh_port") is not None:
        options["ssh_port"] = port_number("ssh_port", options["ssh_port"])
    return options


def port_number(key: str, value: Any) -> int:
    """A TCP port from host data (an int, or the text ``--data`` and inventories give), or one line naming ``key``."""
    text = str(value).strip()
    if isinstance(value, bool) or not ascii_digits(text) or not 1 <= int(text) <= 65535:
        raise BadInput(f"{key}={value!r}: not a TCP port; use a whole number from 1 to 65535, e.g. {key}=2222")
    return int(text)


@dataclass(frozen=True)
class SshEndpoint:
    """Where the options lead, for messages: the address, port and user after ~/.ssh/config, and known_hosts."""

    hostname: str
    port: int
    user: str
    known_hosts_file: str

    @property
    def where(self) -> str:
        return f"{self.user}@{self.hostname}:{self.port}"

    @property
    def known_hosts_entry(self) -> str:
        return self.hostname if self.port == 22 else f"[{self.hostname}]:{self.port}"


def endpoint(options: Mapping[str, Any]) -> SshEndpoint:
    name = str(options["ssh_hostname"])
    try:
        entry = ssh_config_entry(options.get("ssh_config_file"), name)
    except BadInput:
        entry = {}
    known_hosts = options.get("ssh_known_hosts_file") or \
        (entry.get("userknownhostsfile") or "~/.ssh/known_hosts").split()[0]
    return SshEndpoint(
        hostname=str(entry.get("hostname") or name),
        port=port_number("ssh_port" if options.get("ssh_port") else "Port (ssh config)",
                         options.get("ssh_port") or entry.get("port") or 22),
        user=str(options.get("ssh_user") or entry.get("user") or os.environ.get("USER", "root")),
        known_hosts_file=os.path.expanduser(str(known_hosts)),
    )
