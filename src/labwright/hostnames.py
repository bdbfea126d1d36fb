"""The pyinfra host names of the containers labwright drives, and Proxmox's VMID rule, parsed in one place.

- ``@lxd/NAME``, ``@lxd/REMOTE:NAME``, ``@incus/NAME``, ``@incus/REMOTE:NAME``: ``labwright.connectors.lxd``;
- ``@pct/NODE/VMID``: ``labwright.connectors.pct``.

The connectors' ``make_names_data``, the guest model (``labwright.guests.model``) and the lab spec
(``labwright.lab.spec``) all call these, so a name pyinfra accepts is a name ``labwright guest plan`` and ``labwright
lab up`` accept, with the same message when it is not. Pure: no pyinfra state, no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from labwright.errors import BadInput

# LXD's own rule for instance names (shared with hostnames): 1-63 chars, letters/digits/hyphens,
# not starting with a digit or hyphen, not ending with a hyphen.
INSTANCE_NAME = re.compile(r"^(?!-)(?![0-9])[A-Za-z0-9-]{1,63}(?<!-)$")

# Proxmox VE's container/VM id: the API schema's `pve-vmid` format, minimum 100, maximum 999999999
# (pve-docs api-viewer/apidata.js, e.g. GET /cluster/nextid; tests/support/data/pve-apidata.trimmed.json).
VMID_MIN = 100
VMID_MAX = 999_999_999
PCT_EXAMPLE = "@pct/NODE/VMID, e.g. @pct/pve1/101"
LXD_FLAVOURS = ("lxd", "incus")


class BadHostName(BadInput):
    """A host name labwright's connectors cannot use: one line, exit 2 from labwright. The connectors raise it to
    pyinfra as ``labwright.connectors.names.ConnectorHostName``, also an ``InventoryError`` (what pyinfra's CLI shows
    for a bad name); this module stays free of pyinfra, whose import costs every CLI command ~0.12 s."""


@dataclass(frozen=True)
class LxdName:
    """``@lxd/REMOTE:NAME``: ``remote`` None means the client config's default remote (else the local daemon)."""

    flavour: str
    remote: str | None
    instance: str

    @property
    def host(self) -> str:
        return f"@{self.flavour}/{self.remote + ':' if self.remote else ''}{self.instance}"

    @property
    def daemon(self) -> str:
        """How messages name the daemon of this host: ``Incus`` for ``@incus/``, else ``LXD``."""
        return "Incus" if self.flavour == "incus" else "LXD"

    @property
    def tool(self) -> str:
        """The command line client messages name for it: ``incus`` or ``lxc``."""
        return "incus" if self.flavour == "incus" else "lxc"


@dataclass(frozen=True)
class PctName:
    node: str
    vmid: int

    @property
    def host(self) -> str:
        return f"@pct/{self.node}/{self.vmid}"


def parse_lxd_target(target: str | None, flavour: str = "lxd") -> LxdName:
    """The part after ``@lxd/`` (``NAME`` or ``REMOTE:NAME``; the remote ends at the first colon, as in ``lxc``)."""
    if not target:
        raise BadHostName(f"@{flavour} needs a container name: @{flavour}/NAME or @{flavour}/REMOTE:NAME")
    remote, sep, instance = target.partition(":")
    if not sep:
        remote, instance = "", target
    if not INSTANCE_NAME.match(instance):
        raise BadHostName(f"@{flavour}/{target}: {instance!r} is not a valid container name; use 1-63 letters, "
                          "digits and hyphens, starting with a letter")
    return LxdName(flavour, remote or None, instance)


def parse_pct_target(target: str | None) -> PctName:
    """The part after ``@pct/``: ``NODE/VMID``."""
    if not target:
        raise BadHostName(f"@pct needs a node and a container id: {PCT_EXAMPLE}")
    node, sep, vmid_text = target.rpartition("/")
    if not sep:
        raise BadHostName(f"@pct/{target}: expected {PCT_EXAMPLE}")
    if not node or "/" in node or any(ch.isspace() for ch in node):
        raise BadHostName(f"@pct/{target}: NODE {node!r} is not a node name or ssh alias ({PCT_EXAMPLE})")
    if not re.fullmatch(r"[1-9][0-9]*", vmid_text) or not VMID_MIN <= int(vmid_text) <= VMID_MAX:
        raise BadHostName(f"@pct/{target}: VMID {vmid_text!r} is not a Proxmox container id "
                          f"(an integer from {VMID_MIN} to {VMID_MAX})")
    return PctName(node, int(vmid_text))


def lxd_guest(text: str) -> LxdName:
    """One LXD/Incus guest as a command takes it (docs/cli.md, "guest"): the instance as ``lxc`` names it (``NAME``,
    ``REMOTE:NAME``) or as the inventory names its host (``@lxd/NAME``, ``@lxd/REMOTE:NAME``, ``@incus/NAME``): the
    same guest either way. Anything else is one BadHostName line (a ``@pct/...`` guest is not on LXD)."""
    try:
        parsed = parse_host_name(text) if text.startswith("@") else parse_lxd_target(text)
    except BadHostName:
        parsed = None
    if isinstance(parsed, LxdName):
        return parsed
    incus = text.startswith("@incus/")
    raise BadHostName(f"guest {text!r} is not an {'Incus' if incus else 'LXD'} instance name (NAME, REMOTE:NAME or "
                      f"@{'incus' if incus else 'lxd'}/NAME); use 1-63 letters, digits and hyphens, starting with a "
                      "letter")


def parse_host_name(host: str) -> LxdName | PctName | None:
    """The container a pyinfra host name points at; None for any other host (``pve1``, ``@local``, ``@ssh/x``).
    A malformed ``@lxd``/``@incus``/``@pct`` name raises ``BadHostName``."""
    connector, sep, target = host.partition("/")
    if connector in ("@lxd", "@incus"):
        return parse_lxd_target(target if sep else None, connector[1:])
    if connector == "@pct":
        return parse_pct_target(target if sep else None)
    return None
