"""Make a SwitchPlan from a named stack in the matrix (controller side: the target never reads the matrix)."""

from __future__ import annotations

from pathlib import PurePosixPath

from labwright.errors import BadInput
from labwright.matrix import inputs
from labwright.matrix.load import load_matrix
from labwright.matrix.model import Matrix, Wheel
from labwright.matrix.resolve import resolve_stack
from labwright.matrix.stacks import get_stack, request_for
from labwright.stacks.layout import Layout, VenvPath
from labwright.stacks.plan import DEFAULT_ROOT, SHA256, PlannedWheel, SwitchPlan, check_root, check_venv_path
from labwright.stacks.service import HealthCheck


def plan_for_stack(name: str, venv: str, *, root: str = DEFAULT_ROOT, wheelhouse: str | None = None,
                   torch: str | None = None, matrix: Matrix | None = None,
                   compute_caps: tuple[str, ...] = ()) -> SwitchPlan:
    """Resolve stack ``name`` (optionally with another torch) into the exact wheels to install at ``venv``.

    ``wheelhouse`` is a directory on the target holding the wheels under their published file names; without
    it each wheel comes from its matrix URL. ``compute_caps``: the target's GPUs (labwright.gpu.arch.capabilities_of
    the NvidiaGpus fact); a build with no kernels for one of them is refused, naming the stacks that have some.
    """
    venv = check_venv_path(venv)
    root = check_root(root)
    if wheelhouse is not None and not PurePosixPath(wheelhouse).is_absolute():
        raise BadInput(f"--wheelhouse {wheelhouse!r} must be an absolute directory path")
    matrix = matrix or load_matrix()
    stack = get_stack(name, matrix)
    if torch is not None:
        inputs.parse_torch(torch)  # the one-line BadInput for a torch version that does not parse
    resolution = resolve_stack(request_for(stack, torch=torch, compute_caps=compute_caps), matrix)
    if not resolution.ok:
        raise BadInput(f"stack {name} cannot be built: {resolution.errors[0]}"
                       + (f" (and {len(resolution.errors) - 1} more; see `labwright matrix stacks`)"
                          if len(resolution.errors) > 1 else ""))
    unpinned = [chosen.wheel for chosen in resolution.wheels if not SHA256.fullmatch(chosen.wheel.sha256.lower())]
    if unpinned:
        raise unpinned_wheel(name, unpinned)
    wheels = []
    for chosen in resolution.wheels:
        wheel = chosen.wheel
        source = str(PurePosixPath(wheelhouse) / wheel.filename) if wheelhouse else wheel.url
        wheels.append(PlannedWheel(package=wheel.package, version=wheel.version, filename=wheel.filename,
                                   source=source, sha256=wheel.sha256.lower()))
    return SwitchPlan(stack=name, venv=venv, python=inputs.parse_python(stack.python), wheels=tuple(wheels),
                      root=root, absent=tuple((a.name, a.reason) for a in resolution.absent))


def unpinned_wheel(stack: str, unpinned: list[Wheel]) -> BadInput:
    """The one-line refusal of a stack with a wheel whose sha256 the matrix does not record: a file hashed only when
    it arrives proves nothing about where it came from (docs/security.md, "Every download pinned")."""
    wheel = unpinned[0]
    where = wheel.origin or "the wheels matrix"
    more = f" (and {len(unpinned) - 1} more wheel(s) of the stack)" if len(unpinned) > 1 else ""
    return BadInput(f"stack {stack}: {wheel.filename} has no recorded sha256 in {where}{more}: run `labwright matrix "
                    "refresh` where its publisher answers (it records the sha256 the index or the release publishes), "
                    "or add sha256=<hex> from the publisher to its line in the listing under sources/ and re-run "
                    "`labwright matrix refresh --from` it; nothing was run")


def describe_plan(plan: SwitchPlan, found: VenvPath | None, service: str | None, health: HealthCheck,
                  keep: int) -> list[str]:
    """What `switch --dry` prints: every step, in order, and what it would touch."""
    lines = [f"stack {plan.stack} for {plan.venv} (Python {plan.python}); dry run: nothing is changed"]
    lines.append(f"wheels ({len(plan.wheels)}), installed with --no-deps --require-hashes:")
    for wheel in plan.wheels:
        lines.append(f"  {wheel.package} {wheel.version}  {wheel.source}  (sha256 {wheel.sha256[:16]}…)")
    lines.append(_describe_dependencies(plan))
    for name, why in plan.absent:
        lines.append(f"  absent: {name}: {why}")
    now = _describe_current(plan, found)
    lines.append(f"build: {plan.env_venv} beside the running environment{now}")
    lines.append("verify: the ABI verifier on the new venv (torch symbols + real imports); any failure removes it "
                 "and stops here, before the swap")
    lines.append(f"swap: {plan.venv} -> {plan.env_venv} (symlink, atomic rename)")
    if found is not None and found.kind == "directory":
        lines.append(f"  {plan.venv} is a plain venv: it is first moved to {plan.root}/original-…/venv and kept as "
                     "the previous environment")
    lines.append(f"restart: systemctl restart {service}" if service else "restart: none (no --service)")
    if health.configured:
        lines.append(f"health: {health.describe()} within {health.timeout_s:g} s, else swap back and restart")
    else:
        lines.append("health: none (no --health/--health-cmd): no automatic rollback")
    lines.append(f"keep: the {keep} most recent environments of {plan.venv}; older ones are deleted")
    return lines


def _describe_dependencies(plan: SwitchPlan) -> str:
    """How the second pass gets what the wheels require (labwright.stacks.build, dependency_lock)."""
    if plan.lock_lines:
        return (f"dependencies: {len(plan.lock_lines)} file(s) from the hashed lock made here, sha256 as "
                f"{plan.dependency_index} publishes them (--require-hashes --no-deps: nothing resolved on the target)")
    if plan.unpinned_dependencies:
        return ("dependencies: WITHOUT hashes (stack_unpinned_dependencies): resolved on the target from the "
                + ("wheelhouse" if plan.local else "package index") + ", the plan's wheels pinned")
    if plan.local:
        return ("dependencies: from the wheelhouse's own requirements.lock (--require-hashes --no-deps --no-index); "
                "a stack that needs some and has none is refused before anything is installed")
    if plan.dependency_index:
        return "dependencies: none beyond each other (the lock made here is empty)"
    return ("dependencies: no hashed lock in this plan: the target refuses the stack if its wheels require anything "
            "beyond each other")


def _describe_current(plan: SwitchPlan, found: VenvPath | None) -> str:
    if found is None:
        return ""
    if found.kind == "absent":
        return f" (nothing at {plan.venv} yet)"
    if found.target == plan.env_venv:
        return " (already current: a real run changes nothing)"
    return f" (now {plan.venv} -> {found.target})"


def inspect_local(plan: SwitchPlan) -> VenvPath | None:
    """The managed path as this machine sees it, for --dry; None when it is on another machine's disk."""
    return Layout(plan.root, plan.venv).inspect()
