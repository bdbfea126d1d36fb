"""Read what a ``pyinfra`` run did from its machine interface, ``pyinfra --json``, so tests can assert
"changed N", "a second run changes nothing" or "this operation changed on that host".

Nothing here reads pyinfra's screen (the results table). pyinfra 3.10's ``--json`` ("Emit pure JSON output on
stdout ... dry runs and deploy results", ``pyinfra_cli/cli.py`` lines 235-244) prints one line on stdout through
``print_json`` (``pyinfra_cli/prints.py`` 56-57: ``json.dumps`` without indent, so a single line starting with
``{"plan"``), built by ``print_run_json`` (prints.py 183-189)::

    {"plan": [                                  # build_plan_json, prints.py 103-130: every operation, in order
        {"op_hash": str, "name": str, "names": [str], "args": [str],
         "hosts_with_change": [host],           # pyinfra's change detection: empty under -y, which skips it
                                                # (pyinfra/api/operation.py 351-356); a --dry run without -y fills it
         "hosts_with_conditional_change": [host]}],
     "results": null                            # a --dry run, or a run without -y (cli.py 482-492)
              | {"operations": [                # build_results_json, prints.py 133-180
                    {"op_hash", "name", "names", "args",
                     "hosts": int,              # hosts the operation ran on
                     "success": [host],         # succeeded AND changed something (did_change)
                     "error": [host],           # failed, _ignore_errors included
                     "no_change": [host]}],     # succeeded, changed nothing
                 "totals": {"hosts": int, "success": int, "error": int, "no_change": int},
                 "failed_hosts": [host]}}

``name`` is ``pretty_op_name`` (prints.py 353-359): the first name plus ``(args)`` when pyinfra gave it args. The
JSON carries no commands (``--debug-operations --json`` prints only the ``repr`` of each operation's generator).
When every host has failed, pyinfra stops with ``No hosts remaining!`` (``pyinfra/api/state.py`` 406-408) before
any JSON is printed: such a run has no result, only an exit code and its log, and :class:`UnreadableResult` says so.

The human output (the log pyinfra writes on stderr) stays in :attr:`DeployRun.output` for failure messages.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from labwright.textio import loads_json

RESULT_PREFIX = '{"plan"'
"""How pyinfra's ``--json`` line starts (``print_run_json`` puts "plan" first)."""


SUMMARY_HEADER = "--> Results (pyinfra --json):"
"""The first line of :meth:`PyinfraResult.summary`, which :class:`DeployRun` puts at the end of its output."""


class UnreadableResult(AssertionError):
    """A pyinfra run's output holds no readable ``--json`` result (an AssertionError, so a test fails with it)."""


@dataclass(frozen=True)
class Totals:
    """pyinfra's totals: one count per operation per host (``operations`` is its ``hosts`` total)."""

    operations: int
    success: int
    error: int
    no_change: int

    @property
    def changed(self) -> int:
        """Operations that changed something (pyinfra counts a no-op under No Change, not Success)."""
        return self.success


@dataclass(frozen=True)
class PlannedOperation:
    """One operation of the plan (``--dry`` or not): which hosts pyinfra's change detection expects to change."""

    op_hash: str
    name: str
    names: tuple[str, ...]
    args: tuple[str, ...]
    hosts_with_change: tuple[str, ...]
    hosts_with_conditional_change: tuple[str, ...]


@dataclass(frozen=True)
class OperationResult:
    """What one operation did, per host."""

    op_hash: str
    name: str
    names: tuple[str, ...]
    args: tuple[str, ...]
    hosts: int
    success: tuple[str, ...]
    error: tuple[str, ...]
    no_change: tuple[str, ...]

    @property
    def changed(self) -> tuple[str, ...]:
        """The hosts where it changed something (pyinfra's ``success``)."""
        return self.success


