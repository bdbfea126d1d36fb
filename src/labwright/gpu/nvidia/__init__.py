"""NVIDIA, the first GPU vendor: its device nodes, driver and userspace, nvidia-smi, the boot unit and the host
upgrade's facts.

- :mod:`labwright.gpu.nvidia.driver`: pure parsers (``/proc/driver/nvidia/version``, library file names,
  nvidia-smi's banner) and the driver-match rule (userspace == host module, exactly);
- :mod:`labwright.gpu.nvidia.smi`: nvidia-smi's CSV query and its output read back;
- :mod:`labwright.gpu.nvidia.host`: a host's NVIDIA facts (``GpuHost`` on this machine; ``NODE_FACTS_SCRIPT`` and
  ``parse_node_facts`` for a node reached over a ``labwright.hosts.Host``);
- :mod:`labwright.gpu.nvidia.boot_unit`: the systemd unit that makes the nodes GPU guests pass at every boot;
- :mod:`labwright.gpu.nvidia.upgrade_facts`: what ``labwright host upgrade`` reads from a node (DKMS tree,
  installers, GPU guests).

Importing this package registers the vendor (``labwright.gpu.devices.register``).
"""

from __future__ import annotations

import re

from labwright.gpu.devices import register

_GPU_NODE = re.compile(r"(?a)^/dev/nvidia\d+$")


class Nvidia:
    name = "nvidia"

    def owns_path(self, path: str) -> bool:
        return path.startswith("/dev/nvidia")

    def is_gpu_node(self, path: str) -> bool:
        return bool(_GPU_NODE.match(path))


NVIDIA = register(Nvidia())
