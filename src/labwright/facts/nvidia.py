"""pyinfra facts about NVIDIA drivers: the host module version, whether a container's userspace matches it, and the
GPUs with their compute capability (which CUDA builds have kernels for them: ``labwright.gpu.arch``). A thin face:
each fact's command and reading are in ``labwright.gpu.nvidia.facts``.

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

from labwright.gpu.nvidia import facts as readers


class NvidiaDriverVersion(FactBase[Any]):
    """The NVIDIA kernel module version (``550.54.14``), or None without a driver.

    + root: read below this directory instead of ``/`` (tests use a fake tree)
    """

    def command(self, root: str = "/") -> str:
        return readers.driver_version_command(root)

    def process(self, output: list[str]) -> str | None:
        return readers.driver_version(output)


class NvidiaDriverMatch(FactBase[Any]):
    """Host module version vs the userspace libraries (``libcuda.so.<ver>``, ``libnvidia-ml.so.<ver>``) and
    ``nvidia-smi``: ``{"status": match|mismatch|missing-userspace|no-host-driver, "host_version",
    "userspace": {lib: version}, "message"}``. Only an exact version match is a match.

    + root: read below this directory instead of ``/`` (tests use a fake tree; nvidia-smi is then skipped)
    """

    def command(self, root: str = "/") -> str:
        return readers.driver_match_command(root)

    def process(self, output: list[str]) -> dict[str, Any]:
        return readers.driver_match(output)


class NvidiaGpus(FactBase[Any]):
    """The GPUs nvidia-smi sees: ``[{"index", "name", "uuid", "compute_cap", "compute_cap_from", "driver_version",
    "memory_mib"}]`` (``compute_cap`` "8.6", "12.0"; None where neither the driver nor the GPU's name says;
    ``compute_cap_from`` "nvidia-smi", "name" or ""). Empty without nvidia-smi or a driver. An nvidia-smi without
    the ``compute_cap`` field (the 470 branch refuses the whole query) is asked again without it
    (labwright.gpu.nvidia.smi.query_command), the capability then read from the GPU's name.

    Not /proc/driver/nvidia/gpus/*/information: it names the model, bus and UUID but carries no compute capability.
    """

    def command(self) -> str:
        return readers.gpus_command()

    def process(self, output: list[str]) -> list[dict[str, Any]]:
        return readers.gpus(output)