@dataclass(frozen=True)
class PyinfraResult:
    """A parsed ``pyinfra --json`` document: the plan, and (unless it was a dry run) what each operation did."""

    plan: tuple[PlannedOperation, ...]
    operations: tuple[OperationResult, ...] | None
    totals_or_none: Totals | None
    failed_hosts: tuple[str, ...]

    @property
    def dry(self) -> bool:
        """True for a run that executed nothing (``--dry``, or no ``-y``): it has a plan and no results."""
        return self.operations is None

    @property
    def totals(self) -> Totals:
        if self.totals_or_none is None:
            raise UnreadableResult("this pyinfra run executed nothing (--dry, or no -y): it has a plan, no totals")
        return self.totals_or_none

    def operation(self, name: str) -> OperationResult:
        """The result of the operation called ``name``: its full name, one of its names, its name without the
        ``"deploy name | "`` that pyinfra puts before the operations of a ``@deploy`` function, or else the one
        operation whose name contains ``name``."""
        if self.operations is None:
            raise UnreadableResult(f"this pyinfra run executed nothing (--dry, or no -y): no result for {name!r}")
        exact = [op for op in self.operations
                 if name == op.name or name in op.names or name == op.name.rsplit(" | ", 1)[-1]]
        found = exact or [op for op in self.operations if name in op.name]
        if len(found) != 1:
            what = "no operation" if not found else f"{len(found)} operations"
            raise UnreadableResult(f"{what} named {name!r} in this pyinfra run; it ran: "
                                   f"{[op.name for op in self.operations]}")
        return found[0]

    def summary(self) -> str:
        """The outcome as lines a person reads in a failure message (not a format to parse)."""
        if self.operations is None:
            lines = [f"    {op.name}: would change on {', '.join(op.hosts_with_change) or 'no host'}"
                     for op in self.plan]
            return "\n".join(["--> Plan (pyinfra --json, --dry: nothing executed):", *lines])
        lines = []
        for op in self.operations:
            parts = [f"{what} on {', '.join(hosts)}" for what, hosts in
                     (("changed", op.success), ("ERROR", op.error), ("no change", op.no_change)) if hosts]
            lines.append(f"    {op.name}: {'; '.join(parts) or 'ran on no host'}")
        t = self.totals
        lines.append(f"    totals: {t.changed} changed, {t.error} error, {t.no_change} no change "
                     f"({t.operations} operation-hosts)")
        if self.failed_hosts:
            lines.append(f"    failed hosts: {', '.join(self.failed_hosts)}")
        return "\n".join([SUMMARY_HEADER, *lines])


