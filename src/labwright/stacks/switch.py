"""The switch itself: build beside, verify, swap, restart, health-check, roll back by itself; and rollback.

Every step that can fail runs before the swap (fetch + hash check, build, ABI verifier): a failure there
removes the half-built environment and leaves the running stack exactly as it was. After the swap only the
service can fail, and then the previous environment is swapped back and restarted.
"""

from __future__ import annotations

import errno
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from labwright.errors import BadInput, LabwrightError, OperationFailed, SafetyCheckFailed
from labwright.shell import join
from labwright.stacks import build as builder
from labwright.stacks import service
from labwright.stacks.fetch import NoSpace, check_local_source, fetch_all, free_bytes
from labwright.stacks.layout import BUILDING, Entry, Layout, State, VenvPath, remove_tree
from labwright.stacks.plan import SwitchPlan
from labwright.stacks.service import HealthCheck

if TYPE_CHECKING:
    from labwright.matrix.abi import VerifyReport

Log = Callable[[str], None]

# Test hook for fault injection (tests/integration/test_stack_faults.py): with LABWRIGHT_FAULT_AT=<step> in its
# environment, the switch SIGKILLs itself on reaching that step, exactly as a kill -9 or an OOM kill would.
FAULT_ENV = "LABWRIGHT_FAULT_AT"
FAULT_STEPS = ("build", "verify", "swap", "restart", "health", "rollback")


def fault_point(step: str, log: Log | None = None) -> None:
    """SIGKILL this process when ``LABWRIGHT_FAULT_AT`` names ``step`` (a test hook; see FAULT_STEPS)."""
    if os.environ.get(FAULT_ENV) == step:
        if log is not None:
            log(f"{FAULT_ENV}={step}: killing myself (SIGKILL) here")
        os.kill(os.getpid(), signal.SIGKILL)


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


def _reusable(layout: Layout, env_dir: Path) -> bool:
    return (env_dir / "venv").is_dir() and layout.manifest(env_dir / "venv") is not None \
        and not (env_dir / BUILDING).exists()


def preflight(plan: SwitchPlan, options: Options) -> VenvPath:
    """Every check a switch makes before it writes anything (the root, its lock, a build directory): the real
    run starts with it and ``--dry`` runs exactly it, so a dry run approves only what the real one would do."""
    check_options(options)
    layout = Layout(plan.root, plan.venv)
    if options.service:
        service.require_systemctl(options.service)  # before any work: a restart is what the swap relies on
    found = inspect_for_switch(layout, options.create)
    if options.installer not in builder.INSTALLERS:
        raise BadInput(f"--installer {options.installer!r}: use one of {', '.join(builder.INSTALLERS)}")
    env_dir = layout.env_dir(plan.env_id)
    if options.base_python or not _reusable(layout, env_dir):
        builder.base_python(plan, found.target, options.base_python)
    if not _reusable(layout, env_dir):
        builder.installer_command("python", options.installer)  # uv asked for and absent, no pip at all
        for wheel in plan.wheels:
            check_local_source(wheel)
    return found


def switch(plan: SwitchPlan, options: Options, log: Log = print, *, swap: bool = True) -> Outcome:
    """Build (or reuse) and verify the plan's environment beside the running one, then swap, restart and check
    health (``swap=False``: stop after the verify, see ``build_only``)."""
    preflight(plan, options)
    layout = Layout(plan.root, plan.venv)
    with layout.locked():
        found = inspect_for_switch(layout, options.create)
        state = reconcile(layout, layout.read_state(), found, log)
        env_dir = layout.env_dir(plan.env_id)
        if found.kind == "managed" and found.target == str(env_dir / "venv") and state.current is not None \
                and state.current.id == plan.env_id:
            if not swap:
                return Outcome(False, state.current, state.previous, f"{plan.venv} already has stack {plan.stack} "
                                                                     f"({plan.env_id}) in place: nothing to build")
            if state.current.pending:
                return _finish_interrupted(plan, options, layout, state, log)
            return Outcome(False, state.current, state.previous, f"{plan.venv} already runs stack {plan.stack} "
                                                                 f"({plan.env_id}): nothing to do")
        reused = _reusable(layout, env_dir)
        if reused:
            log(f"reuse {env_dir} (built before)")
        else:
            _build(plan, options, layout, found, env_dir, log)
        _verify(plan, env_dir, options, log, remove=not reused, running=found)
        if not swap:
            return Outcome(False, state.current, state.previous,
                           f"stack {plan.stack} built and verified in {env_dir}; {plan.venv} not switched yet")
        return _swap_and_check(plan, options, layout, state, found, env_dir, log)


