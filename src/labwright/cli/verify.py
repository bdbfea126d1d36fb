"""`labwright verify SUITE [PYTEST ARGS]`: run a deploy's shipped testinfra suite (labwright/verify/test_SUITE.py).

    labwright verify base --hosts=lxc://lw-node1
    labwright verify llamacpp --hosts=ssh://root@llm1 --llamacpp-model=/srv/models/q.gguf
    labwright verify --path tabbyapi          # the file, for running pytest yourself

Everything after SUITE goes to pytest (testinfra's --hosts, --sudo, the suite's own options: `labwright verify base
--help`). Exit codes: 0 every check passed, 1 a check failed, 2 bad input (unknown suite, pytest usage error).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import typer

from labwright.errors import BadInput
from labwright.paths import VERIFY_SUITES, verify_suite

NAME = "verify"
HELP = "Run a deploy's shipped testinfra suite against your hosts."

#: A single command, not a group: registered with app.command (see labwright.cli.register).
CONTEXT = {"allow_extra_args": True, "ignore_unknown_options": True}


def command(
    ctx: typer.Context,
    suite: str = typer.Argument(None, help=f"One of: {', '.join(VERIFY_SUITES)}."),
    path: bool = typer.Option(False, "--path", help="Print the suite's file and exit."),
) -> None:
    """Run the testinfra suite of a deploy (base, llamacpp, tabbyapi, ...) against --hosts."""
    if suite is None:
        for name in VERIFY_SUITES:
            typer.echo(f"{name}\t{verify_suite(name)}")
        return
    file = verify_suite(suite)
    if path:
        typer.echo(str(file))
        return
    if importlib.util.find_spec("testinfra") is None:
        raise BadInput("labwright verify needs pytest-testinfra: pip install 'labwright[verify]' (or "
                       "uv tool install 'labwright[verify]')")
    # --rootdir and an empty -c: the suite runs the same from any directory, whatever pytest config is there.
    argv = [sys.executable, "-m", "pytest", "-c", "/dev/null", "--rootdir", str(file.parent), "-p", "no:cacheprovider",
            str(file), *ctx.args]
    code = subprocess.call(argv)
    raise typer.Exit(code if code in (0, 1) else 2)
