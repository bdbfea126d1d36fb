"""``gpu check`` against an LXD/Incus guest: the instance is looked up, its GPU passthrough read from its config, and
the checks of ``labwright.gpu.check`` run through the LXD API's exec (no SSH in the guest needed).

The host side (module version, nodes and majors) is read on the machine running labwright (``GpuHost``), which is
the LXD host for a local guest; a caller may give another ``GpuHost`` (tests: one over a double of a host tree).

``passed_gpu_devices`` is vendor-neutral (``labwright.gpu.devices``); the checks are NVIDIA's (labwright.gpu.check)
for an NVIDIA guest, and the DRM nodes plus Vulkan (labwright.gpu.vulkan) for an AMD or Intel one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from labwright.errors import BadInput, LxdError
from labwright.gpu.check import Check, DecodeRequest, run_checks
from labwright.gpu.devices import passed_gpu_devices
from labwright.gpu.dri import read_dri
from labwright.gpu.nvidia.host import GpuHost
from labwright.gpu.vulkan import host_nodes_of, passed_vendor, run_dri_checks
from labwright.hostnames import BadHostName, lxd_guest
from labwright.hosts import Host
from labwright.hosts.lxd import LxdHost
from labwright.lxd.client import LxdClient
from labwright.lxd.remotes import resolve_endpoint
from labwright.shell import join

#: Engine services the deploys install (templates/{llamacpp,tabbyapi}/defaults.toml: service), tried in order.
ENGINE_SERVICES = ("llama-server", "tabbyapi")
AUTO = "auto"


@dataclass
class GpuReport:
    guest: str
    service: str | None
    checks: list[Check] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        return {"guest": self.guest, "service": self.service, "ok": self.ok, "seconds": round(self.seconds, 3),
                "checks": [c.to_dict() for c in self.checks]}


def _lxd_host(guest: str) -> LxdHost:
    try:
        parsed = lxd_guest(guest)
    except BadHostName as exc:
        raise BadInput(f"{exc} (see `{'incus' if guest.startswith('@incus/') else 'lxc'} list`)") from None
    if parsed.remote:
        raise BadInput(f"guest {guest}: gpu check reads the host's NVIDIA files, so it runs on the {parsed.daemon} "
                       f"host itself; run `labwright gpu check {parsed.instance}` there")
    endpoint, project = resolve_endpoint(None, flavour=parsed.flavour)
    # raise_errors: a daemon that cannot run a command stops the check with one line (LxdError), not exit 255
    return LxdHost(parsed.instance, LxdClient(endpoint, project=project), raise_errors=True)


def engine_service(host: Host, service: str | None) -> str | None:
    """``service``, or for ``AUTO`` the first of ENGINE_SERVICES that is loaded in the guest (None: neither)."""
    if service != AUTO:
        return service
    units = join(f"{s}.service" for s in ENGINE_SERVICES)
    states = host.run(f"systemctl show -p LoadState --value {units} 2>/dev/null; true").stdout.split()
    loaded = [s for s, state in zip(ENGINE_SERVICES, states, strict=False) if state == "loaded"]
    return loaded[0] if loaded else None


def check_guest(guest: str, service: str | None = AUTO, decode: DecodeRequest | None = None,
                gpu_host: GpuHost | None = None) -> GpuReport:
    """Run the checks on ``guest`` against ``gpu_host`` (default: this machine). BadInput (exit 2) for a guest that
    does not exist, is stopped, or has no GPU passed to it; the returned report says which checks failed (exit 1)."""
    gpu_host = gpu_host if gpu_host is not None else GpuHost()
    host = _lxd_host(guest)
    daemon, tool = host.client.endpoint.title, host.client.endpoint.tool  # the daemon reached: messages name it
    started = time.monotonic()
    try:
        instance = host.client.instance_or_none(host.name)
        if instance is None:
            raise BadInput(f"guest {guest}: no such {daemon} instance (see `{tool} list`)")
        if not passed_gpu_devices(instance):
            raise BadInput(f"guest {guest}: no GPU is passed to it (no `gpu` device and no /dev/nvidia* or "
                           f"/dev/dri unix-char device in its {daemon} config); set gpu: nvidia, amd, intel "
                           "or auto in its guest data and run `labwright guest apply`")
        if instance.get("status") != "Running":
            raise BadInput(f"guest {guest} is {instance.get('status')}; start it first (`{tool} start "
                           f"{host.name}`)")
        chosen = engine_service(host, service)
        facts = read_dri(gpu_host.host)
        vendor = passed_vendor(instance, facts)
        if vendor is not None:
            checks = run_dri_checks(host, vendor, host_nodes_of(vendor, facts), chosen, decode)
        else:
            checks = run_checks(host, gpu_host.driver_version(), gpu_host.device_nodes(), chosen, decode)
        if service == AUTO and chosen is None:
            checks.append(Check("engine on the GPU", True, "not checked: no llama-server or tabbyapi service in the "
                                "guest (give --service NAME)"))
    except LxdError as exc:
        raise LxdError(f"guest {guest}: {exc}") from exc
    finally:
        host.close()
    return GpuReport(guest, chosen, checks, time.monotonic() - started)