def build_only(plan: SwitchPlan, options: Options, log: Log = print) -> Outcome:
    """Build (or reuse) and verify the plan's environment beside the running one, and stop there: nothing is swapped
    or restarted. The pyinfra operation runs this first when it snapshots the guest, so the snapshot is taken once
    the new stack is known good and a refused stack never pauses the service (a snapshot on LXD's dir pool freezes
    the guest); the ``switch`` that follows reuses the environment."""
    return switch(plan, options, log, swap=False)


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
            log(f"  {wheel.wheel.filename}: sha256 ok")
        builder.build(plan, wheels, env_dir, python, options.installer, log,
                      midway=lambda: fault_point("build", log))
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
    fault_point("verify", log)
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
    if state.current is not None:
        state.current.pending = False
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
    """Swap to ``entry``, record it as pending (before the restart: a crash now leaves a state that matches the
    link, and the next run finishes the job), restart, and say whether the service is healthy."""
    log(f"swap {layout.venv} -> {entry.path}")
    layout.point_to(entry.path)
    fault_point("swap", log)  # the link moved, the state does not know yet: `reconcile` repairs that
    entry.pending = bool(options.service or options.health.configured)
    state.became_current(entry, previous)
    layout.write_state(state)
    fault_point("restart", log)
    return _restart_and_wait(options, log)


def _confirm(layout: Layout, state: State) -> None:
    if state.current is not None and state.current.pending:
        state.current.pending = False
        layout.write_state(state)


def reconcile(layout: Layout, state: State, found: VenvPath, log: Log) -> State:
    """Make the state follow the symlink when a run was killed between the swap and its record: the link is the
    truth; what it points at becomes current (pending: its service was not restarted onto it, so the next run
    restarts and checks it), and what the state called current becomes previous."""
    if found.kind != "managed" or found.target is None:
        return state  # a link outside this root (or none): no run under this root swapped it
    target = os.path.realpath(found.target)
    if state.current is not None and os.path.realpath(state.current.path) == target:
        return state
    known = [e for e in (state.previous, *state.history) if e is not None and os.path.realpath(e.path) == target]
    if known:
        entry = Entry(**{**known[0].__dict__})
    else:
        manifest = layout.manifest(found.target)
        if manifest is None:
            return state  # a venv labwright never switched to (linked by hand): the switch adopts it as previous
        entry = Entry(id=str(manifest.get("id", Path(found.target).parent.name)), path=found.target,
                      stack=str(manifest.get("stack", "unknown")), managed=found.kind == "managed")
    was = state.current
    log(f"{layout.venv} points to {found.target}, which the state did not record (a run was killed after its "
        f"swap): recording it as current, its restart not yet confirmed")
    entry.pending = True
    state.became_current(entry, was)
    layout.write_state(state)
    return state


def _finish_interrupted(plan: SwitchPlan, options: Options, layout: Layout, state: State, log: Log) -> Outcome:
    """The link already points at this plan's environment but its restart was never confirmed (a run was
    killed after the swap): restart and check now, and roll back by itself as a switch would."""
    current = state.current
    assert current is not None
    log(f"{plan.venv} was swapped to stack {plan.stack} by a run that did not finish: restart and check it now")
    healthy, seen = _restart_and_wait(options, log)
    if not healthy:
        message = _roll_back_after_failure(plan, options, layout, state, current, state.previous, seen, log)
        raise OperationFailed(message)
    _confirm(layout, state)
    return Outcome(True, state.current, state.previous, f"{plan.venv} now runs stack {plan.stack} (an "
                                                        "interrupted switch finished)")


def _restart_and_wait(options: Options, log: Log) -> tuple[bool, str]:
    if options.service:
        log(f"restart {options.service}")
        try:
            attempts = service.restart_unit(options.service)
        except OperationFailed as exc:
            return False, str(exc)  # a unit that will not restart on this stack is as unhealthy as it gets
        if attempts > 1:
            log(f"  systemd's start limit refused the restart; reset-failed, restarted on attempt {attempts}")
    fault_point("health", log)
    if not options.health.configured:
        return True, "no health check"
    healthy, seen, waited = service.wait_healthy(options.health, unit=options.service)
    log(f"health {options.health.describe()}: {'ok' if healthy else 'FAILED'} ({seen}, {waited:.2f} s)")
    return healthy, seen


