"""pyinfra facts for deploys/desktop.py: what the guest is (distribution, confinement) and xrdp's [Globals] settings.

One command each, so a no-change re-run stays a handful of round trips.

**Example:**

.. code:: python

    guest = host.get_fact(DesktopGuest)
    guest["os_release"], guest["uid_map"], guest["seccomp"]
    host.get_fact(XrdpGlobals)["port"]
"""

from __future__ import annotations

from typing import Any

from pyinfra.api import FactBase

_MARK = "@@labwright-"


def parse_sections(lines: list[str]) -> dict[str, str]:
    """Lines split by ``@@labwright-NAME`` markers -> {NAME: text}."""
    out: dict[str, list[str]] = {}
    current = ""
    for line in lines:
        if line.startswith(_MARK):
            current = line.removeprefix(_MARK).strip()
            out[current] = []
        elif current:
            out[current].append(line)
    return {k: "\n".join(v) for k, v in out.items()}


class DesktopGuest(FactBase):
    """/etc/os-release, the uid map of PID 1, its seccomp mode, and whether AppArmor confines it."""

    def command(self) -> str:
        return (
            f"echo {_MARK}os_release; cat /etc/os-release 2>/dev/null; "
            f"echo {_MARK}uid_map; cat /proc/1/uid_map 2>/dev/null; "
            f"echo {_MARK}seccomp; sed -n 's/^Seccomp:[[:space:]]*//p' /proc/1/status 2>/dev/null; "
            f"echo {_MARK}apparmor_enabled; cat /sys/module/apparmor/parameters/enabled 2>/dev/null; "
            f"echo {_MARK}apparmor_label; cat /proc/1/attr/current 2>/dev/null; true"
        )

    def process(self, output: list[str]) -> dict[str, Any]:
        sections = parse_sections(output)
        return {
            "os_release": sections.get("os_release", ""),
            "uid_map": sections.get("uid_map", ""),
            "seccomp": sections.get("seccomp", "").strip(),
            "apparmor_enabled": sections.get("apparmor_enabled", "").strip().upper().startswith("Y"),
            "apparmor_label": sections.get("apparmor_label", "").strip(),
        }


def parse_ini_section(lines: list[str], section: str) -> dict[str, str]:
    """``key=value`` lines of one ``[section]`` (first occurrence of each key; comments skipped)."""
    values: dict[str, str] = {}
    inside = False
    for raw in lines:
        line = raw.strip()
        if line.startswith("["):
            inside = line == f"[{section}]"
            continue
        if not inside or not line or line.startswith((";", "#")) or "=" not in line:
            continue
        key, _, value = line.partition("=")
        values.setdefault(key.strip(), value.strip())
    return values


class XrdpGlobals(FactBase):
    """xrdp.ini's [Globals] section as a dict; None when xrdp is not installed."""

    PATH = "/etc/xrdp/xrdp.ini"

    def command(self) -> str:
        return f"if [ -f {self.PATH} ]; then echo {_MARK}present; cat {self.PATH}; fi"

    def process(self, output: list[str]) -> dict[str, str] | None:
        if not output or output[0] != f"{_MARK}present":
            return None
        return parse_ini_section(output[1:], "Globals")
