"""The NVIDIA facts' readers: for each fact the shell command that collects it and the function that reads its output
(lines, as pyinfra hands them to a fact's ``process``). ``labwright.facts.nvidia`` is the pyinfra face over these.

Inside an LXC/LXD container ``/proc/driver/nvidia/version`` is the HOST kernel module's (procfs is the
host kernel's), so one command run in the container sees both sides of the driver match.
"""

from __future__ import annotations

from typing import Any

from labwright.gpu.check import sections
from labwright.gpu.nvidia.driver import check_driver_match, parse_driver_version, userspace_listing, userspace_versions
from labwright.gpu.nvidia.smi import SMI_QUERY, parse_gpu_query
from labwright.shell import quote

_MARK = "@@labwright-nvidia-"


def _below(root: str, path: str) -> str:
    return quote(root.rstrip("/") + path)


def driver_version_command(root: str = "/") -> str:
    """``root``: read below this directory instead of ``/`` (tests use a fake tree)."""
    return f"cat {_below(root, '/proc/driver/nvidia/version')} 2>/dev/null || true"


def driver_version(output: list[str]) -> str | None:
    """The NVIDIA kernel module version (``550.54.14``), or None without a driver."""
    return parse_driver_version("\n".join(output))


def driver_match_command(root: str = "/") -> str:
    """The module version, the userspace libraries and nvidia-smi's banner in one command (``root`` not "/": a fake
    tree, nvidia-smi skipped)."""
    smi = ("command -v nvidia-smi >/dev/null 2>&1 && timeout 20 nvidia-smi 2>&1 | head -n 12"
           if root.rstrip("/") == "" else "true")
    return (
        f"echo {_MARK}driver; cat {_below(root, '/proc/driver/nvidia/version')} 2>/dev/null; "
        f"echo {_MARK}libs; {userspace_listing(root)} | grep -E '^lib(cuda|nvidia-ml)[.]so[.][0-9]' | sort -u "
        "|| true; "
        f"echo {_MARK}smi; {{ {smi}; }} || true"
    )


def driver_match(output: list[str]) -> dict[str, Any]:
    """``{"status": match|mismatch|missing-userspace|no-host-driver, "ok", "host_version", "userspace": {lib:
    version}, "message"}`` (``labwright.gpu.nvidia.driver.check_driver_match``)."""
    parts = sections(output, _MARK)
    host_version = parse_driver_version("\n".join(parts.get("driver", [])))
    match = check_driver_match(host_version, userspace_versions(parts.get("libs", [])), "\n".join(parts.get("smi", [])))
    return {"status": match.status, "ok": match.ok, "host_version": match.host_version,
            "userspace": match.userspace, "message": match.message}


def gpus_command() -> str:
    return f"command -v nvidia-smi >/dev/null 2>&1 && {SMI_QUERY} 2>&1 || true"


def gpus(output: list[str]) -> list[dict[str, Any]]:
    """``[{"index", "name", "uuid", "compute_cap", "compute_cap_from", "driver_version", "memory_mib"}]``."""
    return [{"index": g.index, "name": g.name, "uuid": g.uuid, "compute_cap": g.compute_cap,
             "compute_cap_from": g.compute_cap_from, "driver_version": g.driver_version, "memory_mib": g.memory_mib}
            for g in parse_gpu_query("\n".join(output))]