def _restart_again(options: Options, log: Log) -> tuple[bool, str]:
    """Restart and check; once more when that fails (a restart that raced something else under load, a health
    deadline a loaded machine missed): a rollback exists to leave the service serving."""
    try:
        healthy, seen = _restart_and_wait(options, log)
        if not healthy and options.service:
            log(f"{options.service} not healthy after the restart ({seen}): restart it once more")
            healthy, seen = _restart_and_wait(options, log)
    except LabwrightError as exc:
        healthy, seen = False, str(exc)
    return healthy, seen


def restore_command(layout: Layout, options: Options) -> str:
    """The exact command that puts a service back on its stack: restart it where it now points."""
    if options.service:
        return f"systemctl reset-failed {options.service}; systemctl restart {options.service}"
    return f"restart what runs from {layout.venv}"


def rollback_command(layout: Layout, options: Options) -> str:
    """The exact command that flips a managed path back (from the bundle in a guest, else labwright's CLI)."""
    args = ["rollback", "--venv", str(layout.venv), "--root", str(layout.root)]
    if options.service:
        args += ["--service", options.service]
    if options.health.url:
        args += ["--health", options.health.url]
    if options.health.command:
        args += ["--health-cmd", options.health.command]
    bundle = builder.running_bundle()
    prefix = ["python3", bundle] if bundle else ["labwright", "stack"]
    return join([*prefix, *args])


def _roll_back_after_failure(plan: SwitchPlan, options: Options, layout: Layout, state: State, failed: Entry,
                             previous: Entry | None, seen: str, log: Log) -> str:
    head = f"stack {plan.stack} failed its health check after the swap ({options.health.describe()}: {seen})"
    fault_point("rollback", log)
    if previous is None:
        os.unlink(layout.venv)
        state.current, state.history = None, [e for e in state.history if e.path != failed.path]
        layout.write_state(state)
        remove_tree(Path(failed.path).parent)
        return f"{head}; there was no previous environment, so {plan.venv} was removed"
    log(f"roll back: swap {plan.venv} -> {previous.path}")
    layout.point_to(previous.path)
    older = [e for e in state.history[2:] if Path(e.path, "bin").is_dir()]
    previous.pending = bool(options.service or options.health.configured)
    state.current, state.previous = previous, older[0] if older else None
    state.history = [e for e in state.history if e.path != failed.path]
    layout.write_state(state)
    remove_tree(Path(failed.path).parent)
    healthy, again = _restart_again(options, log)
    if healthy:
        _confirm(layout, state)
        return f"{head}; rolled back by itself to stack {previous.stack} ({previous.id}), healthy again"
    unit = options.service or "the service"
    return (f"{head}; rolled back by itself to stack {previous.stack} ({previous.id}), but {unit} is DOWN there "
            f"too ({again}); {plan.venv} -> {previous.path}; see `journalctl -u {unit} -n 50`, then restore it "
            f"with `{restore_command(layout, options)}`")


def rollback(root: str, venv: str, options: Options, log: Log = print) -> Outcome:
    """Swap the managed path back to the previous environment and restart; the current one becomes previous."""
    check_options(options)
    layout = Layout(root, venv)
    with layout.locked():
        found = layout.inspect()
        if found.kind not in ("managed", "linked"):
            raise BadInput(f"--venv {venv}: not a labwright-managed symlink ({found.kind}), so there is nothing to "
                           "roll back to; switch it first with `labwright stack switch`")
        state = reconcile(layout, layout.read_state(), found, log)
        previous = state.previous
        if previous is None or not Path(previous.path, "bin").is_dir():
            raise BadInput(f"--venv {venv}: no previous environment to roll back to (switched once, or it was "
                           "garbage-collected: keep more with --keep)")
        current = _current_entry(layout, state, found)
        log(f"swap {layout.venv} -> {previous.path}")
        layout.point_to(previous.path)
        previous.pending = bool(options.service or options.health.configured)
        state.became_current(previous, current)
        layout.write_state(state)
        healthy, seen = _restart_again(options, log)
        if not healthy:
            unit = options.service or "the service"
            back = current.stack if current else "the other one"
            raise OperationFailed(f"rolled back {venv} to stack {previous.stack} ({previous.id}), but {unit} is DOWN "
                                  f"on it ({options.health.describe()}: {seen}); see `journalctl -u {unit} -n 50`; "
                                  f"to return to stack {back} run `{rollback_command(layout, options)}`")
        _confirm(layout, state)
        return Outcome(True, state.current, state.previous,
                       f"{venv} rolled back to stack {previous.stack} ({previous.id})")
