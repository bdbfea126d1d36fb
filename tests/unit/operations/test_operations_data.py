"""Every labwright pyinfra operation as data: arguments and facts in, the commands it yields out. No lab.

Modelled on pyinfra's own operation tests (pyinfra-dev/pyinfra at ed67e748: tests/test_operations.py runs
tests/operations/<module>.<op>/*.json, e.g. tests/operations/systemd.service/running_noop.json and
files.put/upload_to_directory.json, through tests/util.py's FakeHost). One file here is one case:

    tests/unit/operations/<module>.<operation>/<case>.json
    {"args": [...], "kwargs": {...},                  # the operation's arguments
     "facts": {"files.File": {"path=/etc/x": null}, "labwright.nvidia.NvidiaDriverMatch": {"root=/": {...}}},
     "commands": [...],                               # what it yields, in order (format: support/pyinfra_data.py)
     "noop_description": "...",                       # required when it yields nothing
     "host_data": {...},                              # the host's inventory data
     "host_name": "testhost",                         # its inventory name (@lxd/NAME: a container)
     "is_executing": false,                           # pyinfra's execution phase (default: planning)
     "guest_backend": {"exists": true, "changes": []},  # guests.container only: the guest backend's answers
     "exception": {"name": "OperationError", "message": "..."}}

Unlike pyinfra's FakeHost the host is a real pyinfra ``Host`` of a real ``Inventory`` and ``State`` (host data,
``host.name``, ``state.is_executing`` behave as in a run); only ``get_fact`` answers from the file. Fact keys are
pyinfra's: the fact's command arguments, defaults filled in by pyinfra's own ``_handle_fact_kwargs``, as
``get_kwargs_str`` writes them. A fact the operation asks for that the file does not give fails the case, naming
the key to add: an operation never silently sees None.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from pyinfra.api import Config, FactBase, Inventory, State
from pyinfra.api.facts import _handle_fact_kwargs
from pyinfra.api.util import get_kwargs_str
from pyinfra.context import ctx_host, ctx_state

import labwright.operations
from labwright.guests.model import Change, GuestSpec, Plan
from support.pinned_matrix import pinned_matrix
from support.pyinfra_data import defined_in, defined_outside, fact_key, object_named, render_commands

HERE = Path(__file__).resolve().parent


def labwright_operations() -> list[str]:
    """``module.operation`` for every @operation in src/labwright/operations/*.py, and ``labwright.MODULE.operation``
    for every module-level one elsewhere (snapshots.deploy)."""
    return [*defined_in(labwright.operations, lambda value: callable(value) and hasattr(value, "_inner")),
            *defined_outside(labwright.operations, decorator="operation")]


def cases() -> list[Any]:
    return [pytest.param(path, id=f"{path.parent.name}/{path.stem}")
            for path in sorted(HERE.glob("*.*/*.json"))]


def fact_value(fact_class: type, value: Any) -> Any:
    """JSON -> the fact's own type where that is a dataclass (``TabbyapiNgramFiles`` gives ``TabbyTexts``)."""
    for base in getattr(fact_class, "__orig_bases__", ()):
        for argument in typing.get_args(base):
            if dataclasses.is_dataclass(argument) and isinstance(value, dict):
                return argument(**value)
    return value


class FactsFromData:
    """``host.get_fact`` answering from a data file's ``facts``; records every key asked for."""

    def __init__(self, state: State, host: Any, facts: dict[str, dict[str, Any]], where: str):
        self.state, self.host, self.facts, self.where = state, host, facts, where
        self.asked: list[str] = []

    def __call__(self, fact_class: type[FactBase], *args: Any, **kwargs: Any) -> Any:
        fact_kwargs, _ = _handle_fact_kwargs(self.state, self.host, fact_class, args, kwargs)
        fact_kwargs.pop("self", None)
        key, arguments = fact_key(fact_class), get_kwargs_str(fact_kwargs)
        self.asked.append(f"{key} [{arguments}]")
        by_arguments = self.facts.get(key)
        if by_arguments is None or arguments not in by_arguments:
            raise AssertionError(f"{self.where}: the operation asks for fact {key} with {arguments!r}: add "
                                 f'"facts": {{"{key}": {{"{arguments}": ...}}}}')
        return fact_value(fact_class, by_arguments[arguments])


class BackendFromData:
    """The guest backend's answers for guests.container (the LXD/Proxmox plans have their own lab tests)."""

    def __init__(self, data: dict[str, Any]):
        self.exists_answer = bool(data.get("exists", True))
        self.changes = [Change(*change) for change in data.get("changes", [])]

    def exists(self, spec: GuestSpec) -> bool:
        return self.exists_answer

    def plan(self, spec: GuestSpec) -> Plan:
        action = "none" if not self.changes else ("update" if self.exists_answer else "create")
        return Plan(guest=spec.name, backend=spec.backend, action=action, changes=self.changes)


@contextmanager
def guest_backend(data: dict[str, Any] | None) -> Iterator[None]:
    from labwright.operations import guests

    original = guests._pool.get
    if data is not None:
        backend = BackendFromData(data)
        guests._pool.get = lambda spec: backend  # type: ignore[method-assign]
    try:
        yield
    finally:
        guests._pool.get = original  # type: ignore[method-assign]