def _field(where: str, obj: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    if key not in obj:
        raise UnreadableResult(f"pyinfra --json result: {where} has no {key!r} (keys: {sorted(obj)}); "
                               "not the layout of pyinfra 3.10's print_run_json")
    value = obj[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise UnreadableResult(f"pyinfra --json result: {where}.{key} is {value!r}, not {kind}")
    return value


def _hosts(where: str, obj: Mapping[str, Any], key: str) -> tuple[str, ...]:
    values = _field(where, obj, key, list)
    if not all(isinstance(v, str) for v in values):
        raise UnreadableResult(f"pyinfra --json result: {where}.{key} is {values!r}, not a list of host names")
    return tuple(values)


def _common(where: str, op: Any) -> dict[str, Any]:
    if not isinstance(op, dict):
        raise UnreadableResult(f"pyinfra --json result: {where} is {op!r}, not an object")
    return {"op_hash": _field(where, op, "op_hash", str), "name": _field(where, op, "name", str),
            "names": _hosts(where, op, "names"), "args": tuple(str(a) for a in _field(where, op, "args", list))}


def result_from_json(document: Any) -> PyinfraResult:
    """A :class:`PyinfraResult` from pyinfra's decoded ``--json`` document; a layout it does not know is named."""
    if not isinstance(document, dict):
        raise UnreadableResult(f"pyinfra --json result is {type(document).__name__}, not an object: "
                               f"{str(document)[:300]}")
    plan = tuple(
        PlannedOperation(**_common(f"plan[{i}]", op), hosts_with_change=_hosts(f"plan[{i}]", op, "hosts_with_change"),
                         hosts_with_conditional_change=_hosts(f"plan[{i}]", op, "hosts_with_conditional_change"))
        for i, op in enumerate(_field("the document", document, "plan", list)))
    results = _field("the document", document, "results", (dict, type(None)))
    if results is None:
        return PyinfraResult(plan, None, None, ())
    operations = tuple(
        OperationResult(**_common(f"results.operations[{i}]", op),
                        hosts=_field(f"results.operations[{i}]", op, "hosts", int),
                        success=_hosts(f"results.operations[{i}]", op, "success"),
                        error=_hosts(f"results.operations[{i}]", op, "error"),
                        no_change=_hosts(f"results.operations[{i}]", op, "no_change"))
        for i, op in enumerate(_field("results", results, "operations", list)))
    totals = _field("results", results, "totals", dict)
    return PyinfraResult(
        plan, operations,
        Totals(*(_field("results.totals", totals, key, int) for key in ("hosts", "success", "error", "no_change"))),
        _hosts("results", results, "failed_hosts"))


def split_result(output: str) -> tuple[str | None, str]:
    """(pyinfra's ``--json`` line or None, the rest of ``output``): the line is the last one starting with
    ``{"plan"``; a deploy file's own prints on stdout stay in the rest."""
    lines = output.splitlines(keepends=True)
    for index in range(len(lines) - 1, -1, -1):
        if lines[index].lstrip().startswith(RESULT_PREFIX):
            return lines[index].strip(), "".join(lines[:index] + lines[index + 1:])
    return None, output


def _tail(text: str, limit: int = 1500) -> str:
    text = text.strip()
    return text if len(text) <= limit else "..." + text[-limit:]


def no_result(output: str, rc: int | None = None) -> UnreadableResult:
    """The error for an output without a ``--json`` result, saying what the output was instead."""
    exit_code = "" if rc is None else f" (exit {rc})"
    if SUMMARY_HEADER in output:
        why = "this is a DeployRun's output, whose --json line was taken out: read run.totals / run.result"
    elif "Grand total" in output:
        why = "this is pyinfra's screen output: run pyinfra with --json (run_pyinfra does)"
    elif "No hosts remaining!" in output:
        why = "every host failed, so pyinfra stopped before printing any result"
    elif not output.strip():
        why = "pyinfra printed nothing"
    else:
        why = "pyinfra stopped before its results, or was not run with --json"
    return UnreadableResult(f"no pyinfra --json result{exit_code}: {why}; it printed:\n{_tail(output)}")


def parse_pyinfra_json(output: str, rc: int | None = None) -> PyinfraResult:
    """The result in a pyinfra ``--json`` run's output (its stdout, or stdout and stderr together)."""
    line, _ = split_result(output)
    if line is None:
        raise no_result(output, rc)
    try:
        document = loads_json(line)
    except json.JSONDecodeError as exc:
        raise UnreadableResult(f"pyinfra's --json line is not valid JSON ({exc}); it was: {_tail(line, 600)}") \
            from None
    return result_from_json(document)


def pyinfra_totals(output: str | DeployRun) -> Totals:
    """The totals of a ``pyinfra --json`` run, from its output (stdout, or stdout and stderr together) or its
    :class:`DeployRun`."""
    if isinstance(output, DeployRun):
        return output.totals
    return parse_pyinfra_json(output).totals


@dataclass
class DeployRun:
    """One ``pyinfra --json`` run: exit code, its human output, and how long it took.

    Made from everything the run printed (``DeployRun(rc, stdout + stderr, seconds)``), it takes the ``--json``
    line out of ``output`` into ``result_json``; ``output`` keeps pyinfra's log (and a deploy's own prints) and
    ends with :meth:`PyinfraResult.summary`, for failure messages.
    """

    rc: int
    output: str
    seconds: float
    result_json: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.result_json is None:
            self.result_json, self.output = split_result(self.output)
            if self.result_json is not None:
                try:
                    summary = self.result.summary()
                except UnreadableResult as exc:
                    summary = f"--> pyinfra --json result unreadable: {exc}"
                self.output = self.output.rstrip("\n") + "\n\n" + summary + "\n"

    @cached_property
    def result(self) -> PyinfraResult:
        """What each operation did; :class:`UnreadableResult` (naming what the run printed) when there is none."""
        if self.result_json is None:
            raise no_result(self.output, self.rc)
        return parse_pyinfra_json(self.result_json, self.rc)

    @property
    def totals(self) -> Totals:
        return self.result.totals

    def operation(self, name: str) -> OperationResult:
        return self.result.operation(name)


def tool_env() -> dict[str, str]:
    """The environment for running this venv's tools (pyinfra, labwright, pytest) as subprocesses.

    ``COLUMNS`` keeps labwright's own tables (rich) unwrapped in tests that read them; pyinfra's results are read
    from ``--json``, whatever the width."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}", "COLUMNS": "200"}


def pyinfra_command(target: str, deploy_file: str, *data: str, args: Sequence[str] = ()) -> list[str]:
    """``pyinfra -y --json [ARGS] TARGET DEPLOY_FILE --data key=value ...`` with this venv's pyinfra; without
    ``-y`` when ARGS has ``--dry``, since ``-y`` skips the change detection that fills the plan's
    ``hosts_with_change`` (cli.py 455-470)."""
    yes = [] if "--dry" in args else ["-y"]
    cmd = [str(Path(sys.executable).parent / "pyinfra"), *yes, "--json", *args, target, deploy_file]
    for item in data:
        cmd += ["--data", item]
    return cmd


def run_pyinfra(target: str, deploy_file: str, *data: str, cwd: str | Path, timeout: float = 600,
                args: Sequence[str] = (), env: Mapping[str, str] | None = None) -> DeployRun:
    """``pyinfra -y --json [ARGS] TARGET DEPLOY_FILE --data key=value ...`` from ``cwd`` (``env`` adds to
    :func:`tool_env`); ``args=("--dry",)`` plans without changing anything."""
    cmd = pyinfra_command(target, deploy_file, *data, args=args)
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=cwd, env={**tool_env(), **(env or {})}, capture_output=True, text=True,
                          timeout=timeout)
    return DeployRun(proc.returncode, proc.stdout + proc.stderr, time.monotonic() - start)


@dataclass
class Deployed:
    """A container a deploy test set up once: its name and address, the verify run before the deploy, the deploy."""

    name: str
    address: str
    before: subprocess.CompletedProcess[str]
    first: DeployRun
