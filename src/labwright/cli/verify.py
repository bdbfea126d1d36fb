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
    # stderr is held back: a pytest usage error (exit 4: an unknown option, a missing file) prints pytest's usage
    # block there, and is said here in one line; any other stderr is passed on as pytest wrote it.
    proc = subprocess.run(argv, stderr=subprocess.PIPE, text=True, errors="replace")
    if proc.returncode == USAGE_ERROR:
        raise BadInput(f"verify {suite}: {usage_error(proc.stderr)}; see `labwright verify {suite} --help` "
                       "(the suite's options) and testinfra's --hosts")
    sys.stderr.write(proc.stderr)
    raise typer.Exit(proc.returncode if proc.returncode in (0, 1) else 2)


#: pytest.ExitCode.USAGE_ERROR (src/_pytest/config/__init__.py)
USAGE_ERROR = 4


def usage_error(stderr: str) -> str:
    """The one line of pytest's usage-error output that says what was wrong: argparse's "...: error: X" (an
    unknown or malformed option) or pytest's own "ERROR: X" (a file or directory not found)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in lines:
        if ": error: " in line:
            return line.split(": error: ", 1)[1]
    for line in lines:
        if line.startswith("ERROR: ") and not line.startswith("ERROR: usage:"):
            return line[len("ERROR: "):]
    return lines[-1] if lines else "pytest refused the arguments"
