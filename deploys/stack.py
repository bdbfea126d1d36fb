"""Switch a guest's venv to a named engine stack (or roll it back), with the ABI check before the swap.

    pyinfra -y @lxd/tabbyapi deploys/stack.py --data stack=A --data venv=/opt/tabbyapi/.venv \
        --data service=tabbyapi --data health=http://127.0.0.1:5000/health
    pyinfra -y @lxd/tabbyapi deploys/stack.py --data stack_rollback=true --data venv=/opt/tabbyapi/.venv \
        --data service=tabbyapi

Host data: stack, venv (required), service, health or health_cmd, health_timeout (s, default 60), wheelhouse
(a directory on the target), torch (resolve with another torch), stacks_root (default /opt/labwright/stacks),
keep (default 2), base_python, installer (auto|uv|pip), create (allow a venv path that does not exist yet),
stack_rollback (swap back instead). See docs/stacks.md. A second run with the same stack changes nothing.
"""

from __future__ import annotations

from typing import Any

from pyinfra import host
from pyinfra.api.exceptions import DeployError

from labwright.errors import LabwrightError
from labwright.operations import stack as stack_ops
from labwright.stacks.from_matrix import plan_for_stack
from labwright.stacks.plan import DEFAULT_ROOT
from labwright.stacks.service import HealthCheck, check_health, check_unit


def data(key: str, default: Any = None) -> Any:
    value = host.data.get(key)
    return default if value is None else value


def flag(key: str) -> bool:
    value = data(key, False)
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise DeployError(f"{key}: {value!r} is not a boolean (use true or false)")


def number(key: str, default: float) -> float:
    try:
        return float(data(key, default))
    except (TypeError, ValueError):
        raise DeployError(f"{key}: {data(key)!r} is not a number") from None


venv = data("venv")
if not venv:
    raise DeployError("venv: required: the venv path the service runs from, e.g. --data venv=/opt/tabbyapi/.venv")
common = {"service": data("service"), "health": data("health"), "health_cmd": data("health_cmd"),
          "health_timeout": number("health_timeout", 60.0)}
root = str(data("stacks_root", DEFAULT_ROOT))

# Resolve and check everything here, while pyinfra prepares: an error then is one line (DeployError) and no
# operation has run, instead of a traceback from inside the operation's generator at execution time.
try:
    check_health(HealthCheck(url=common["health"], command=common["health_cmd"], timeout_s=common["health_timeout"]))
    if common["service"]:
        check_unit(str(common["service"]))
    plan = None
    if not flag("stack_rollback"):
        name = data("stack")
        if not name:
            raise DeployError("stack: required: a stack name from wheels_matrix/stacks.toml, e.g. --data stack=A")
        plan = plan_for_stack(str(name), str(venv), root=root, wheelhouse=data("wheelhouse"), torch=data("torch"))
except LabwrightError as exc:
    raise DeployError(str(exc)) from None

if plan is None:
    stack_ops.rollback(name=f"Roll back {venv}", venv=str(venv), root=root, **common)
else:
    stack_ops.switch(
        name=f"Stack {plan.stack} at {venv}", plan=plan, keep=int(number("keep", 2)), base_python=data("base_python"),
        installer=str(data("installer", "auto")), create=flag("create"), **common)
