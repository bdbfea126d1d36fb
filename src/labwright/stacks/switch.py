"""The switch itself: build beside, verify, swap, restart, health-check, roll back by itself; and rollback.

Every step that can fail runs before the swap (fetch + hash check, build, ABI verifier): a failure there
removes the half-built environment and leaves the running stack exactly as it was. After the swap only the
service can fail, and then the previous environment is swapped back and restarted.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from labwright.errors import BadInput, LabwrightError, OperationFailed, SafetyCheckFailed
from labwright.stacks import build as builder
from labwright.stacks import service
from labwright.stacks.fetch import NoSpace, fetch_all, free_bytes
from labwright.stacks.layout import BUILDING, Entry, Layout, State, VenvPath, remove_tree
from labwright.stacks.plan import SwitchPlan
from labwright.stacks.service import HealthCheck

if TYPE_CHECKING:
    from labwright.matrix.abi import VerifyReport

Log = Callable[[str], None]


@dataclass
class Options:
    service: str | None = None
    health: HealthCheck = field(default_factory=HealthCheck)
    keep: int = 2
    base_python: str | None = None
    installer: str = "auto"
    create: bool = False  # allow a managed path that does not exist yet
    verify_imports: bool = True


@dataclass
class Outcome:
    changed: bool
    current: Entry | None
    previous: Entry | None
    message: str
    removed: list[str] = field(default_factory=list)


def check_options(options: Options) -> Options:
    if options.service:
        options.service = service.check_unit(options.service)
    service.check_health(options.health)
    if options.keep < 1:
        raise BadInput(f"--keep {options.keep}: keep at least 1 environment (2 keeps one to roll back to)")
    return options


def inspect_for_switch(layout: Layout, create: bool) -> VenvPath:
    found = layout.inspect()
    if found.kind == "absent" and not create:
        raise BadInput(f"--venv {layout.venv} does not exist; pass the venv the service runs from, or --create to "
                       "make a new managed one there")
    if found.kind == "directory" and not layout.same_filesystem():
        raise BadInput(f"--venv {layout.venv} is on another filesystem than {layout.root}, so it cannot be moved "
                       "aside atomically; pass --root on the same filesystem")
    return found


def switch(plan: SwitchPlan, options: Options, log: Log = print) -> Outcome:
    check_options(options)
    layout = Layout(plan.root, plan.venv)
    if options.service:
        service.require_systemctl(options.service)  # before any work: a restart is what the swap relies on
    with layout.locked():
        found = inspect_for_switch(layout, options.create)
        state = layout.read_state()
        env_dir = layout.env_dir(plan.env_id)
        if found.kind == "managed" and found.target == str(env_dir / "venv") and state.current is not None \
                and state.current.id == plan.env_id:
            return Outcome(False, state.current, state.previous, f"{plan.venv} already runs stack {plan.stack} "
                                                                 f"({plan.env_id}): nothing to do")
        reused = (env_dir / "venv").is_dir() and layout.manifest(env_dir / "venv") is not None \
            and not (env_dir / BUILDING).exists()
        if reused:
            log(f"reuse {env_dir} (built before)")
        else:
            _build(plan, options, layout, found, env_dir, log)
        _verify(plan, env_dir, options, log, remove=not reused, running=found)
        return _swap_and_check(plan, options, layout, state, found, env_dir, log)


def _build(plan: SwitchPlan, options: Options, layout: Layout, found: VenvPath, env_dir: Path, log: Log) -> None:
    python = builder.base_python(plan, found.target, options.base_python)
    builder.installer_command("python", options.installer)  # refuse a missing installer before any disk work
    if env_dir.exists():
        remove_tree(env_dir)  # a leftover from an interrupted build: start clean
    log(f"build {env_dir} (stack {plan.stack}, Python {plan.python}) beside {found.target or plan.venv}")
    try:
        env_dir.mkdir(parents=True)
        (env_dir / BUILDING).write_text(plan.venv)  # whose it is, for GC after an interrupted build
        wheels = fetch_all(plan.wheels, env_dir / "wheels", log)
        for wheel in wheels:
            checked = "sha256 ok" if wheel.checked else "sha256 not in the matrix, recorded"
            log(f"  {wheel.wheel.filename}: {checked}")
        builder.build(plan, wheels, env_dir, python, options.installer, log)
    except NoSpace:
        remove_tree(env_dir)
        free = free_bytes(layout.root) / (1 << 20)
        raise OperationFailed(f"no space left on device under {layout.root} while building stack {plan.stack} "
                              f"(only {free:.1f} MiB free without it): free space or pass --root on a bigger disk; the "
                              "half-built environment was removed, the running stack is untouched") from None
    except OSError as exc:
        remove_tree(env_dir)
        if exc.errno == errno.ENOSPC:
            raise OperationFailed(f"no space left on device under {layout.root} while building stack "
                                  f"{plan.stack}: free space or pass --root on a bigger disk; the running stack is "
                                  "untouched") from None
        raise OperationFailed(f"building {env_dir} failed ({exc}); the running stack is untouched") from None
    except BaseException:
        remove_tree(env_dir)
        raise


def _verify(plan: SwitchPlan, env_dir: Path, options: Options, log: Log, remove: bool, running: VenvPath) -> None:
    # Imported here: the verifier pulls in pyelftools, which `show --json`-less paths and unit tests of the
    # pure parts need not load.
    from labwright.matrix.abi import verify_python
    from labwright.matrix.abi_cache import AbiCache

    python = str(env_dir / "venv" / "bin" / "python")
    log(f"verify {python} (ABI verifier: torch symbols + real imports)")
    try:
        report = verify_python(python, None, do_import=options.verify_imports, cache=AbiCache())
    except LabwrightError as exc:
        problem = str(exc)
    else:
        problem = "" if report.ok else describe_failure(report)
        for module in report.modules:
            log(f"  {module.module}: {module.verdict}")
    if not problem:
        return
    if remove:
        remove_tree(env_dir)
    where = running.target or plan.venv
    raise SafetyCheckFailed(f"stack {plan.stack} refused before the swap: {problem}; {plan.venv} still runs "
                            f"{where}, untouched" + ("" if not remove else f" ({env_dir} removed)"))


def describe_failure(report: VerifyReport) -> str:
    """One line naming what the verifier found broken, with the first missing symbol or import error."""
    if report.torch_import is not None and not report.torch_import.ok:
        return f"torch {report.torch_version} itself does not import ({(report.torch_import.error or '').strip()})"
    broken = [m for m in report.modules if m.verdict != "ok"]
    first = broken[0]
    if first.missing:
        detail = f"{len(first.missing)} torch symbol(s) missing, e.g. {first.missing[0].demangled}"
    else:
        detail = (first.import_error or first.verdict).strip().splitlines()[0]
    built = f", built for torch {first.built_for_torch}" if first.built_for_torch else ""
    more = f" (and {len(broken) - 1} more broken)" if len(broken) > 1 else ""
    return f"{first.module} ({first.distribution} {first.version}{built}) against torch " \
           f"{report.torch_version}: {detail}{more}"


def _swap_and_check(plan: SwitchPlan, options: Options, layout: Layout, state: State, found: VenvPath,
                    env_dir: Path, log: Log) -> Outcome:
    previous = _current_entry(layout, state, found)
    if found.kind == "directory":
        log(f"adopt {plan.venv} (a plain venv) as the first managed environment")
        previous = layout.adopt()
    new = Entry(id=plan.env_id, path=str(env_dir / "venv"), stack=plan.stack)
    healthy, seen = _make_current(layout, state, new, previous, options, log)
    if not healthy:
        message = _roll_back_after_failure(plan, options, layout, state, new, previous, seen, log)
        raise OperationFailed(message)
    removed = layout.collect(state, options.keep)
    layout.write_state(state)
    for path in removed:
        log(f"removed old environment {path}")
    was = f" (previous: {previous.stack}, {previous.id})" if previous else ""
    return Outcome(True, state.current, state.previous, f"{plan.venv} now runs stack {plan.stack}{was}", removed)


def _current_entry(layout: Layout, state: State, found: VenvPath) -> Entry | None:
    """The running environment as an Entry, also when the state file does not know it (a symlink we found)."""
    if found.target is None or found.kind == "directory":
        return None
    if state.current is not None and os.path.realpath(state.current.path) == os.path.realpath(found.target):
        return state.current
    manifest = layout.manifest(found.target) or {}
    return Entry(id=str(manifest.get("id", Path(found.target).name)), path=found.target,
                 stack=str(manifest.get("stack", "unknown")), managed=found.kind == "managed")


def _make_current(layout: Layout, state: State, entry: Entry, previous: Entry | None, options: Options,
                  log: Log) -> tuple[bool, str]:
    """Swap to ``entry``, record it (before the restart: a crash now leaves a state that matches the link),
    restart, and say whether the service is healthy."""
    log(f"swap {layout.venv} -> {entry.path}")
    layout.point_to(entry.path)
    state.became_current(entry, previous)
    layout.write_state(state)
    return _restart_and_wait(options, log)


def _restart_and_wait(options: Options, log: Log) -> tuple[bool, str]:
    if options.service:
        log(f"restart {options.service}")
        try:
            restarted = service.restart_owned(options.service, options.health)
        except OperationFailed as exc:
            return False, str(exc)  # a unit that will not restart on this stack is as unhealthy as it gets
        if restarted.attempts > 1:
            log(f"  systemd's start limit refused the restart; reset-failed, restarted on attempt {restarted.attempts}")
        if options.health.configured:
            log(f"health {options.health.describe()}: {'ok' if restarted.healthy else 'FAILED'} "
                f"({restarted.seen}, {restarted.waited_s:.2f} s)")
        return restarted.healthy, restarted.seen
    if not options.health.configured:
        return True, "no health check"
    healthy, seen, waited = service.wait_healthy(options.health)
    log(f"health {options.health.describe()}: {'ok' if healthy else 'FAILED'} ({seen}, {waited:.2f} s)")
    return healthy, seen


def _roll_back_after_failure(plan: SwitchPlan, options: Options, layout: Layout, state: State, failed: Entry,
                             previous: Entry | None, seen: str, log: Log) -> str:
    head = f"stack {plan.stack} failed its health check after the swap ({options.health.describe()}: {seen})"
    if previous is None:
        os.unlink(layout.venv)
        state.current, state.history = None, [e for e in state.history if e.path != failed.path]
        layout.write_state(state)
        remove_tree(Path(failed.path).parent)
        return f"{head}; there was no previous environment, so {plan.venv} was removed"
    log(f"roll back: swap {plan.venv} -> {previous.path}")
    layout.point_to(previous.path)
    older = [e for e in state.history[2:] if Path(e.path, "bin").is_dir()]
    state.current, state.previous = previous, older[0] if older else None
    state.history = [e for e in state.history if e.path != failed.path]
    layout.write_state(state)
    remove_tree(Path(failed.path).parent)
    try:
        healthy, again = _restart_and_wait(options, log)
    except LabwrightError as exc:
        healthy, again = False, str(exc)
    verdict = "healthy again" if healthy else f"but it is unhealthy too ({again})"
    return f"{head}; rolled back by itself to stack {previous.stack} ({previous.id}), {verdict}"


def rollback(root: str, venv: str, options: Options, log: Log = print) -> Outcome:
    """Swap the managed path back to the previous environment and restart; the current one becomes previous."""
    check_options(options)
    layout = Layout(root, venv)
    with layout.locked():
        found = layout.inspect()
        if found.kind not in ("managed", "linked"):
            raise BadInput(f"--venv {venv}: not a labwright-managed symlink ({found.kind}); nothing to roll back")
        state = layout.read_state()
        previous = state.previous
        if previous is None or not Path(previous.path, "bin").is_dir():
            raise BadInput(f"--venv {venv}: no previous environment to roll back to (switched once, or it was "
                           "garbage-collected: keep more with --keep)")
        current = _current_entry(layout, state, found)
        healthy, seen = _make_current(layout, state, previous, current, options, log)
        if not healthy:
            raise OperationFailed(f"rolled back {venv} to stack {previous.stack} ({previous.id}), but it fails its "
                                  f"health check ({options.health.describe()}: {seen}); `stack rollback` again "
                                  f"returns to {current.stack if current else 'the other one'}")
        return Outcome(True, state.current, state.previous,
                       f"{venv} rolled back to stack {previous.stack} ({previous.id})")
