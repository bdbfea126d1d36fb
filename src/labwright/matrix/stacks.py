"""Named stacks (wheels_matrix/stacks.toml): resolve one by name, and compare it with the row it was recorded from.

Field note 001's table writes cells like `2.8.3+cu128 or +cu130 ✓` and `✗ no wheel`; a cell agrees with the resolver
when its first option is the resolver's pick, every other option is a build the resolver also accepts, and a ✗ is a
component the resolver leaves absent. Options the matrix contradicts must be listed under `disputed` with a reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from labwright.errors import BadInput
from labwright.matrix.load import load_matrix
from labwright.matrix.model import Matrix, SeedDispute, Stack, Wheel
from labwright.matrix.resolve import Resolution, StackRequest, resolve_stack
from labwright.matrix.wheelname import cuda_to_label

AGREES, DISPUTED, DIFFERS = "agrees", "disputed", "differs"


@dataclass
class CellCheck:
    component: str
    seed: str
    resolved: str
    status: str  # agrees / disputed / differs
    disputes: list[SeedDispute] = field(default_factory=list)


def get_stack(name: str, matrix: Matrix) -> Stack:
    if name not in matrix.stacks:
        raise BadInput(f"stack {name!r} is unknown: use one of {', '.join(matrix.stacks)} (labwright matrix stacks)")
    return matrix.stacks[name]


def request_for(stack: Stack, *, compute_caps: tuple[str, ...] = (), **overrides: str | None) -> StackRequest:
    """The request that resolves ``stack``; ``overrides`` (torch=, driver=) replace its own values where given, and
    ``compute_caps`` (the GPUs' compute capabilities, e.g. from ``labwright.gpu.arch.capabilities_of`` over the
    ``NvidiaGpus`` fact) refuse builds without kernels for them."""
    fields = {"torch": stack.torch, "cuda": stack.cuda, "python": stack.python, "engine": stack.engine}
    fields.update({k: v for k, v in overrides.items() if v})
    return StackRequest(pins=stack.pins, only=stack.only, compute_caps=tuple(compute_caps), **fields)


def resolve_named_stack(name: str, matrix: Matrix | None = None, driver: str | None = None,
                        compute_caps: tuple[str, ...] = ()) -> tuple[Stack, Resolution]:
    matrix = matrix or load_matrix()
    stack = get_stack(name, matrix)
    return stack, resolve_stack(request_for(stack, driver=driver, compute_caps=compute_caps), matrix)


def short_label(wheel: Wheel) -> str:
    """Field note 001's spelling: `2.9.0+cu128` for torch, `2.8.3+cu128` for a CUDA build, `0.6.0` for pure Python."""
    if wheel.package == "torch":
        return wheel.version
    if wheel.cuda:
        return f"{wheel.public_version}+{cuda_to_label(wheel.cuda)}"
    return wheel.public_version


def parse_cell(cell: str) -> tuple[bool, list[str]]:
    """`2.8.3+cu128 or +cu130 ✓` -> (True, ["2.8.3+cu128", "2.8.3+cu130"]); `✗ no wheel` -> (False, [])."""
    text = cell.strip()
    if text.startswith("✗"):
        return False, []
    text = text.replace("✓", "").strip()
    if not text:
        return True, []
    options = [o.strip() for o in text.split(" or ")]
    public = options[0].split("+", 1)[0]
    return True, [o if not o.startswith("+") else public + o for o in options]


def option_matches(option: str, wheel: Wheel) -> bool:
    public, _, label = option.partition("+")
    if public != wheel.public_version:
        return False
    if not label:
        return True
    if wheel.package == "torch":
        return wheel.local == label
    return bool(wheel.cuda) and cuda_to_label(wheel.cuda) == label


def compare_with_seed(stack: Stack, resolution: Resolution) -> list[CellCheck]:
    checks = []
    for component, cell in stack.seed.items():
        present, options = parse_cell(cell)
        chosen = resolution.chosen(component)
        disputes = [d for d in stack.disputed if d.component == component]
        disputed_options = {d.seed for d in disputes}
        resolved = ", ".join(short_label(c.wheel) for c in chosen) if chosen else "✗ absent"
        if not present:
            status = AGREES if not chosen else DIFFERS
        elif not chosen:
            status = DISPUTED if options and options[0] in disputed_options else DIFFERS
        elif not options:
            status = AGREES
        else:
            pick = chosen[0]
            accepted = [pick.wheel, *pick.alternatives]
            unmatched = [o for o in options[1:] if not any(option_matches(o, w) for w in accepted)]
            if not option_matches(options[0], pick.wheel):
                status = DISPUTED if options[0] in disputed_options else DIFFERS
            elif not unmatched:
                status = AGREES
            else:
                status = DISPUTED if set(unmatched) <= disputed_options else DIFFERS
        checks.append(CellCheck(component, cell, resolved, status, disputes if status == DISPUTED else []))
    return checks
