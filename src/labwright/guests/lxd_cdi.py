"""GPUs by CDI where the daemon offers it: whether an LXD guest's ``gpu: nvidia`` becomes a ``gpu`` device with a CDI
id (``id=nvidia.com/gpu=0``) or stays today's ``gpu``/``unix-char`` wiring, and why (``guest plan`` says it).

- LXD's ``gpu`` device takes a CDI name in ``id`` for containers from API extension ``gpu_cdi`` (LXD 6.2, canonical/lxd
  commit 0f6aff58; doc/api-extensions.md "gpu_cdi"): lxd/device/gpu_physical.go validateConfig accepts an ``id`` that
  is a DRM number or ``cdi.ToCDI(id)``, lxd/device/cdi/id.go parses ``VENDOR/CLASS=NAME`` with vendor ``nvidia.com``
  (or ``amd.com``), class ``gpu``/``mig``/``igpu`` and the name a GPU's index, UUID or ``all``. LXD generates the
  spec itself with NVIDIA's nvcdi (lxd/device/cdi/spec.go: index and UUID device namers), so the names are those of
  ``nvidia-ctk cdi generate`` with its default ``--device-name-strategy index,uuid``.
- Incus has no CDI (lxc/incus keeps ``nvidia.runtime``); LXD before 6.2 has no ``gpu_cdi``: both keep today's wiring.
- The host's spec is how labwright knows the toolkit is there and which GPUs it names: nvidia-ctk writes
  ``/etc/cdi/nvidia.yaml`` (``nvidia-ctk cdi generate --output``) or, through its ``nvidia-cdi-refresh`` unit
  (toolkit 1.18+), ``/var/run/cdi/nvidia.yaml`` (NVIDIA/nvidia-container-toolkit
  deployments/systemd/nvidia-cdi-refresh.service); the CDI spec directories are ``/etc/cdi`` and ``/var/run/cdi``
  (cncf-tags/container-device-interface, pkg/cdi DefaultStaticDir/DefaultDynamicDir), YAML or JSON, with
  ``kind: nvidia.com/gpu`` and ``devices: [{name: "0"}, {name: GPU-UUID}, {name: all}]``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

import yaml

from labwright.hosts import Host
from labwright.lxd.client import ServerInfo
from labwright.textio import loads_json, yaml_load

#: The API extension that makes LXD's gpu device take a CDI id (shared/version/api.go).
CDI_EXTENSION = "gpu_cdi"
CDI_SINCE = "LXD 6.2"
#: Where CDI specs live, the dynamic (runtime-generated) directory last: it wins over a static spec of the same kind.
CDI_DIRS = ("/etc/cdi", "/var/run/cdi")
CDI_KIND = "nvidia.com/gpu"
GENERATE = "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml"


@dataclass(frozen=True)
class CdiSpec:
    """The NVIDIA GPUs a host's CDI spec names: ``path`` of the spec, ``indexes`` the names that are GPU indexes."""

    path: str
    indexes: tuple[str, ...]

    def ids(self) -> tuple[str, ...]:
        return tuple(f"{CDI_KIND}={index}" for index in self.indexes)


def read_spec(host: Host) -> CdiSpec | None:
    """The ``nvidia.com/gpu`` spec on ``host`` (this machine's ``LocalHost`` in production), or None when there is
    none usable."""
    found: CdiSpec | None = None
    for directory in CDI_DIRS:
        try:
            files = [f"{directory}/{n}" for n in host.listdir(directory)
                     if PurePosixPath(n).suffix in (".yaml", ".yml", ".json")]
        except OSError:
            continue
        for path in files:
            try:
                text = host.read_text(path)
                doc: Any = loads_json(text) if path.endswith(".json") else yaml_load(text)
            except (OSError, ValueError, RecursionError, yaml.YAMLError):  # ValueError: also an alias bomb
                continue  # an unreadable spec is no offer: today's wiring stays
            if not isinstance(doc, dict) or doc.get("kind") != CDI_KIND:
                continue
            names = [str(d.get("name")) for d in doc.get("devices") or [] if isinstance(d, dict)]
            indexes = tuple(sorted((n for n in names if re.fullmatch(r"(?a)\d+", n)), key=int))
            if indexes:
                found = CdiSpec(path, indexes)
    return found


@dataclass(frozen=True)
class CdiOffer:
    """What decides CDI for one daemon: its ``server`` (GET /1.0), the host's ``spec`` (None: none found or not
    readable), ``local``: the daemon runs on this machine (a remote's host files are out of reach)."""

    server: ServerInfo
    spec: CdiSpec | None
    local: bool = True

    def refusal(self) -> str | None:
        """Why CDI cannot be used (None: it can)."""
        server = self.server
        if server.name == "incus":
            return f"{server.describe()} has no CDI (Incus passes GPUs by nodes or nvidia.runtime)"
        if not server.has(CDI_EXTENSION):
            return f"{server.describe()} lacks the {CDI_EXTENSION} API extension ({CDI_SINCE} or later has it)"
        if not self.local:
            return "the daemon is remote: its host's CDI spec cannot be read from here"
        if self.spec is None:
            return f"this host has no {CDI_KIND} CDI spec in {' or '.join(CDI_DIRS)} (`{GENERATE}` writes one)"
        return None
