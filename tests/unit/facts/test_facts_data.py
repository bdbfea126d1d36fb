"""Every labwright pyinfra fact as data: its arguments, the command it runs, an output, what it makes of it.

Modelled on pyinfra's own fact tests (pyinfra-dev/pyinfra at ed67e748: tests/test_facts.py runs
tests/facts/<module>.<Fact>/*.json, e.g. tests/facts/systemd.SystemdStatus/services.json). One file is one case:

    tests/unit/facts/<module>.<Fact>/<case>.json
    {"arg": {...},                 # the fact's command arguments (a list for positional ones; absent: none)
     "command": "...",             # the shell command exactly, or {"argv"}/{"shell"}: support/pyinfra_data.py
     "requires_command": "...",    # where the fact names the tool it needs
     "output": ["line", ...],      # what the host printed, line by line as pyinfra hands it over
     "fact": ...}                  # what ``process`` makes of it (a dataclass as a dict of its fields,
                                   # bytes as {"hex": "..."})

The commands themselves run for real where that matters (test_tabbyapi_facts.py reads files through the real
shell command); here each case pins the command and the parsing, odd and empty outputs included.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from pathlib import Path
from typing import Any

import pytest
from pyinfra.api import FactBase

import labwright.facts
from support.pyinfra_data import defined_in, defined_outside, object_named, render_command

HERE = Path(__file__).resolve().parent


def labwright_facts() -> list[str]:
    """``module.Fact`` for every FactBase subclass defined in src/labwright/facts/*.py, and ``labwright.MODULE.Fact``
    for every module-level one elsewhere (deploys.model)."""
    return [*defined_in(labwright.facts, lambda value: inspect.isclass(value) and issubclass(value, FactBase)),
            *defined_outside(labwright.facts, base="FactBase")]


def cases() -> list[Any]:
    return [pytest.param(path, id=f"{path.parent.name}/{path.stem}") for path in sorted(HERE.glob("*.*/*.json"))]


def _call(attribute: Any, arguments: Any) -> Any:
    if not callable(attribute):
        return attribute
    if isinstance(arguments, dict):
        return attribute(**arguments)
    return attribute(*arguments)


def _bytes_as_hex(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"hex": value.hex()}
    raise TypeError(f"{value!r}: not JSON data")


def as_data(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return json.loads(json.dumps(value, default=_bytes_as_hex))


def run_case(path: Path) -> None:
    data = json.loads(path.read_text())
    unknown = set(data) - {"arg", "command", "requires_command", "output", "fact", "why"}
    assert not unknown, f"{path}: unknown keys {sorted(unknown)}"
    fact = object_named(path.parent.name, "labwright.facts")()
    arguments = data.get("arg", {})

    command = _call(fact.command, arguments)
    assert render_command(command, data["command"]) == data["command"], f"{path}: command"
    requires = _call(fact.requires_command, arguments)
    assert requires == data.get("requires_command"), f"{path}: requires_command"
    assert as_data(fact.process(data["output"])) == data["fact"], f"{path}: fact"


@pytest.mark.parametrize("path", cases())
def test_fact_case(path: Path) -> None:
    run_case(path)


def test_every_fact_has_two_cases() -> None:
    """A new fact without data fails here; each has at least two outputs (one of them empty or odd)."""
    facts = labwright_facts()
    assert len(facts) >= 14, facts
    thin = {name: len(list((HERE / name).glob("*.json"))) for name in facts}
    assert {name: count for name, count in thin.items() if count < 2} == {}, \
        "facts with fewer than two tests/unit/facts/<module>.<Fact>/*.json cases"
    empty = [name for name in facts
             if not any(json.loads(case.read_text())["output"] in ([], [""]) for case in (HERE / name).glob("*.json"))]
    assert empty == [], f"facts without a case for an empty output: {empty}"
    stale = sorted({path.parent.name for path in HERE.glob("*.*/*.json")} - set(facts))
    assert stale == [], f"data directories for facts that do not exist: {stale}"


@pytest.mark.parametrize(("field", "value", "message"), [
    ("command", "cat /etc/other", "command"),
    ("fact", "/usr/bin/flashrom", "fact"),
    ("requires_command", "flashrom", "requires_command"),
])
def test_the_harness_fails_on_another(field: str, value: Any, message: str, tmp_path: Path) -> None:
    """The harness itself: a data file that disagrees with the fact's command or parsing fails the case."""
    data = json.loads((HERE / "bios.FlashromPath" / "found_in_sbin.json").read_text())
    data[field] = value
    case = tmp_path / "bios.FlashromPath" / "mutated.json"
    case.parent.mkdir()
    case.write_text(json.dumps(data))
    with pytest.raises(AssertionError, match=message):
        run_case(case)
