"""Container configs the way PVE keeps them: ``/etc/pve/nodes/NODE/lxc/VMID.conf`` text on pmxcfs.

The simulator stores every container as that file, parsed and written with the rules of
pve-container ``parse_pct_config``/``write_pct_config``: ``key: value`` lines sorted by key, the
description as ``#`` comments, raw ``lxc.*`` entries kept in order after the options, and a
``[pve:pending]`` section for changes a running container picks up at its next start. So what a
client writes over SSH (raw ``lxc.*`` lines, which the API cannot set) shows up in ``GET .../config``
exactly as on a node, and the ``digest`` is the SHA-1 of the file text as PVE computes it.

Provenance (pve-container 6.1.10, commit 94f558522ef6; pve-guest-common 6.0.2, commit 4a8f6cbf78e1):
- src/PVE/LXC/Config.pm: ``parse_pct_config`` (1126-1222: ``key: value``, ``#`` description, ``lxc.*`` kept in
  order, ``[pve:pending]`` and ``delete:``), ``write_pct_config`` (1224-1299, sorted keys), ``$LXC_FASTPLUG_OPTIONS``
  (1612-1622), ``vmconfig_hotplug_pending`` (1624-1747), ``vmconfig_apply_pending`` at start (1749-1895),
  ``classify_mountpoint`` (1897-...), ``print_ct_mountpoint``/``parse_lxc_network`` (1486-1610).
- pve-guest-common src/PVE/AbstractConfig.pm: ``add_to_pending_delete`` (105-136), ``cleanup_pending``
  (138-...), ``check_lock`` "CT is locked (LOCK)" (336-340), ``create_and_lock_config`` (254-...).
- pve-common 9.2.1 src/PVE/Tools.pm ``assert_if_modified`` (868-873): the digest check.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from support.pve_schema import indexed_schema

#: ``STORAGE:SIZE_IN_GiB`` asks for a new volume (pve-container ``$NEW_DISK_RE``).
NEW_DISK_RE = re.compile(r"^([^:\s]+):(\d+(\.\d+)?)$")
#: Applied at once even while the container runs (``$LXC_FASTPLUG_OPTIONS``).
FASTPLUG = frozenset({"description", "onboot", "startup", "protection", "hostname", "hookscript", "cores", "tags",
                      "lock"})
#: Changed live on a running container; a new ``mpN``/``devN`` is hotplugged, an existing one waits for a restart.
HOTPLUG = frozenset({"cpulimit", "cpuunits", "memory", "swap"})
HOTPLUG_DELETE = frozenset({"swap", "cpulimit", "cpuunits"})
#: Proxmox's own MAC prefix (datacenter.cfg ``mac_prefix`` default since PVE 8).
MAC_PREFIX = "BC:24:11"

_OPTION = re.compile(r"^([a-z][a-z_]*\d*):\s*(.+?)\s*$")
_LXC = re.compile(r"^(lxc\.[a-z0-9_\-.]+)(?::|\s*=)\s*(.*?)\s*$")
_UNSAFE = re.compile(r"[^\x20-\x39\x3b-\x7e]")


def encode_text(text: str) -> str:
    """PVE's ``encode_text`` for description comments: ``:``, controls and non-ASCII as %XX of the UTF-8."""
    return _UNSAFE.sub(lambda m: "".join(f"%{b:02X}" for b in m.group(0).encode()), text)


def decode_text(text: str) -> str:
    return re.sub(r"(%[0-9A-Fa-f]{2})+", lambda m: bytes.fromhex(m.group(0).replace("%", "")).decode(errors="replace"),
                  text)


