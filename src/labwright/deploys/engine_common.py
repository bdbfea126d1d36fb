"""The steps every engine deployed on a stack (tabbyAPI, vLLM) takes the same way: the stack's plan for the GPUs, the
systemd check, the locked wheels, the guest and its driver, the service user, the stack switch, the unit.

Each is called from the engine's deploy function in its place in the sequence (pyinfra orders operations by where
they are called from); what differs between the engines (their data, messages, files, health wait) stays there.
"""

from __future__ import annotations

from collections.abc import Mapping
from io import StringIO
from typing import Any

from pyinfra import host, logger
from pyinfra.api.exceptions import DeployError
from pyinfra.api.operation import OperationMeta
from pyinfra.operations import files, server, systemd

from labwright.deploy_data import StackEngineSettings
from labwright.errors import LabwrightError
from labwright.facts.nvidia import NvidiaGpus
from labwright.facts.systemd import SystemdUnits, systemd_refusal, unit_active
from labwright.gpu.arch import capabilities_of
from labwright.gpu.devices import GPU_GROUP
from labwright.operations import guests
from labwright.operations import stack as stack_ops
from labwright.stacks.dependency_lock import UNPINNED_KEY, lock_dependencies, unpinned_warning
from labwright.stacks.deploy_data import flag
from labwright.stacks.from_matrix import plan_for_stack
from labwright.stacks.plan import SwitchPlan


def stack_plan(s: StackEngineSettings) -> SwitchPlan:
    """The stack's build plan for the host's GPUs' compute capabilities: a stack whose CUDA has no kernels for them is
    refused (LabwrightError) naming the stacks that have (a host without nvidia-smi reports none: no check)."""
    caps = capabilities_of(host.get_fact(NvidiaGpus)) if s.gpu != "off" else ()
    return plan_for_stack(s.stack, s.venv, root=s.stacks_root, wheelhouse=s.wheelhouse or None,
                          torch=s.torch or None, compute_caps=caps)


def unit_is_active(s: StackEngineSettings, engine: str) -> bool:
    """Whether the engine's unit runs now; a host without a running systemd is refused here in one line (a --dry run
    included), before pyinfra's own systemd facts fail the host. The answer is read in any shape pyinfra gives
    (labwright.facts.systemd): a `systemctl is-active` Command fact was None there, and .strip() a traceback."""
    systemd_state = host.get_fact(SystemdUnits, units=f"{s.service}.service")
    refusal = systemd_refusal(systemd_state, host.name, f"{engine} runs as the systemd unit {s.service}.service")
    if refusal:
        raise DeployError(refusal)
    return unit_active(systemd_state, f"{s.service}.service")


def locked_plan(plan: SwitchPlan, data: Mapping[str, Any]) -> SwitchPlan:
    """What the stack's wheels require, pinned by a hashed lock made here (labwright.stacks.dependency_lock): the last
    check, since the first time it reads the wheels' requirements it downloads them (then it is cached)."""
    try:
        plan = lock_dependencies(plan, unpinned=flag(data, UNPINNED_KEY))
    except LabwrightError as exc:
        raise DeployError(str(exc)) from None
    if plan.unpinned_dependencies:
        logger.warning(unpinned_warning(plan))
    return plan


def guest_and_driver(s: StackEngineSettings, driver: dict[str, Any] | None) -> None:
    """The guest as declared (a host with ``guest`` data), and the NVIDIA userspace matching the host's driver unless
    there is none or ``gpu`` is check (installs nothing)."""
    guest = host.data.get("guest")
    if guest:
        guests.container(name="Guest matches its declaration", guest=guest, guest_host=host.name)
    if driver is not None and driver["status"] != "no-host-driver" and s.gpu != "check":
        guests.nvidia_userspace(name="NVIDIA userspace = host driver", root=s.nvidia_root)


def service_user(s: StackEngineSettings) -> None:
    """The engine's system user, in the GPU nodes' group: a guest's nodes are 0660 group video
    (labwright.gpu.devices.guest_mode)."""
    server.user(name=f"Service user {s.user}", user=s.user, system=True, shell="/usr/sbin/nologin",
                home=f"/var/lib/{s.service}", create_home=True, groups=[GPU_GROUP], append=True)


def switch_stack(s: StackEngineSettings, plan: SwitchPlan, active: bool) -> None:
    """The engine stack: built beside and ABI-verified before the swap; a running service is restarted on it and
    health-checked, with an automatic rollback."""
    stack_ops.switch(
        name=f"Stack {plan.stack} at {s.venv}", plan=plan, keep=s.keep, base_python=s.base_python or None,
        installer=s.installer, create=True, service=s.service if active else None,
        health=f"{s.local_url}/health" if active else None, health_timeout=float(s.health_timeout))


def unit(s: StackEngineSettings, text: str) -> OperationMeta:
    """The unit file ``text`` (daemon-reload when it changed) and the service enabled; the unit's operation (a
    change restarts the engine)."""
    put = files.put(name=f"Unit {s.service}.service", src=StringIO(text),
                    dest=f"/etc/systemd/system/{s.service}.service", user="root", group="root", mode="644")
    systemd.daemon_reload(name="systemd daemon-reload (unit changed)", _if=put.did_change)
    systemd.service(name=f"{s.service} enabled", service=f"{s.service}.service", running=None, enabled=True)
    return put
