"""Inventory data for a deploy: ``PREFIX_KEY`` host data over the defaults of its templates, checked.

Every deploy reads its data the same way, and a bad value is one line naming the data key
(pyinfra prints a ``DeployError`` without a traceback)::

    KEYS = DeployData("llamacpp", load_defaults())
    port = KEYS.int_of("port", KEYS.get("port"), 1, 65535)
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from pyinfra import host
from pyinfra.api.exceptions import DeployError

from labwright.errors import BadInput
from labwright.schema import checks
from labwright.shell import path_problem

if TYPE_CHECKING:
    from pydantic import BaseModel

    from labwright.schema.model import Schema

T = TypeVar("T")

TRUE, FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def jinja(templates: Path | str) -> Environment:
    """The template environment every deploy uses: undefined names are errors, files keep their last newline."""
    return Environment(loader=FileSystemLoader(str(templates)), undefined=StrictUndefined, trim_blocks=True,
                       lstrip_blocks=True, keep_trailing_newline=True)


@dataclass(frozen=True)
class DeployData:
    prefix: str
    defaults: Mapping[str, Mapping[str, Any]]
    # The host data to read: None = pyinfra's current host; a mapping (``host.data.dict()``, or a test's dict) makes
    # the functions that read through this object pure.
    data: Mapping[str, Any] | None = None

    def over(self, data: Mapping[str, Any]) -> DeployData:
        """The same keys read from ``data`` instead of the current host."""
        return replace(self, data=data)

    def fail(self, key: str, message: str) -> DeployError:
        """One line naming the data key."""
        return DeployError(f"{self.prefix}_{key}: {message}")

    def get(self, key: str, section: str = "service") -> Any:
        """The host's ``PREFIX_KEY``, else the default of ``key`` in ``section``. A list or dict where the default is
        one value (``llamacpp_build=[]``) is refused, not read as that default or as its text."""
        value = (host.data if self.data is None else self.data).get(f"{self.prefix}_{key}")
        default = self.defaults[section].get(key)
        if value is None:
            return default
        problem = one_value_problem(value, default)
        if problem is not None:
            raise self.fail(key, problem)
        return value

    def int_of(self, key: str, value: Any, low: int, high: int | None = None) -> int:
        """``value`` as a whole number ``low..high`` (labwright.schema.checks.whole)."""
        return self.checked(key, value, checks.whole(low, high))

    def checked(self, key: str, value: Any, check: Callable[[Any], T]) -> T:
        """``check(value)`` (a labwright.schema.checks function); its ValueError as one line naming the key."""
        try:
            return check(value)
        except ValueError as error:
            raise self.fail(key, one_line(str(error))) from None

    def managed_of(self, key: str, value: Any) -> str:
        """``value`` as a directory the service will own: absolute, normalised, no shell characters, not a system
        directory such as /etc or /usr (labwright.schema.checks.managed_dir)."""
        return self.checked(key, value, checks.managed_dir)

    def parse(self, schema: type[BaseModel], **given: Any) -> dict[str, Any]:
        """Every key of ``schema`` (a labwright.schema.model.Schema) read as :meth:`get` reads it (``given`` first:
        a value the deploy already derived) and checked at once; the first bad key refused in one line naming
        ``PREFIX_KEY``. The sections of the keys are found in the defaults."""
        from labwright.schema.model import parse

        values: dict[str, Any] = {}
        for key in schema.model_fields:
            if key in given:
                values[key] = given[key]
                continue
            section = next((name for name, table in self.defaults.items()
                            if isinstance(table, Mapping) and key in table), "service")
            values[key] = self.get(key, section)
        return parse(schema, values, prefix=self.prefix, error=DeployError).model_dump()

    def path_of(self, key: str, value: Any, absolute: bool = True) -> str:
        """``value`` as a path that may go into commands and units: refused in one line naming the key when it holds
        shell characters (;|&<>$`), quotes, spaces or line breaks, or (``absolute``) is relative."""
        text = str(value)
        problem = path_problem(text, absolute)
        if problem is not None:
            raise self.fail(key, problem)
        return text

    def bool_of(self, key: str, value: Any) -> bool:
        """true/false, yes/no, on/off, 1/0 (labwright.schema.checks.flag)."""
        return self.checked(key, value, checks.flag)


def one_line(text: str) -> str:
    """``text`` with line breaks written as escapes (a refusal stays one line)."""
    return text.replace("\r", "\\r").replace("\n", "\\n")


def one_value_problem(value: Any, default: Any) -> str | None:
    """Why ``value`` cannot stand for a key whose default is one value (a string, number or bool): a list/dict (or
    set, tuple) given for it; None when it can. The caller raises it naming the key."""
    if isinstance(default, str | int | float | bool) and isinstance(value, list | dict | tuple | set):
        kind = "true or false" if isinstance(default, bool) else "a number" if isinstance(default, int | float) \
            else "a string"
        return f"{value!r} is a {type(value).__name__}; give one value ({kind}, default {default!r})"
    return None


#: systemd's Restart= values (systemd.service(5)), for a deploy's own unit.
RESTART_POLICIES = ("no", "on-success", "on-failure", "on-abnormal", "on-watchdog", "on-abort", "always")


def restart_policy(value: Any) -> str:
    """A systemd Restart= policy, or ValueError naming it (a deploy schema's field check)."""
    restart = checks.line(value)
    if restart not in RESTART_POLICIES:
        raise ValueError(f"{restart[:80]!r} is not a systemd Restart= policy ({', '.join(RESTART_POLICIES)})")
    return restart


def stack_engine_values(data: Mapping[str, Any], prefix: str, defaults: Mapping[str, Mapping[str, Any]],
                        schema: Any, *, nested_example: str, nested_extra: Iterable[str] = (),
                        conflicts: Iterable[str] = ()) -> dict[str, Any]:
    """The settings of an engine deployed on a stack (tabbyAPI, vLLM), read from host data the way both deploys take
    it: ``PREFIX_<key>`` beside the ``PREFIX`` dict (``nested_example`` shows its shape in the refusal), the stack's
    name as ``stack``; a key absent from templates/PREFIX/defaults.toml refused naming the closest, each value checked
    against its default's kind, then the whole parsed by ``schema`` (the first bad key in defaults.toml's order is the
    one reported) and the ``conflicts`` keys checked against the other deploys' on the same host."""
    from labwright.schema.model import parse

    where = f"templates/{prefix}/defaults.toml"
    flat = set(defaults_keys(defaults))
    nested = data.get(prefix) or {}
    if not isinstance(nested, Mapping):
        raise BadInput(f"{prefix}: must be a dict of settings, e.g. {nested_example}")
    known = flat | {"stack", *nested_extra}
    for key in nested:
        if key not in known:
            raise BadInput(f"{prefix}: unknown key {key!r} (see {where})")
    error = unknown_key_error(data, prefix, flat, where)
    if error is not None:
        raise error

    def get(section: str, key: str) -> Any:
        given = data.get(f"{prefix}_{key}")
        value = given if given is not None else nested.get(key)
        if value is None:
            return defaults[section][key]
        problem = one_value_problem(value, defaults[section][key])
        if problem is not None:
            raise BadInput(f"{prefix}_{key}: {problem}")
        return value

    values = {key: get(section, key) for section, keys in defaults.items() for key in keys if key != "default"}
    values["stack"] = data.get("stack") or nested.get("stack") or defaults["stack"]["default"]
    checked: dict[str, Any] = parse(schema, values, prefix=prefix, error=BadInput, noun="data key for this deploy",
                                    where=where).model_dump()
    clash = conflict_error(data, {f"{prefix}_{key}": checked[key] for key in conflicts})
    if clash is not None:
        raise BadInput(clash)
    return checked


def stack_engine_schema(name: str, keys: Iterable[str], own: Mapping[str, Any]) -> type[Schema]:
    """The typed data of an engine deployed on a stack (tabbyAPI, vLLM): a Schema called ``name`` whose fields are
    ``keys`` in that order (pydantic checks them in it: the first bad one is the one :func:`stack_engine_values`
    reports), each typed by ``own`` (the engine's own keys), else as every such engine types it: the stack's build
    (``stack`` ... ``installer``), the unit (``service``, ``user``, ``restart``, ``restart_sec``, ``health_timeout``),
    ``nvidia_root``, ``host`` and ``port``. Built on first use (pydantic loads only with the data)."""
    from typing import Annotated

    from pydantic import BeforeValidator as Check
    from pydantic import create_model

    from labwright.schema.fields import AbsPath, Line, ListenAddress, ManagedDir, Port
    from labwright.schema.model import Schema

    optional_line = Annotated[str, Check(checks.or_empty(checks.line))]
    name_check = Annotated[str, Check(checks.service_user)]
    shared: dict[str, Any] = {
        "stack": Line, "venv": ManagedDir, "wheelhouse": Annotated[str, Check(checks.or_empty(checks.abs_path))],
        "torch": optional_line, "root": ManagedDir, "keep": Annotated[int, Check(checks.whole(1))],
        "base_python": optional_line, "installer": Annotated[str, Check(checks.one_of("auto", "uv", "pip"))],
        "service": name_check, "user": name_check, "restart": Annotated[str, Check(restart_policy)],
        "restart_sec": Annotated[int, Check(checks.whole(0))], "health_timeout": Annotated[int, Check(checks.whole(1))],
        "nvidia_root": AbsPath, "host": ListenAddress, "port": Port,
    }
    types = {**shared, **own}
    ordered: dict[str, Any] = {key: (types[key], ...) for key in keys}
    return create_model(name, __base__=Schema, **ordered)


def defaults_keys(defaults: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The ``PREFIX_<key>`` names a stack engine's defaults.toml gives, in its order (the stack's name is ``stack``,
    not ``PREFIX_default``)."""
    return [key for section in defaults.values() for key in section if key != "default"]


@dataclass(frozen=True)
class StackEngineSettings:
    """What every engine deployed on a stack (tabbyAPI, vLLM) reads alike, checked: the stack's build, the unit, the
    driver check, where it listens. An engine's own Settings add the rest."""

    stack: str
    venv: str
    wheelhouse: str
    torch: str
    stacks_root: str
    keep: int
    base_python: str
    installer: str
    service: str
    user: str
    restart: str
    restart_sec: int
    health_timeout: int
    gpu: str
    nvidia_root: str
    host: str
    port: int

    @property
    def local_url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        return f"http://{host}:{self.port}"


def stack_engine_settings(checked: Mapping[str, Any]) -> dict[str, Any]:
    """:class:`StackEngineSettings`' fields out of :func:`stack_engine_values`' checked data (``root`` is
    ``stacks_root``), to construct an engine's Settings with."""
    return {field.name: checked["root" if field.name == "stacks_root" else field.name]
            for field in fields(StackEngineSettings)}


def keys_of(defaults: Mapping[str, Any]) -> set[str]:
    """Every key a defaults.toml names, at any depth (tables included): the data keys a deploy reads from it."""
    found: set[str] = set()
    for key, value in defaults.items():
        found.add(str(key))
        if isinstance(value, Mapping):
            found |= keys_of(value)
    return found


def unknown_key_error(data: Mapping[str, Any], prefix: str, known: Iterable[str], where: str) -> BadInput | None:
    """The first ``PREFIX_KEY`` in the host data that the deploy does not read, as one line with the nearest known key
    (a typo such as ``tabbyapi_cache_sise=65536`` is refused, not silently ignored); None when every key is known.

    ``where`` tells the user where the keys are listed (a defaults.toml, a doc). A key given on pyinfra's command
    line as text pyinfra read lossily (:func:`cli_data_error`) is refused here too, first."""
    lossy = cli_data_error()
    if lossy is not None:
        return lossy
    names = sorted(f"{prefix}_{key}" for key in set(known))
    for key in sorted(str(k) for k in data):
        if key.startswith(f"{prefix}_") and key not in names:
            near = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
            hint = f"did you mean {near[0]}?" if near else f"the {prefix}_* keys are listed in {where}"
            return BadInput(f"{key}: unknown data key for this deploy ({hint}); fix or remove it (nothing was changed)")
    return None


def cli_data(argv: list[str] | None = None) -> dict[str, str]:
    """The ``--data KEY=VALUE`` texts of the pyinfra command line this process runs (``argv``: sys.argv), as typed;
    empty outside pyinfra's CLI (the API, a test process)."""
    import sys

    if argv is None:
        if "pyinfra_cli.main" not in sys.modules:
            return {}
        argv = sys.argv
    found: dict[str, str] = {}
    words = iter(argv[1:])
    for word in words:
        if word == "--":
            break
        item = next(words, None) if word == "--data" else word[len("--data="):] if word.startswith("--data=") \
            else None
        if item is not None and "=" in item:
            key, value = item.split("=", 1)
            found[key] = value
    return found


def cli_data_error(argv: list[str] | None = None) -> BadInput | None:
    """A ``--data KEY=VALUE`` on pyinfra's command line (any key: junk is junk whichever deploy reads it) that pyinfra
    reads as something other than what was typed.
    pyinfra (pyinfra_cli/util.py ``parse_cli_arg``, 3.x) tries ``int(text)``, then ``json.loads(text)``, else keeps
    the text: ``int()`` also takes other white space at the ends (``\\x0b1`` is 1), other scripts' digits and ``1_0``,
    JSON takes a tab or line break around a number, so the deploy's own checks saw a clean number (a sweep at
    1a05899: ``gateway_admin_port=\\x0b1`` taken as port 1). Text kept as text is checked by the deploy itself."""
    import re

    from labwright.textio import loads_json

    for key, text in sorted(cli_data(argv).items()):
        try:
            read: Any = int(text)
        except ValueError:
            try:
                read = loads_json(text)
            except ValueError:
                continue
        # Text, lists, objects and true/false come through JSON as written (its strings keep every character, its
        # white space is only spaces, tabs and line breaks); a number must be a number as typed.
        clean = text.strip(" ")
        if isinstance(read, bool) or not isinstance(read, int | float) or re.fullmatch(
                r"[-+]?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?", clean):
            continue
        odd = next((c for c in text if not (c.isascii() and c.isprintable()) and c not in "\t\n\r"), None) \
            or next((c for c in (clean[:1], clean[-1:]) if c and not c.isprintable()), None) or "_"
        return BadInput(f"{key}: {text[:60]!r} holds {odd!r}, which pyinfra drops (it reads {str(read)[:40]!r}); "
                        f"write the value alone, e.g. {key}={str(read)[:40]} (nothing was changed)")
    return None


def refuse_unknown_keys(data: Mapping[str, Any], prefix: str, known: Iterable[str], where: str) -> None:
    """Raise :func:`unknown_key_error`'s line as a DeployError (pyinfra prints it without a traceback)."""
    error = unknown_key_error(data, prefix, known, where)
    if error is not None:
        raise DeployError(str(error))


def _spelling(key: str) -> str:
    return key.lower().replace("-", "").replace("_", "")


def _one_edit(a: str, b: str) -> bool:
    """``a`` is ``b`` with one letter added, dropped, changed, or two neighbours swapped (Damerau distance 1)."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        return len(diff) == 1 or (len(diff) == 2 and diff[1] == diff[0] + 1 and a[diff[0]] == b[diff[1]]
                                  and a[diff[1]] == b[diff[0]])
    short, long = sorted((a, b), key=len)
    return any(long[:i] + long[i + 1:] == short for i in range(len(long)))


def misspelt_key(key: str, known: Iterable[str]) -> str | None:
    """The key of ``known`` that ``key`` misspells, else None: the same letters cased or separated otherwise
    (``time_zone``, ``Admin-User``), or, for keys of 5 letters or more, one letter added, dropped, changed or two
    swapped (``admin_usr``, ``stack_rolback``). The plural of a one-word key (``services``) is taken as a name of
    the user's own, not a typo."""
    known = sorted(known)
    if not isinstance(key, str) or key in known:
        return None
    for name in known:
        if _spelling(key) == _spelling(name):
            return name
        plural = key == f"{name}s" and "_" not in name
        if len(name) >= 5 and not plural and _one_edit(key, name):
            return name
    return None


def misspelt_key_error(data: Mapping[str, Any], known: Iterable[str], where: str) -> BadInput | None:
    """For a deploy whose keys carry no prefix (base: ``timezone``, stack: ``venv``, cluster rejoin: ``lead``), where
    the host's other data cannot be told apart from an unknown key: the first key that misspells one of ``known``
    (:func:`misspelt_key`), as one line; None when there is none. A misspelt key was silently ignored and its
    default used (sweep at 2b91fd1: ``admin_usr=ops`` made the admin ``labadmin``). A value pyinfra read lossily
    from its command line (:func:`cli_data_error`) first."""
    lossy = cli_data_error()
    if lossy is not None:
        return lossy
    names = sorted(set(known))
    for key in sorted(str(k) for k in data):
        near = misspelt_key(key, names)
        if near is not None:
            return BadInput(f"{key}: unknown data key for this deploy (did you mean {near}?); fix or remove it "
                            f"(nothing was changed; its keys are listed in {where})")
    return None


def refuse_misspelt_keys(data: Mapping[str, Any], known: Iterable[str], where: str) -> None:
    """Raise :func:`misspelt_key_error`'s line as a DeployError (pyinfra prints it without a traceback)."""
    error = misspelt_key_error(data, known, where)
    if error is not None:
        raise DeployError(str(error))


#: The ports the services of one host listen on (``openwebui_litellm_port`` is the gateway it calls: not one).
PORT_KEYS = ("llamacpp_port", "tabbyapi_port", "litellm_port", "openwebui_port", "openwebui_pipelines_port",
             "kokoro_port", "vllm_port")
#: Directories a service owns (creates, chowns, replaces): none may be another's, or sit inside a venv.
OWNED_DIR_KEYS = ("tabbyapi_dir", "tabbyapi_venv", "tabbyapi_root", "litellm_venv", "litellm_config_dir",
                  "openwebui_venv", "openwebui_data_dir", "openwebui_config_dir", "openwebui_pipelines_dir",
                  "kokoro_dir", "kokoro_venv", "models_venv", "vllm_venv")
#: Of those, the venvs: a venv is replaced whole (or is a symlink to a stack environment), so nothing lives inside one.
VENV_KEYS = ("tabbyapi_venv", "litellm_venv", "openwebui_venv", "kokoro_venv", "models_venv", "vllm_venv")


def conflict_error(data: Mapping[str, Any], own: Mapping[str, Any]) -> str | None:
    """The first clash between the deploys of one host, as one line naming both keys; None when there is none.

    ``data``: the host's data (every labwright key of the host is in it); ``own``: the running deploy's values of
    its port and directory keys (``{"tabbyapi_port": 5000, "tabbyapi_dir": "/opt/tabbyapi"}``, defaults included),
    which win over ``data``. Checked: two services on one port; one key's directory equal to another's, inside
    another deploy's directory, or inside a venv (``tabbyapi_root`` inside ``tabbyapi_venv``)."""
    values = {key: data.get(key) for key in data if isinstance(key, str)}
    values.update(own)
    ports: dict[int, str] = {}
    for key in (k for k in PORT_KEYS if values.get(k) is not None):
        try:
            number = checks.port(values[key])
        except ValueError:
            continue  # refused by its own deploy's schema
        if number in ports:
            return (f"{ports[number]} and {key} are both port {number} on this host: two services cannot listen on "
                    "one port; give one of them another port (nothing was changed)")
        ports[number] = key
    dirs: list[tuple[str, str]] = []
    for key in OWNED_DIR_KEYS:
        if values.get(key) in (None, ""):
            continue
        try:
            dirs.append((key, checks.abs_path(values[key])))
        except ValueError:
            continue
    for key, path in dirs:
        for other, where in dirs:
            if other == key:
                continue
            inside = path.startswith(where.rstrip("/") + "/")
            if path == where:
                return (f"{key} and {other} are both {path}: each service needs a directory of its own; give one "
                        "of them another path (nothing was changed)")
            if inside and (other in VENV_KEYS or other.split("_", 1)[0] != key.split("_", 1)[0]):
                what = "a venv, replaced whole" if other in VENV_KEYS else "a directory another service owns"
                return (f"{key} ({path}) is inside {other} ({where}), {what}: give {key} a directory outside it "
                        "(nothing was changed)")
    return None
