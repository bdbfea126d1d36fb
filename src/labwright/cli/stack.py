"""`labwright stack`: Install, switch and roll back named engine stacks in a guest."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from labwright.errors import OperationFailed
from labwright.matrix.abi import EXAMPLES, ModuleReport, VerifyReport, verify_python
from labwright.matrix.abi_cache import AbiCache
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
