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
from labwright.stacks.dependency_lock import UNPINNED_KEY, lock_dependencies, unpinned_warning
from labwright.stacks.deploy_data import directory, flag, keep, seconds, value
from labwright.stacks.from_matrix import plan_for_stack
from labwright.stacks.plan import DEFAULT_ROOT
from labwright.stacks.service import HealthCheck, check_health, check_unit


@locked("Engine stack")
def deploy_stack() -> None:
    """Switch ``venv`` to ``stack`` (or roll it back with ``stack_rollback``); a second run changes nothing."""
    data = host.data.dict()
    if not value(data, "venv"):
        raise DeployError("venv: required: the venv path the service runs from, e.g. --data venv=/opt/tabbyapi/.venv")
    venv = directory(data, "venv")
    common = {"service": value(data, "service"), "health": value(data, "health"),
              "health_cmd": value(data, "health_cmd"), "health_timeout": seconds(data, "health_timeout", 60.0)}
    root = directory(data, "stacks_root", DEFAULT_ROOT)
    if root.startswith(venv.rstrip("/") + "/") or root == venv:
        raise DeployError(f"stacks_root ({root}) is inside venv ({venv}), which is replaced by a link to the stack: "
                          "give stacks_root a directory outside it (nothing was changed)")
    keep_count = keep(data)

    # Resolve and check everything here, while pyinfra prepares: an error then is one line (DeployError) and no
    # operation has run, instead of a traceback from inside the operation's generator at execution time.
    try:
        check_health(HealthCheck(url=common["health"], command=common["health_cmd"],
                                 timeout_s=common["health_timeout"]))
        if common["service"]:
            check_unit(str(common["service"]))
        plan = None
        if not flag(data, "stack_rollback"):
            name = value(data, "stack")
            if not name:
                raise DeployError("stack: required: a stack name from `labwright matrix stacks`, e.g. --data stack=A")
            plan = plan_for_stack(str(name), str(venv), root=root, wheelhouse=value(data, "wheelhouse"),
                                  torch=value(data, "torch"),
                                  compute_caps=capabilities_of(host.get_fact(NvidiaGpus)))
            # What the wheels require, pinned by a hashed lock made here (labwright.stacks.dependency_lock).
            plan = lock_dependencies(plan, unpinned=flag(data, UNPINNED_KEY))
    except LabwrightError as exc:
        raise DeployError(str(exc)) from None
    if plan is not None and plan.unpinned_dependencies:
        logger.warning(unpinned_warning(plan))

    if plan is None:
        stack_ops.rollback(name=f"Roll back {venv}", venv=str(venv), root=root, **common)
    else:
        stack_ops.switch(
            name=f"Stack {plan.stack} at {venv}", plan=plan, keep=keep_count,
            base_python=value(data, "base_python"),
            installer=str(value(data, "installer", "auto")), create=flag(data, "create"), **common)
