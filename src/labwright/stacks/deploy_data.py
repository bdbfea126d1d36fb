"""labwright.deploys.stack's host data, typed by one schema (:func:`data_schema`, issue 33), read from a mapping
(``host.data.dict()``): one line naming a bad key, before anything is contacted.

The stack deploy's keys carry no prefix (``venv``, ``stack``, ``keep``...; docs/stacks.md), so the host's other data
(``ssh_*``, other deploys' keys) is not refused as unknown here: only the keys of the schema are read and typed, and a
key that misspells one of them (``stack_rolback``) is refused (labwright.deploy_data.misspelt_key).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cache
from typing import TYPE_CHECKING, Any, TypeVar

from pyinfra.api.exceptions import DeployError

from labwright.schema import checks
from labwright.stacks.dependency_lock import UNPINNED_KEY
from labwright.stacks.plan import DEFAULT_ROOT

if TYPE_CHECKING:
    from labwright.schema.model import Schema

T = TypeVar("T")
#: ``installer``: as ``labwright stack switch --installer`` (labwright.stacks.build.INSTALLERS).
INSTALLERS = ("auto", "uv", "pip")


def value(data: Mapping[str, Any], key: str, default: Any = None) -> Any:
    """``data[key]``, or ``default`` when it is absent or None."""
    found = data.get(key)
    return default if found is None else found


def checked(key: str, found: Any, check: Callable[[Any], T]) -> T:
    """``check(found)`` (a labwright.schema.checks function); its ValueError as one line naming the key."""
    try:
        return check(found)
    except ValueError as error:
        raise DeployError(f"{key}: {error}") from None


def flag(data: Mapping[str, Any], key: str) -> bool:
    """A boolean as --data or an inventory spells it (true/false, yes/no, on/off, 1/0; absent or "" is false)."""
    return checked(key, value(data, key, False), checks.or_empty(checks.flag)) or False


def unit_name(found: Any) -> str:
    """A systemd unit (``tabbyapi`` or ``tabbyapi.service``), as labwright.agent.service.check_unit takes it."""
    from labwright.agent.service import UNIT

    text = checks.line(found)
    if not UNIT.match(text if "." in text else f"{text}.service"):
        raise ValueError(f"{text[:80]!r} is not a systemd unit name (e.g. tabbyapi or tabbyapi.service)")
    return text


@cache
def data_schema() -> type[Schema]:
    """The stack deploy's keys, typed (built on first use: pydantic loads only with the data). ``venv`` is required
    by the deploy (its own line says what to give); ``stack`` unless ``stack_rollback``."""
    from typing import Annotated

    from pydantic import BeforeValidator as Check
    from pydantic import Field

    from labwright.schema.fields import Duration, ManagedDir
    from labwright.schema.model import Schema

    optional_flag = Annotated[bool, Check(checks.or_empty(checks.flag))]

    class StackData(Schema):
        venv: Annotated[str, Check(checks.or_empty(checks.managed_dir))] = ""
        stack: Annotated[str, Check(checks.or_empty(checks.line))] = ""
        stack_rollback: optional_flag = False
        stacks_root: ManagedDir = DEFAULT_ROOT
        keep: Annotated[int, Check(checks.whole(1))] = 2
        service: Annotated[str, Check(checks.or_empty(unit_name))] = ""
        health: Annotated[str, Check(checks.or_empty(checks.url))] = ""
        health_cmd: Annotated[str, Check(checks.or_empty(checks.line))] = ""
        health_timeout: Duration = 60.0
        wheelhouse: Annotated[str, Check(checks.or_empty(checks.line))] = ""
        torch: Annotated[str, Check(checks.or_empty(checks.line))] = ""
        base_python: Annotated[str, Check(checks.or_empty(checks.line))] = ""
        installer: Annotated[str, Check(checks.one_of(*INSTALLERS))] = "auto"
        create: optional_flag = False
        unpinned_dependencies: optional_flag = Field(False, alias="stack_unpinned_dependencies")  # UNPINNED_KEY

    assert StackData.model_fields["unpinned_dependencies"].alias == UNPINNED_KEY
    return StackData


def settings(data: Mapping[str, Any]) -> Any:
    """The stack deploy's keys of ``data`` typed (``data_schema``; absent or None: the default); a bad value is a
    DeployError, one line naming the key; ``stacks_root`` inside ``venv`` (replaced by a link to the stack) too."""
    from labwright.deploy_data import refuse_misspelt_keys
    from labwright.schema.model import parse

    model = data_schema()
    keys = [field.alias or name for name, field in model.model_fields.items()]
    refuse_misspelt_keys(data, keys, "docs/stacks.md")
    typed: Any = parse(model, {key: data[key] for key in keys if data.get(key) is not None}, error=DeployError)
    venv, root = typed.venv, typed.stacks_root
    if venv and (root.startswith(venv.rstrip("/") + "/") or root == venv):
        raise DeployError(f"stacks_root ({root}) is inside venv ({venv}), which is replaced by a link to the stack: "
                          "give stacks_root a directory outside it (nothing was changed)")
    return typed
