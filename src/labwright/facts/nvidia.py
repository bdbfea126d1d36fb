"""pyinfra facts about NVIDIA drivers: the host module version, whether a container's userspace matches it, and the
GPUs with their compute capability (which CUDA builds have kernels for them: ``labwright.gpu.arch``).

Inside an LXC/LXD container ``/proc/driver/nvidia/version`` is the HOST kernel module's (procfs is the
host kernel's), so one fact run in the container sees both sides of the match.

**Example:**

.. code:: python

    match = host.get_fact(NvidiaDriverMatch)
    if match["status"] == "mismatch":
        ...  # reinstall NVIDIA-Linux-x86_64-{match["host_version"]}.run --no-kernel-module
"""

from __future__ import annotations

from typing import Any

from pyinfra.api import FactBase

from labwright.gpu.check import sections as marked_sections
from labwright.gpu.smi import SMI_QUERY, parse_gpu_query
from labwright.guests.gpu import check_driver_match, parse_driver_version, userspace_listing, userspace_versions
from labwright.shell import quote

_MARK = "@@labwright-nvidia-"


def _below(root: str, path: str) -> str:
    return quote(root.rstrip("/") + path)


class NvidiaDriverVersion(FactBase[Any]):
    """The NVIDIA kernel module version (``550.54.14``), or None without a driver.

    + root: read below this directory instead of ``/`` (tests use a fake tree)
    """

    def command(self, root: str = "/") -> str:
        return f"cat {_below(root, '/proc/driver/nvidia/version')} 2>/dev/null || true"

    def process(self, output: list[str]) -> str | None:
        return parse_driver_version("\n".join(output))


class NvidiaDriverMatch(FactBase[Any]):
    """Host module version vs the userspace libraries (``libcuda.so.<ver>``, ``libnvidia-ml.so.<ver>``) and
    ``nvidia-smi``: ``{"status": match|mismatch|missing-userspace|no-host-driver, "host_version",
    "userspace": {lib: version}, "message"}``. Only an exact version match is a match.

    + root: read below this directory instead of ``/`` (tests use a fake tree; nvidia-smi is then skipped)
    """

    def command(self, root: str = "/") -> str:
        smi = ("command -v nvidia-smi >/dev/null 2>&1 && timeout 20 nvidia-smi 2>&1 | head -n 12"
               if root.rstrip("/") == "" else "true")
        return (
            f"echo {_MARK}driver; cat {_below(root, '/proc/driver/nvidia/version')} 2>/dev/null; "
            f"echo {_MARK}libs; {userspace_listing(root)} | grep -E '^lib(cuda|nvidia-ml)[.]so[.][0-9]' | sort -u "
            "|| true; "
            f"echo {_MARK}smi; {{ {smi}; }} || true"
        )

    def process(self, output: list[str]) -> dict[str, Any]:
        sections = marked_sections(output, _MARK)
        host_version = parse_driver_version("\n".join(sections.get("driver", [])))
        match = check_driver_match(host_version, userspace_versions(sections.get("libs", [])),
                                   "\n".join(sections.get("smi", [])))
        return {"status": match.status, "ok": match.ok, "host_version": match.host_version,
                "userspace": match.userspace, "message": match.message}


class NvidiaGpus(FactBase[Any]):
    """The GPUs nvidia-smi sees: ``[{"index", "name", "uuid", "compute_cap", "compute_cap_from", "driver_version",
    "memory_mib"}]`` (``compute_cap`` "8.6", "12.0"; None where neither the driver nor the GPU's name says;
    ``compute_cap_from`` "nvidia-smi", "name" or ""). Empty without nvidia-smi or a driver. An nvidia-smi without
    the ``compute_cap`` field (the 470 branch refuses the whole query) is asked again without it
    (labwright.gpu.smi.query_command), the capability then read from the GPU's name.

    Not /proc/driver/nvidia/gpus/*/information: it names the model, bus and UUID but carries no compute capability.
    """

    def command(self) -> str:
        return f"command -v nvidia-smi >/dev/null 2>&1 && {SMI_QUERY} 2>&1 || true"

    def process(self, output: list[str]) -> list[dict[str, Any]]:
        return [{"index": g.index, "name": g.name, "uuid": g.uuid, "compute_cap": g.compute_cap,
                 "compute_cap_from": g.compute_cap_from, "driver_version": g.driver_version, "memory_mib": g.memory_mib}
                for g in parse_gpu_query("\n".join(output))]
