"""pyinfra operations for engine stacks: switch a managed venv to a named stack, roll it back.

The work happens on the target, by the labwright bundle (see labwright.stacks.bundle for why a zipapp): the
operation resolves the stack from the matrix here, pushes the bundle and the plan, and runs one command. So
it works over ``@lxd``, ``@pct``, ``@ssh`` and ``@local`` alike; the target needs only python3 (3.10+).
"""

from __future__ import annotations

from io import StringIO

from pyinfra import host
from pyinfra.api import StringCommand, operation
from pyinfra.api.exceptions import OperationError
from pyinfra.operations import files

from labwright.errors import LabwrightError
from labwright.facts.python_stack import PythonStack
from labwright.guestlock import shell_env
from labwright.shell import join, quote
from labwright.snapshots.deploy import required_check_command, snapshot_command
from labwright.stacks.bundle import REMOTE_PATH, build_bundle
from labwright.stacks.from_matrix import plan_for_stack
from labwright.stacks.plan import DEFAULT_ROOT, SwitchPlan
from labwright.stacks.service import HealthCheck, check_health, check_unit


def _service_args(service: str | None, health: str | None, health_cmd: str | None,
                  health_timeout: float) -> list[str]:
    check_health(HealthCheck(url=health, command=health_cmd, timeout_s=health_timeout))
    args: list[str] = []
    if service:
        args += ["--service", check_unit(service)]
    if health:
        args += ["--health", health]
    if health_cmd:
        args += ["--health-cmd", health_cmd]
    return [*args, "--health-timeout", f"{health_timeout:g}"]


def _command(python: str, *args: str) -> StringCommand:
    # One shell line: fail with a readable message where the target has no python3 at all.
    # shell_env(): the bundle takes the guest's run lock (guestlock.hold_local); this run's token tells it that
    # the deploy running it already holds that lock.
    runner = quote(python)
    return StringCommand(
        f"command -v {runner} >/dev/null || {{ echo 'labwright: error: no {python} on this host: install "
        f"python3 (3.10+)' >&2; exit 1; }}; {shell_env()}{runner} {join([REMOTE_PATH, *args])}")


