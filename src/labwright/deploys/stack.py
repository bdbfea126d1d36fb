"""Engine stack: switch a guest's venv to a named stack (or roll it back), ABI-checked before the swap.

See deploys/stack.py (the pyinfra CLI shim, with usage) and docs/stacks.md.
"""

from __future__ import annotations

from pyinfra import host, logger
from pyinfra.api.exceptions import DeployError

from labwright.errors import LabwrightError
from labwright.facts.nvidia import NvidiaGpus
from labwright.gpu.arch import capabilities_of
from labwright.guestlock import locked
from labwright.operations import stack as stack_ops
from labwright.stacks.dependency_lock import lock_dependencies, unpinned_warning
from labwright.stacks.deploy_data import settings
from labwright.stacks.from_matrix import plan_for_stack
from labwright.stacks.service import HealthCheck, check_health, check_unit


@locked("Engine stack")
def deploy_stack() -> None:
    """Switch ``venv`` to ``stack`` (or roll it back with ``stack_rollback``); a second run changes nothing."""
    typed = settings(host.data.dict())  # every key typed (labwright.stacks.deploy_data.data_schema): one line
    if not typed.venv:
        raise DeployError("venv: required: the venv path the service runs from, e.g. --data venv=/opt/tabbyapi/.venv")
    venv, root = typed.venv, typed.stacks_root
    common = {"service": typed.service or None, "health": typed.health or None,
              "health_cmd": typed.health_cmd or None, "health_timeout": typed.health_timeout}

    # Resolve and check everything here, while pyinfra prepares: an error then is one line (DeployError) and no
    # operation has run, instead of a traceback from inside the operation's generator at execution time.
    try:
        check_health(HealthCheck(url=common["health"], command=common["health_cmd"],
                                 timeout_s=common["health_timeout"]))
        if common["service"]:
            check_unit(str(common["service"]))
        plan = None
        if not typed.stack_rollback:
            if not typed.stack:
                raise DeployError("stack: required: a stack name from `labwright matrix stacks`, e.g. --data stack=A")
            plan = plan_for_stack(typed.stack, venv, root=root, wheelhouse=typed.wheelhouse or None,
                                  torch=typed.torch or None,
                                  compute_caps=capabilities_of(host.get_fact(NvidiaGpus)))
            # What the wheels require, pinned by a hashed lock made here (labwright.stacks.dependency_lock).
            plan = lock_dependencies(plan, unpinned=typed.unpinned_dependencies)
    except LabwrightError as exc:
        raise DeployError(str(exc)) from None
    if plan is not None and plan.unpinned_dependencies:
        logger.warning(unpinned_warning(plan))

    if plan is None:
        stack_ops.rollback(name=f"Roll back {venv}", venv=venv, root=root, **common)
    else:
        stack_ops.switch(
            name=f"Stack {plan.stack} at {venv}", plan=plan, keep=typed.keep,
            base_python=typed.base_python or None, installer=typed.installer, create=typed.create, **common)