def run_case(path: Path) -> None:
    data = json.loads(path.read_text())
    unknown = set(data) - {"args", "kwargs", "facts", "commands", "noop_description", "host_data", "exception",
                           "is_executing", "guest_backend", "host_name", "why"}
    assert not unknown, f"{path}: unknown keys {sorted(unknown)}"
    operation = object_named(path.parent.name, "labwright.operations")

    name = data.get("host_name", "testhost")
    inventory = Inventory(([(name, data.get("host_data", {}))], {}))
    state = State(inventory, Config())
    state.is_executing = bool(data.get("is_executing", False))
    host = inventory.get_host(name)
    facts = FactsFromData(state, host, data.get("facts", {}), str(path))
    noops: list[str] = []
    host.get_fact = facts  # type: ignore[method-assign]
    host.noop = noops.append  # type: ignore[method-assign]
    # Where an upload is staged is the connector's business (pyinfra's FakeHost answers the same).
    host.get_temp_filename = lambda *args, **kwargs: "_tempfile_"  # type: ignore[method-assign]

    expected_exception = data.get("exception")
    with ctx_state.use(state), ctx_host.use(host), guest_backend(data.get("guest_backend")):
        try:
            commands = list(operation._inner(*data.get("args", []), **data.get("kwargs", {})))
        except Exception as exc:
            if expected_exception is None:
                raise
            assert (type(exc).__name__, str(exc)) == (expected_exception["name"], expected_exception["message"])
            return
    assert expected_exception is None, f"{path}: expected {expected_exception}, the operation raised nothing"

    expected = data["commands"]
    assert render_commands(commands, expected) == expected
    if not commands or "noop_description" in data:
        assert noops == [data["noop_description"]], f"{path}: no-op description"
    else:
        assert noops == [], f"{path}: a change must not also say no-op"
    unused = {f"{key} [{arguments}]" for key, by_arguments in data.get("facts", {}).items()
              for arguments in by_arguments} - set(facts.asked)
    assert not unused, f"{path}: facts the operation never asked for (stale data): {sorted(unused)}"


@pytest.fixture(scope="module", autouse=True)
def _pinned_matrix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The stack.switch cases plan the packaged stacks: against a copy whose every wheel row has a sha256 (the
    shipped one refuses the GitHub-release rows refreshed without one; tests/support/pinned_matrix.py)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LABWRIGHT_MATRIX_DIR", str(pinned_matrix(tmp_path_factory.mktemp("pinned-matrix"))))
        yield


@pytest.mark.parametrize("path", cases())
def test_operation_case(path: Path) -> None:
    run_case(path)


def test_every_operation_has_data() -> None:
    """A new operation without a data directory fails here, so it cannot go untested."""
    operations = labwright_operations()
    assert len(operations) >= 15, operations
    missing = [name for name in operations if not list((HERE / name).glob("*.json"))]
    assert missing == [], f"operations without tests/unit/operations/<module>.<op>/*.json: {missing}"
    stale = sorted({path.parent.name for path in HERE.glob("*.*/*.json")} - set(operations))
    assert stale == [], f"data directories for operations that do not exist: {stale}"


def test_missing_fact_data_names_the_key(tmp_path: Path) -> None:
    """The harness itself: an operation asking for a fact the file lacks fails with the key to add."""
    case = tmp_path / "systemd.started_owned" / "no_facts.json"
    case.parent.mkdir()
    case.write_text(json.dumps({"args": ["x"], "commands": []}))
    with pytest.raises(AssertionError, match=r'add "facts": \{"labwright.systemd.SystemdUnits": \{"": '):
        run_case(case)
    facts = {"labwright.systemd.SystemdUnits": {"": {"init": "running", "units": {}}}}
    case.write_text(json.dumps({"args": ["x"], "commands": [], "facts": facts}))
    with pytest.raises(AssertionError, match=r'add "facts": \{"labwright.systemd.SystemdServiceState": '
                                             r'\{"unit=x.service": '):
        run_case(case)
    # pyinfra's own fact: the key has the arguments pyinfra fills in
    facts["labwright.systemd.SystemdServiceState"] = {"unit=x.service": None}
    case.write_text(json.dumps({"args": ["x"], "commands": [], "facts": facts}))
    with pytest.raises(AssertionError, match=r'add "facts": \{"systemd.SystemdEnabled": \{"machine=None, '
                                             r"services=x.service, user_mode=False, user_name=None\""):
        run_case(case)


MUTATIONS = {
    "a wrong command": ("systemd.started_owned/stopped_and_disabled_enables_and_starts",
                        lambda d: d["commands"].__setitem__(0, "systemctl enable other.service"), "assert"),
    "a missing command": ("systemd.started_owned/stopped_and_disabled_enables_and_starts",
                          lambda d: d["commands"].pop(), "assert"),
    "another no-op description": ("systemd.started_owned/running_and_enabled_noop",
                                  lambda d: d.__setitem__("noop_description", "x"), "no-op description"),
    "a fact never asked for": ("systemd.started_owned/running_and_enabled_noop",
                               lambda d: d["facts"].__setitem__("files.File", {"path=/x": None}), "stale data"),
    "another exception message": ("http.wait_healthy/zero_timeout_refused",
                                  lambda d: d["exception"].__setitem__("message", "x"), "assert"),
    "an exception that is not raised": ("systemd.restarted_owned/full_unit_name_kept",
                                        lambda d: d.__setitem__("exception", {"name": "OperationError",
                                                                              "message": "x"}), "raised nothing"),
    "another uploaded line": ("tabbyapi.ngram/seed_era_patched",
                              lambda d: d["commands"][0]["lines"].__setitem__(0, "class Other:"), "assert"),
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_the_harness_fails_on(mutation: str, tmp_path: Path) -> None:
    """The harness itself: each way a data file can disagree with the operation fails the case."""
    name, mutate, message = MUTATIONS[mutation]
    data = json.loads((HERE / f"{name}.json").read_text())
    mutate(data)
    case = tmp_path / name.split("/")[0] / "mutated.json"
    case.parent.mkdir()
    case.write_text(json.dumps(data))
    with pytest.raises(AssertionError, match=message):
        run_case(case)