@operation()
def switch(stack: str | None = None, venv: str | None = None, service: str | None = None, health: str | None = None,
           health_cmd: str | None = None, health_timeout: float = 60.0, wheelhouse: str | None = None,
           torch: str | None = None, root: str = DEFAULT_ROOT, keep: int = 2, base_python: str | None = None,
           installer: str = "auto", create: bool = False, plan: SwitchPlan | None = None, python: str = "python3"):
    """
    Switch a venv to a named stack: build beside, ABI-verify, swap the symlink, restart, health-check.

    + stack: name in wheels_matrix/stacks.toml (``A``, ``tabbyapi-cu13``)
    + venv: the path the service runs from (``/opt/tabbyapi/.venv``); a plain venv there is adopted
    + service: systemd unit to restart after the swap
    + health / health_cmd: HTTP URL (2xx/3xx) or shell command (exit 0) that decides health; a failure after
      the swap rolls back by itself
    + health_timeout: seconds the restarted service gets
    + wheelhouse: directory ON THE TARGET holding the wheels (offline); default: the matrix URLs
    + torch: resolve the stack with this torch instead of its own
    + root: where environments live on the target
    + keep: environments kept per venv, the current one included
    + base_python / installer / create: as ``labwright stack switch`` (docs/stacks.md)
    + plan: a ready ``SwitchPlan`` instead of stack/venv/wheelhouse/torch/root, with the hashed lock of what its
      wheels require (``labwright.stacks.dependency_lock.lock_dependencies``, as deploys/stack.py makes it while
      pyinfra prepares); a plan made here from ``stack=`` carries none, so the target refuses a stack whose
      downloaded wheels require anything beyond each other (docs/stacks.md, "What the wheels require")
    + python: the target interpreter that runs the bundle

    A second run with the same stack changes nothing (the fact shows the venv already on that environment). When a
    switch is due and a venv exists, the guest is snapshotted (labwright.snapshots.deploy; host data
    ``snapshot_before``, ``snapshot_keep``, ``snapshot_required``) once the new stack is built and verified beside
    the running one, before the swap: a refused stack takes no snapshot.

    **Example:**

    .. code:: python

        from labwright.operations import stack
        stack.switch(
            name="tabbyAPI on stack A",
            stack="A", venv="/opt/tabbyapi/.venv", service="tabbyapi",
            health="http://127.0.0.1:5000/health",
        )
    """
    try:
        if plan is None:
            if not stack or not venv:
                raise OperationError("stack.switch needs stack= and venv= (or plan=)")
            plan = plan_for_stack(stack, venv, root=root, wheelhouse=wheelhouse, torch=torch)
        extra = _service_args(service, health, health_cmd, health_timeout)
    except LabwrightError as exc:
        # pyinfra prints an OperationError as one line; ours already are one line.
        raise OperationError(str(exc)) from exc
    now = host.get_fact(PythonStack, venv=plan.venv, root=plan.root)
    current = now["current"] or {}
    # pending: a run was killed after its swap, before the restart was confirmed: run again to finish it.
    if now["kind"] == "symlink" and now["target"] == plan.env_venv and current.get("id") == plan.env_id \
            and not current.get("pending"):
        host.noop(f"{plan.venv} already runs stack {plan.stack} ({plan.env_id})")
        return
    # A switch is due. The guest is snapshotted before the swap (host data snapshot_before/keep/required; nothing for
    # a host that is not a container), but after the new stack is built and verified beside the running one
    # (`switch --build-only`): a refused stack then never pauses the service. On LXD's dir pool a snapshot of the
    # running guest is a full copy with it frozen (30-90 s without answers), so none is taken there unless
    # snapshot_required: the previous stack's venv stays beside the new one, and rollback swaps back to it.
    # Not before a first install, where no venv exists yet: there is nothing to go back to.
    instead = (f"the switch keeps stack {current.get('stack') or 'before it'}'s venv beside the new one, so "
               f"a rollback (stack.rollback, or `labwright stack rollback --venv {plan.venv}` in the guest) goes "
               "back in a restart")
    snapshot = list(snapshot_command(host, "stack-switch", instead=instead)) if now["kind"] != "absent" else []
    if snapshot:  # snapshot_required on storage that cannot snapshot: refused before the new stack is built
        yield from required_check_command(host)
    yield from files.put._inner(src=str(build_bundle()), dest=REMOTE_PATH, mode="644", create_remote_dir=True)
    plan_file = f"{plan.root}/plans/{plan.env_id}.json"
    yield from files.put._inner(src=StringIO(plan.dumps()), dest=plan_file, mode="600", create_remote_dir=True)
    options = ["--keep", str(keep), "--installer", installer]
    if base_python:
        options += ["--base-python", base_python]
    if create:
        options.append("--create")
    if snapshot:
        yield _command(python, "switch", "--plan", plan_file, "--build-only", *options, *extra)
        yield from snapshot
    yield _command(python, "switch", "--plan", plan_file, *options, *extra)


@operation(is_idempotent=False)
def rollback(venv: str, service: str | None = None, health: str | None = None, health_cmd: str | None = None,
             health_timeout: float = 60.0, root: str = DEFAULT_ROOT, python: str = "python3"):
    """
    Swap a managed venv back to its previous stack and restart (each run flips between the two).

    + venv / service / health / health_cmd / health_timeout / root / python: as ``switch``

    **Example:**

    .. code:: python

        stack.rollback(name="back to the previous stack", venv="/opt/tabbyapi/.venv", service="tabbyapi")
    """
    try:
        extra = _service_args(service, health, health_cmd, health_timeout)
    except LabwrightError as exc:
        raise OperationError(str(exc)) from exc
    yield from files.put._inner(src=str(build_bundle()), dest=REMOTE_PATH, mode="644", create_remote_dir=True)
    yield _command(python, "rollback", "--venv", venv, "--root", root, *extra)
