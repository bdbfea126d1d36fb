"""The hashed lock of what a stack's wheels require beyond each other, made on the controller (not in the bundle).

A stack venv gets the plan's own wheels by path and sha256 (``--no-deps --require-hashes``, labwright.stacks.build);
what they require (torch's sympy, filelock and nvidia-* wheels, exllamav3's tokenizers, ...) comes from the package
index in a second pass. That pass installs a lock made here with labwright.locks, exactly as the service venvs'
locks are made:

- pip resolves the plan's wheels, each given as ``name @ URL#sha256=HEX`` (pip downloads it once to read its
  requirements and checks the matrix's sha256 on the way), for the plan's CPython on manylinux x86_64 (plus the
  wheels' own platform tags), against the index (PyPI: PyTorch-index wheels' dependencies live there);
- every other file pip chose is pinned by the sha256 the index publishes (never one taken on arrival); the plan's
  packages are left out of the lock, since they are installed first by path and hash;
- the lock is kept in labwright's cache (``locks/``), keyed by the wheels' URLs and sha256s, the Python, the
  platforms and the index: every later deploy of the same stack installs exactly the same files.

The plan carries the lock to the target (``SwitchPlan.dependency_lock``), which installs it with
``--require-hashes --no-deps -r LOCK --index-url INDEX``: nothing is resolved there.

A plan whose wheels lie on the target (``--wheelhouse``, file:// URLs) gets no lock here: those files have no
publisher, so hashing them proves nothing (the rule of labwright.locks.find_links_hashes); the target installs the
wheelhouse's own ``requirements.lock`` (``labwright wheelhouse requirements`` writes one from the index's sha256s,
and ``labwright wheelhouse stack --stack NAME --out DIR`` writes one for a stack), and refuses a stack that needs
dependencies without one.

Where the lock cannot be made (the index or a wheel's URL unreachable) the switch is refused in one line naming the
index and the fix, exit 2, before anything runs, unless the user asks by name for unpinned dependencies
(``stack_unpinned_dependencies=true``, ``--unpinned-dependencies``): then no lock is made and the target resolves
them from the index without hashes, as before locks existed, saying so in its output and in the manifest.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from labwright.errors import BadInput, LabwrightError, SafetyCheckFailed
from labwright.locks import PYPI_SIMPLE, cached_lock, check_index, make_lock
from labwright.stacks.plan import SwitchPlan

UNPINNED_KEY = "stack_unpinned_dependencies"
UNPINNED_OPTION = "--unpinned-dependencies"


def platforms(plan: SwitchPlan) -> list[str]:
    """manylinux x86_64 (as the service wheelhouses) and the platform tags of the plan's own wheels (a GitHub build
    tagged linux_x86_64 must be accepted for pip to read its requirements)."""
    from labwright.wheelhouse import PLATFORMS

    found = list(PLATFORMS)
    for wheel in plan.wheels:
        try:
            tags = parse_wheel_filename(wheel.filename)[3]
        except InvalidWheelFilename:
            continue
        for tag in sorted(tags, key=str):
            if tag.platform != "any" and tag.platform not in found:
                found.append(tag.platform)
    return found


def requirements(plan: SwitchPlan) -> list[str]:
    """The plan's wheels as pip direct references, each with the matrix's sha256 for pip to check."""
    return [f"{w.package} @ {w.source.split('#', 1)[0]}#sha256={w.sha256}" for w in plan.wheels]


def _resolve(plan: SwitchPlan, index_url: str, root: Path | None, cached: bool) -> str:
    args = (requirements(plan), plan.python.rstrip("t"), platforms(plan), index_url)
    names = tuple(w.package for w in plan.wheels)
    if not cached:
        return make_lock(*args, exclude=names)
    return cached_lock(*args, root=root, exclude=names).read_text()


def lock_dependencies(plan: SwitchPlan, *, unpinned: bool = False, index_url: str = PYPI_SIMPLE,
                      root: Path | None = None, cached: bool = True) -> SwitchPlan:
    """``plan`` with the hashed lock of its wheels' dependencies (see the module docstring); unchanged for a plan whose
    wheels lie on the target; marked unpinned, with no lock, when ``unpinned``. BadInput (exit 2, one line naming the
    index and the fix) when the lock cannot be made; SafetyCheckFailed when a file is not the one published."""
    if unpinned:
        return replace(plan, dependency_lock="", dependency_index="", unpinned_dependencies=True)
    if plan.local:
        return plan
    local = [w for w in plan.wheels if not w.is_remote]
    if local:
        raise BadInput(f"stack {plan.stack}: {local[0].filename} lies on the target ({local[0].source}) while other "
                       "wheels are downloaded: put all of them in the wheelhouse, or none")
    index_url = check_index(index_url)
    try:
        text = _resolve(plan, index_url, root, cached)
    except SafetyCheckFailed as exc:
        said = str(exc)
        wheel = next((w for w in plan.wheels if said.startswith(f"{w.package} @ ")), None)
        if wheel is None:
            raise SafetyCheckFailed(f"stack {plan.stack}: {said}") from None
        got = re.search(r"its sha256 is ([0-9a-f?]+)", said)
        raise SafetyCheckFailed(f"stack {plan.stack}: {wheel.filename} from {wheel.source} has sha256 "
                                f"{got[1] if got else '?'}, not the {wheel.sha256} the matrix records: tampered with "
                                "or replaced on the way or at its publisher; nothing was installed") from None
    except LabwrightError as exc:
        reason = " ".join(str(exc).split())
        reason = reason.split(f" from {index_url}: ", 1)[-1]  # pip's own line, without the long requirement list
        gone = re.search(r"(?a)HTTP error (\d{3})", reason)
        stale = next((w for w in plan.wheels if w.source.split("#", 1)[0] in reason), None) if gone else None
        if gone and stale is not None:  # the matrix row, not the index: said as the target's download says it
            raise BadInput(f"{stale.package} {stale.version}: {stale.source} answered HTTP {gone[1]}; the matrix row "
                           "is stale: refresh it (labwright matrix refresh) or pass --wheelhouse with the file; "
                           "nothing was installed") from None
        raise BadInput(f"stack {plan.stack}: the hashed lock of what its wheels require cannot be made from "
                       f"{index_url} ({reason}): check that this machine reaches {index_url} and the wheels' URLs, "
                       f"then run again, or install them without hashes by name ({UNPINNED_KEY}=true, "
                       f"{UNPINNED_OPTION}); nothing was installed") from None
    return replace(plan, dependency_lock=text, dependency_index=index_url, unpinned_dependencies=False)


def unpinned_warning(plan: SwitchPlan) -> str:
    """What the controller says, loudly, for a plan whose dependencies will be installed without hashes."""
    return (f"stack {plan.stack}: {UNPINNED_KEY}: what its wheels require is resolved on the target from the index "
            "WITHOUT hashes (not pinned: docs/security.md, Every download pinned)")


def lock_target(out: Path) -> Path:
    """Where a stack's lock for ``out`` goes: ``requirements.lock`` in a directory, else the file ``out``; a path
    whose parent is not a directory is one line (BadInput)."""
    from labwright.locks import LOCK_NAME

    target = out / LOCK_NAME if out.is_dir() else out
    if not target.parent.is_dir():
        raise BadInput(f"--out {out}: {target.parent} is not a directory; create it or pass another path")
    return target


def plan_to_lock(stack: str, torch: str | None = None) -> SwitchPlan:
    """Stack ``stack``'s plan with its wheels from their matrix URLs (what its lock is made from)."""
    from labwright.stacks.from_matrix import plan_for_stack

    return plan_for_stack(stack, "/opt/labwright/lock/.venv", torch=torch)  # the venv only names an environment


def write_lock(stack: str, out: Path, torch: str | None = None, index_url: str = PYPI_SIMPLE) -> Path:
    """The hashed lock of what stack ``stack``'s wheels (from their matrix URLs) require, written to ``out`` (a file,
    or ``requirements.lock`` in a directory): a wheelhouse's lock for a stack switched with --wheelhouse."""
    from labwright.atomic import write_text_atomic

    target = lock_target(out)
    write_text_atomic(target, lock_dependencies(plan_to_lock(stack, torch), index_url=index_url).dependency_lock)
    return target


def main(argv: list[str] | None = None) -> int:
    """``python -m labwright.stacks.dependency_lock``: ``labwright wheelhouse stack`` under its old name, with one
    deprecation line on stderr (kept for one release)."""
    import sys

    from labwright.cli import main as cli_main
    from labwright.cli.vocab import deprecated

    deprecated("python -m labwright.stacks.dependency_lock", "labwright wheelhouse stack")
    return cli_main(["wheelhouse", "stack", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    raise SystemExit(main())