@dataclass
class CtConfig:
    """One parsed container config: options, raw ``lxc.*`` pairs, pending changes, snapshots kept verbatim."""

    options: dict[str, str] = field(default_factory=dict)
    lxc: list[tuple[str, str]] = field(default_factory=list)
    pending: dict[str, str] = field(default_factory=dict)
    pending_delete: list[str] = field(default_factory=list)
    snapshots: str = ""
    warnings: list[str] = field(default_factory=list)

    #: The pending section's header: ``[pve:pending]`` for containers, ``[PENDING]`` for qemu VMs.
    PENDING_HEADER = "pve:pending"

    @classmethod
    def parse(cls, text: str, vmid: int = 0) -> CtConfig:
        conf = cls()
        section = "main"
        target = conf.options
        lines = text.split("\n")
        descr: list[str] = []
        for index, line in enumerate(lines):
            if not line.strip():
                continue
            if re.match(rf"^\[{re.escape(cls.PENDING_HEADER)}\]\s*$", line, re.I):
                section, target = "pending", conf.pending
                continue
            if re.match(r"^\[([a-z][a-z0-9_\-]+)\]\s*$", line, re.I):
                conf.snapshots = "\n".join(lines[index:]).rstrip("\n") + "\n"
                break
            if line.startswith("#"):
                descr.append(decode_text(line[1:]))
                continue
            lxc = _LXC.match(line)
            option = _OPTION.match(line)
            if lxc and section == "main":
                conf.lxc.append((lxc.group(1), lxc.group(2)))
            elif option and option.group(1) == "delete" and section == "pending":
                conf.pending_delete = [k for k in re.split(r"[,;\s]+", option.group(2)) if k]
            elif option:
                target[option.group(1)] = option.group(2)
            else:
                conf.warnings.append(f"vm {vmid} - unable to parse config: {line}")
        if descr and "description" not in conf.options:
            conf.options["description"] = "".join(f"{line}\n" for line in descr)  # PVE keeps a newline per line
        return conf

    def render(self) -> str:
        out = [f"#{encode_text(line)}" for line in self.options.get("description", "").split("\n") if line]
        out += [f"{k}: {v}" for k, v in sorted(self.options.items()) if k != "description"]
        out += [f"{k}: {v}" for k, v in self.lxc]
        if self.pending or self.pending_delete:
            out += ["", f"[{self.PENDING_HEADER}]"]
            out += [f"{k}: {v}" for k, v in sorted(self.pending.items())]
            if self.pending_delete:
                out.append("delete: " + ",".join(self.pending_delete))
        text = "\n".join(out) + "\n"
        return text + ("\n" + self.snapshots if self.snapshots else "")

    def effective(self, current: bool = False) -> dict[str, str]:
        """Options as ``GET .../config`` shows them: pending values applied unless ``current``."""
        values = dict(self.options)
        if not current:
            values.update(self.pending)
            for key in self.pending_delete:
                values.pop(key, None)
        return values

    def pending_rows(self) -> list[dict[str, Any]]:
        """``GET .../pending``: one row per key with its ``value``, ``pending`` value and ``delete`` flag."""
        rows = []
        for key in sorted(set(self.options) | set(self.pending) | set(self.pending_delete)):
            row: dict[str, Any] = {"key": key}
            if key in self.options:
                row["value"] = self.options[key]
            if key in self.pending:
                row["pending"] = self.pending[key]
            if key in self.pending_delete:
                row["delete"] = 1
            rows.append(row)
        return rows

    def apply_pending(self) -> None:
        """What a start does first (``vmconfig_apply_pending``)."""
        for key in self.pending_delete:
            self.options.pop(key, None)
        self.options.update(self.pending)
        self.pending.clear()
        self.pending_delete.clear()


def digest(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


def classify_mountpoint(volume: str) -> str:
    """``device`` (/dev/...), ``bind`` (another absolute path) or ``volume`` (a storage volume)."""
    if volume.startswith("/"):
        return "device" if volume.startswith("/dev/") else "bind"
    return "volume"


def random_mac(rng: random.Random | None = None) -> str:
    """An address under PVE's prefix, unicast and locally administered like ``random_ether_addr``."""
    rng = rng or random.Random()
    return MAC_PREFIX + "".join(f":{rng.randrange(256):02X}" for _ in range(3))


def to_api(values: Mapping[str, str], properties: Mapping[str, Any]) -> dict[str, Any]:
    """Config values typed as ``parse_pct_config`` types them: integers and booleans as JSON numbers."""
    result: dict[str, Any] = {}
    for key, value in values.items():
        kind = (indexed_schema(properties, key) or {}).get("type")
        if kind in ("integer", "boolean") and re.match(r"^\d+$", value):
            result[key] = int(value)
        elif kind == "boolean" and value.lower() in ("on", "yes", "true", "off", "no", "false"):
            result[key] = int(value.lower() in ("on", "yes", "true"))
        elif kind == "number" and re.match(r"^\d+(\.\d+)?$", value):
            result[key] = float(value) if "." in value else int(value)
        else:
            result[key] = value
    return result


def detect_ostype(template: str) -> tuple[str, str]:
    """(ostype, arch) the way ``PVE::LXC::Setup`` ends up with them for a stock template name."""
    name = template.rsplit("/", 1)[-1].lower()
    arch = "arm64" if "_arm64" in name or "aarch64" in name else "amd64"
    for prefix, ostype in (("debian", "debian"), ("ubuntu", "ubuntu"), ("devuan", "devuan"), ("alpine", "alpine"),
                           ("fedora", "fedora"), ("centos", "centos"), ("rocky", "centos"), ("alma", "centos"),
                           ("archlinux", "archlinux"), ("opensuse", "opensuse"), ("gentoo", "gentoo"),
                           ("nixos", "nixos")):
        if name.startswith(prefix):
            return ostype, arch
    return "unmanaged", arch
