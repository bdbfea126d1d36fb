"""`labwright verify SUITE [PYTEST ARGS]`: run a deploy's shipped testinfra suite (labwright/verify/test_SUITE.py).

    labwright verify base --hosts=@lxd/lw-node1
    labwright verify base --hosts=@incus/lw-node1
    labwright verify llamacpp --hosts=@ssh/root@llm1 --llamacpp-model=/srv/models/q.gguf
    labwright verify base --hosts=@pct/pve1/101,@lxd/web1 --json
    labwright verify --path tabbyapi          # the file, for running pytest yourself

--hosts takes pyinfra's host names (@lxd/NAME, @incus/NAME, @pct/NODE/VMID, @ssh/HOST; labwright.verify.hostspec) or
testinfra's own (lxc://NAME, ssh://HOST), comma-separated; a malformed one is refused before pytest starts. --json
prints each test's outcome and the totals as one JSON document (pytest's own output goes to stderr). Everything else
after SUITE goes to pytest (testinfra's --sudo, the suite's own options: `labwright verify base --help`). Exit codes:
0 every check passed, 1 a check failed, 2 bad input (unknown suite, a bad host name, pytest usage error).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile

import typer

from labwright.errors import BadInput
from labwright.paths import VERIFY_SUITES, verify_suite
from labwright.textio import load_json
from labwright.verify import hostspec

NAME = "verify"
HELP = "Run a deploy's shipped testinfra suite against your hosts."

#: A single command, not a group: registered with app.command (see labwright.cli.register).
CONTEXT = {"allow_extra_args": True, "ignore_unknown_options": True}


def command(
    ctx: typer.Context,
    suite: str = typer.Argument(None, help=f"One of: {', '.join(VERIFY_SUITES)}."),
    path: bool = typer.Option(False, "--path", help="Print the suite's file and exit."),
    hosts: str | None = typer.Option(None, "--hosts", metavar="HOST,...",
                                     help="The hosts to check: @lxd/NAME, @incus/NAME, @pct/NODE/VMID, @ssh/HOST "
                                     "(pyinfra's names) or testinfra's lxc://NAME, ssh://HOST; comma-separated."),
    as_json: bool = typer.Option(False, "--json", help='Print {"suite", "hosts", "exit_code", "totals", "tests": '
                                 '[{"nodeid", "outcome", "seconds", "reason"}]} as JSON (pytest\'s output on '
                                 "stderr)."),
) -> None:
    """Run the testinfra suite of a deploy (base, llamacpp, tabbyapi, ...) against --hosts."""
    translated = hostspec.translate_hosts(hosts) if hosts is not None else None  # refused before anything runs
    if suite is None:
        if as_json:
            typer.echo(json.dumps({"suites": [{"name": name, "path": str(verify_suite(name))}
                                              for name in VERIFY_SUITES]}))
            return
        for name in VERIFY_SUITES:
            typer.echo(f"{name}\t{verify_suite(name)}")
        return
    file = verify_suite(suite)
    if path:
        typer.echo(json.dumps({"suites": [{"name": suite, "path": str(file)}]}) if as_json else str(file))
        return
    if importlib.util.find_spec("testinfra") is None:
        raise BadInput("labwright verify needs pytest-testinfra: pip install 'labwright[verify]' (or "
                       "uv tool install 'labwright[verify]')")
    # --rootdir and an empty -c: the suite runs the same from any directory, whatever pytest config is there.
    argv = [sys.executable, "-m", "pytest", "-c", "/dev/null", "--rootdir", str(file.parent), "-p", "no:cacheprovider",
            *(["-p", "labwright.verify.report"] if as_json else []),
            *([f"--hosts={translated}"] if translated is not None else []), str(file), *ctx.args]
    with tempfile.TemporaryDirectory(prefix="labwright-verify-") as tmp:
        report_file = os.path.join(tmp, "report.json")
        env = {**os.environ, REPORT_ENV: report_file} if as_json else None
        # stderr is held back: a pytest usage error (exit 4: an unknown option, a missing file) prints pytest's usage
        # block there, and is said here in one line; any other stderr is passed on as pytest wrote it. With --json
        # stdout is the JSON document: pytest's own report goes to stderr.
        proc = subprocess.run(argv, stderr=subprocess.PIPE, text=True, errors="replace", env=env,
                              stdout=sys.stderr if as_json else None)
        if proc.returncode == USAGE_ERROR:
            said = usage_error(proc.stderr)
            if hostspec.UNREACHABLE in said:   # the suite's own first step (conftest): a host that did not answer
                from labwright.errors import OperationFailed

                raise OperationFailed(f"verify {suite}: {said}")
            raise BadInput(f"verify {suite}: {said}; see `labwright verify {suite} --help` "
                           "(the suite's options) and --hosts")
        sys.stderr.write(proc.stderr)
        code = proc.returncode if proc.returncode in (0, 1) else 2
        if as_json:
            typer.echo(json.dumps(json_report(suite, hosts, translated, code, report_file)))
    raise typer.Exit(code)


#: The file labwright.verify.report writes the outcomes to (--json).
REPORT_ENV = "LABWRIGHT_VERIFY_REPORT"


def json_report(suite: str, hosts: str | None, translated: str | None, code: int, report_file: str) -> dict:
    """``--json``'s document: the suite, the hosts as given and as testinfra took them, the exit code, the totals
    and each test's outcome (labwright.verify.report; empty when pytest ended before any test ran)."""
    try:
        with open(report_file, encoding="utf-8") as stream:
            outcomes = load_json(stream)
    except (OSError, ValueError, RecursionError):
        outcomes = {}
    if not isinstance(outcomes, dict) or not isinstance(outcomes.get("tests", []), list) \
            or not isinstance(outcomes.get("totals", {}), dict):
        outcomes = {}  # not what labwright.verify.report writes (a file left from elsewhere): no outcomes to give
    return {"suite": suite, "hosts": hosts.split(",") if hosts else [],
            "testinfra_hosts": translated.split(",") if translated else [], "exit_code": code, "ok": code == 0,
            "totals": outcomes.get("totals", {}), "tests": outcomes.get("tests", [])}


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

