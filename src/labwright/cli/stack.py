"""`labwright stack`: Install, switch and roll back named engine stacks in a guest."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from labwright.errors import BadInput, OperationFailed
from labwright.matrix.abi import EXAMPLES, ModuleReport, VerifyReport, verify_python
from labwright.matrix.abi_cache import AbiCache
from labwright.stacks import show as show_module
from labwright.stacks import switch as switch_module
from labwright.stacks.dependency_lock import UNPINNED_OPTION, lock_dependencies, unpinned_warning
from labwright.stacks.from_matrix import describe_plan, plan_for_stack
from labwright.stacks.layout import Entry, Layout
from labwright.stacks.plan import DEFAULT_ROOT, check_root, check_venv_path
from labwright.stacks.service import HealthCheck
from labwright.ui import stdout

NAME = "stack"
HELP = "Install, switch and roll back named engine stacks in a guest."

app = typer.Typer(no_args_is_help=True, help=HELP)


@app.command()
def verify(
    python: str = typer.Option(None, "--python", help="The environment's interpreter (or its venv directory)."),
    site_packages: Path = typer.Option(None, "--site-packages", help="A site-packages directory holding torch."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON (schema labwright.stack-verify/1)."),
    no_import: bool = typer.Option(False, "--no-import", help="Only check symbols; do not import the modules."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Ignore and do not write the verifier's cache."),
    timeout: float = typer.Option(60.0, "--timeout", help="Seconds one module's import may take.", min=1),
) -> None:
    """Check every compiled extension that needs torch against the torch installed beside it.

    Reads each extension's undefined torch symbols and looks them up in torch/lib's exports, then really imports
    it (torch first) with the environment's Python. Exit 0 when all are ok, 1 when any is broken, 2 on bad input.

    Example: labwright stack verify --python /opt/tabbyapi/.venv/bin/python
    """
    if not 1 <= timeout <= 3600:  # also nan; inf is > 3600
        raise BadInput(f"--timeout {timeout}: give the seconds one module's import may take, 1 to 3600 (default 60)")
    report = verify_python(python, site_packages, do_import=not no_import, cache=AbiCache(enabled=not no_cache),
                           timeout=timeout)
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=2))
    else:
        _print(report)
    if not report.ok:
        # An error, not typer.Exit: the CLI's main() turns LabwrightError into the exit code and one line.
        where = report.python or report.site_dirs[0]
        if report.torch_import is not None and not report.torch_import.ok:
            reason = (report.torch_import.error or "no error text").strip().splitlines()[0]
            raise OperationFailed(f"{where}: torch {report.torch_version} itself does not import ({reason}); "
                                  "repair or reinstall torch there")
        summary = report.to_json()["summary"]
        raise OperationFailed(f"{where}: {summary['broken']} of {summary['checked']} extension(s) broken against "
                              f"torch {report.torch_version}; install the wheels built for it (see the report)")


def _print(report: VerifyReport) -> None:
    abi = {True: ", cxx11 ABI", False: ", pre-cxx11 ABI", None: ""}[report.torch_cxx11_abi]
    stdout.print(f"torch {report.torch_version or '(unknown version)'} at {escape(report.torch_root)}{abi}")
    if report.torch_import is not None and not report.torch_import.ok:
        stdout.print(f"[red]torch itself does not import:[/] {escape(report.torch_import.error or '')}")
    for skipped in report.skipped:
        stdout.print(f"[dim]skipped {escape(skipped['reason'])}[/]", soft_wrap=True)
    if not report.modules:
        stdout.print("no compiled extension in this environment links torch: nothing to verify")
        return
    rows = [[escape(m.module), escape(_dist(m)), escape(m.built_for_torch or "?"), _verdict(m), _symbols(m),
             _import(m)] for m in report.modules]
    grid = Table(title=f"extensions linking torch ({escape(report.python or 'static check only')})",
                 title_justify="left")
    for column in ("module", "distribution", "built for torch", "verdict", "torch symbols", "import"):
        # fold, not ellipsis: a cut-off module or wheel version is useless, a wrapped one still reads.
        grid.add_column(column, overflow="fold")
    for row in rows:
        grid.add_row(*row)
    stdout.print(grid)
    # Details below the table, one line each, so long symbol names and errors are not squeezed into a cell.
    for module in report.modules:
        for line in _details(module):
            stdout.print(line, soft_wrap=True)
    summary = report.to_json()["summary"]
    colour = "green" if report.ok else "red"
    stdout.print(f"[{colour}]{summary['ok']} ok, {summary['broken']} broken[/] of {summary['checked']} "
                 f"({summary['cached']} from cache) in {report.elapsed_s:.2f} s")


def _dist(module: ModuleReport) -> str:
    if module.distribution is None:
        return "(no dist-info)"
    return f"{module.distribution} {module.version}"


def _verdict(module: ModuleReport) -> str:
    colour = "green" if module.verdict == "ok" else "red"
    return f"[{colour}]{module.verdict}[/]"


def _symbols(module: ModuleReport) -> str:
    if module.missing:
        return f"[red]{len(module.missing)} of {module.torch_symbols} missing[/]"
    if module.late_bound:
        return f"{module.torch_symbols} resolve late"
    return f"{module.torch_symbols} resolve"


def _import(module: ModuleReport) -> str:
    if not module.import_checked:
        return "not run"
    if module.import_ok:
        return "ok (cached)" if module.import_cached else "ok"
    return "[red]crashed[/]" if module.verdict == "import-crashed" else "[red]failed[/]"


def _details(module: ModuleReport) -> list[str]:
    name = escape(module.module)
    lines = []
    for missing in module.missing[:EXAMPLES]:
        line = f"{name}: missing {escape(missing.demangled)}"
        if missing.torch_has_instead:
            line += f" [dim](torch has {escape(missing.torch_has_instead[0])})[/]"
        elif missing.exported_by_unlinked:
            line += f" [dim](only in {escape(', '.join(missing.exported_by_unlinked))}, which it does not link)[/]"
        lines.append(line)
    if len(module.missing) > EXAMPLES:
        lines.append(f"{name}: … and {len(module.missing) - EXAMPLES} more missing (--json lists all)")
    if module.import_checked and not module.import_ok:
        lines.append(f"{name}: import: {escape(module.import_error or '')}")
    lines.extend(f"{name}: [yellow]warning:[/] {escape(w)}" for w in module.warnings)
    return lines


# -- switch / rollback / show ----------------------------------------------------------------------------------
VENV_HELP = "The venv path the service runs from (a labwright-managed symlink after the first switch)."
ROOT_HELP = "Where environments are built, one directory each."


def _log(line: str) -> None:
    stdout.print(escape(line), soft_wrap=True)


def _options(service: str | None, health: str | None, health_cmd: str | None, health_timeout: float,
             **extra: object) -> switch_module.Options:
    options = switch_module.Options(service=service, health=HealthCheck(url=health, command=health_cmd,
                                                                         timeout_s=health_timeout))
    for key, value in extra.items():
        setattr(options, key, value)
    return switch_module.check_options(options)


@app.command()
def switch(
    to: str = typer.Option(..., "--to", help="Name of the stack in wheels_matrix/stacks.toml (labwright matrix "
                                             "stacks)."),
    venv: str = typer.Option(..., "--venv", help=VENV_HELP),
    service: str = typer.Option(None, "--service", help="systemd unit to restart after the swap."),
    health: str = typer.Option(None, "--health", help="HTTP URL that must answer 2xx/3xx after the restart."),
    health_cmd: str = typer.Option(None, "--health-cmd", help="Shell command that must exit 0 after the restart."),
    health_timeout: float = typer.Option(60.0, "--health-timeout", help="Seconds the service gets to be healthy."),
    wheelhouse: str = typer.Option(None, "--wheelhouse", help="Directory holding the wheels (offline install)."),
    torch: str = typer.Option(None, "--torch", help="Resolve the stack with this torch instead of its own."),
    root: str = typer.Option(DEFAULT_ROOT, "--root", help=ROOT_HELP),
    keep: int = typer.Option(2, "--keep", help="Environments to keep for this path, the current one included."),
    base_python: str = typer.Option(None, "--base-python", help="Interpreter to create the venv with."),
    installer: str = typer.Option("auto", "--installer", help="auto (uv when present, else pip), uv or pip."),
    create: bool = typer.Option(False, "--create", help="Allow a --venv path that does not exist yet."),
    dry: bool = typer.Option(False, "--dry", help="Print the plan and change nothing."),
    as_json: bool = typer.Option(False, "--json", help="Print the outcome (or with --dry the plan) as JSON."),
    unpinned_dependencies: bool = typer.Option(
        False, UNPINNED_OPTION, help="Install what the stack's wheels require WITHOUT a hashed lock (resolved from "
                                     "the index; said loudly). Default: a hashed lock made here, or refused."),
) -> None:
    """Build stack NAME beside the running venv, verify it, swap the symlink, restart, health-check.

    Any failure before the swap (download, sha256, build, ABI verifier) leaves the running stack untouched; a
    failed health check after it swaps back and restarts by itself. Exit 0 switched (or already there), 1 failed
    or refused, 2 bad input.

    Example: labwright stack switch --to A --venv /opt/tabbyapi/.venv --service tabbyapi
    --health http://127.0.0.1:5000/health
    """
    if wheelhouse is not None and not wheelhouse.startswith("/"):
        wheelhouse = str(Path(wheelhouse).resolve())
    # The options first: a bad one is named as such even when the stack itself is refused (a wheel without a
    # recorded sha256, say).
    options = _options(service, health, health_cmd, health_timeout, keep=keep, base_python=base_python,
                       installer=installer, create=create)
    plan = plan_for_stack(to, venv, root=root, wheelhouse=wheelhouse, torch=torch)
    # What the wheels require: a hashed lock made here from the sha256s PyPI publishes (docs/stacks.md), or refused.
    plan = lock_dependencies(plan, unpinned=unpinned_dependencies)
    if plan.unpinned_dependencies:
        print(f"labwright: WARNING: {unpinned_warning(plan)}", file=sys.stderr)
    if dry:
        # The real run's own checks, before it writes anything: a dry run approves only what would run.
        found = switch_module.preflight(plan, options)
        lines = describe_plan(plan, found, options.service, options.health, keep)
        if as_json:
            typer.echo(json.dumps({"venv": venv, "stack": to, "dry": True, "plan": lines}, indent=2))
            return
        for line in lines:
            _log(line)
        return
    outcome = switch_module.switch(plan, options, _quiet_log if as_json else _log)
    if as_json:
        typer.echo(json.dumps(_outcome_json(venv, outcome), indent=2))
        return
    _log(outcome.message)


@app.command()
def rollback(
    venv: str = typer.Option(..., "--venv", help=VENV_HELP),
    service: str = typer.Option(None, "--service", help="systemd unit to restart after the swap."),
    health: str = typer.Option(None, "--health", help="HTTP URL that must answer 2xx/3xx after the restart."),
    health_cmd: str = typer.Option(None, "--health-cmd", help="Shell command that must exit 0 after the restart."),
    health_timeout: float = typer.Option(60.0, "--health-timeout", help="Seconds the service gets to be healthy."),
    root: str = typer.Option(DEFAULT_ROOT, "--root", help=ROOT_HELP),
    dry: bool = typer.Option(False, "--dry", help="Say which stack it would go back to; change nothing."),
    as_json: bool = typer.Option(False, "--json", help="Print the outcome as JSON."),
) -> None:
    """Swap the venv back to the previous stack and restart; the stack it leaves becomes the previous one.

    Example: labwright stack rollback --venv /opt/tabbyapi/.venv --service tabbyapi
    """
    options = _options(service, health, health_cmd, health_timeout)
    if dry:
        outcome = _rollback_plan(check_root(root), check_venv_path(venv), options)
    else:
        outcome = switch_module.rollback(check_root(root), check_venv_path(venv), options,
                                         _quiet_log if as_json else _log)
    if as_json:
        typer.echo(json.dumps(_outcome_json(venv, outcome) | {"dry": dry}, indent=2))
        return
    _log(outcome.message)


def _quiet_log(line: str) -> None:
    """--json: the progress lines go to stderr, stdout is the JSON document."""
    print(line, file=sys.stderr)


def _outcome_json(venv: str, outcome: switch_module.Outcome) -> dict[str, object]:
    def entry(e: Entry | None) -> dict[str, object] | None:
        return None if e is None else {"id": e.id, "stack": e.stack, "path": e.path, "at": e.at}

    return {"venv": venv, "dry": False, "changed": outcome.changed, "current": entry(outcome.current),
            "previous": entry(outcome.previous), "removed": outcome.removed, "message": outcome.message}


def _rollback_plan(root: str, venv: str, options: switch_module.Options) -> switch_module.Outcome:
    """`rollback --dry`: the same refusals as the real one, from the state on disk; nothing is written."""
    layout = Layout(root, venv)
    found = layout.inspect()
    if found.kind not in ("managed", "linked"):
        raise BadInput(f"--venv {venv}: not a labwright-managed symlink ({found.kind}), so there is nothing to "
                       "roll back to; switch it first with `labwright stack switch`")
    state = layout.read_state()
    previous = state.previous
    if previous is None or not Path(previous.path, "bin").is_dir():
        raise BadInput(f"--venv {venv}: no previous environment to roll back to; nothing would change")
    restart = f", restart {options.service}" if options.service else ""
    return switch_module.Outcome(False, state.current, previous,
                                 f"would swap {venv} back to stack {previous.stack} ({previous.id}){restart}; "
                                 "nothing changed (dry run)")


@app.command()
def show(
    venv: str = typer.Option(..., "--venv", help=VENV_HELP),
    root: str = typer.Option(DEFAULT_ROOT, "--root", help=ROOT_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (schema labwright.stack-show/1)."),
    no_import: bool = typer.Option(False, "--no-import", help="Only check symbols; do not import the modules."),
) -> None:
    """Current and previous stacks of a venv: each package's version and the ABI verifier's verdict.

    Exit 1 when the current stack has a broken module.

    Example: labwright stack show --venv /opt/tabbyapi/.venv
    """
    data = show_module.show(check_root(root), check_venv_path(venv), do_import=not no_import)
    if as_json:
        typer.echo(json.dumps(data, indent=2))
    else:
        for line in show_module.render(data):
            _log(line)
    current = data["environments"][:1]
    if current and not current[0]["ok"]:
        raise OperationFailed(f"{venv}: the current stack {current[0]['stack']} has broken modules (see above); "
                              "`labwright stack rollback` returns to the previous one")
