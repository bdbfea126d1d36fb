"""Commands and facts as JSON data, for the operation and fact harnesses (tests/unit/operations, tests/unit/facts).

The shape follows pyinfra's own data tests (pyinfra-dev/pyinfra at ed67e748, tests/util.py ``get_command_string``
and ``parse_value``, tests/test_operations.py ``parse_commands``): a shell command is its string, a
``FunctionCommand`` its function's name with its arguments, an upload its destination with its content. Two
additions for labwright's long commands, so a data file stays readable without hiding anything:

- ``{"argv": [...]}``: the command split as the shell splits it (``shlex.split``); an element may be
  ``{"json": VALUE}`` (the word parses as this JSON), ``{"same_as": "module:NAME"}`` (the word is that constant:
  a script that has its own tests, e.g. ``labwright.operations.http:SCRIPT``) or ``{"regex": PATTERN}`` (the
  whole word matches: a per-run token);
- ``{"shell": [...]}``: the command as fragments joined end to end, a fragment a string or ``{"same_as": ...}``.

An upload is ``{"upload": DEST, ...}`` (DEST a string, or a word as above) with one or more of ``"lines"`` (the
text's lines), ``"json"`` (the text parsed), ``"sha256"`` (the bytes) or ``"local_path"`` (a file on the
controller, itself a string or ``{"same_as": "module:function()"}``).

Every actual value is rendered in the shape the expected value asks for, so a mismatch shows as a plain diff.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import importlib
import json
import re
import shlex
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from pyinfra.api import FileUploadCommand, FunctionCommand, StringCommand


def resolve(reference: str) -> Any:
    """``"module:NAME"`` -> that attribute; ``"module:function()"`` -> what calling it returns."""
    module_name, _, attribute = reference.partition(":")
    call = attribute.endswith("()")
    value = getattr(importlib.import_module(module_name), attribute.removesuffix("()"))
    return value() if call else value


def encode(value: Any) -> Any:
    """A Python value as JSON data: a dataclass is ``{ClassName: {fields that differ from their default}}``."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {}
        for item in dataclasses.fields(value):
            if not item.compare:
                continue
            current = getattr(value, item.name)
            default = (item.default if item.default is not dataclasses.MISSING
                       else item.default_factory() if item.default_factory is not dataclasses.MISSING
                       else dataclasses.MISSING)
            if current != default:
                fields[item.name] = encode(current)
        return {type(value).__name__: fields}
    if isinstance(value, Mapping):
        return {str(key): encode(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode(item) for item in value]
    if isinstance(value, Path):
        return str(value)
    return value


def _content(src: Any) -> bytes:
    if hasattr(src, "read"):
        src.seek(0)
        data = src.read()
        src.seek(0)
        return data.encode() if isinstance(data, str) else data
    return Path(src).read_bytes()


def render_command(command: Any, expected: Any) -> Any:
    """``command`` (what an operation yielded) in the shape of ``expected`` (its data file's entry)."""
    if isinstance(command, str):
        command = StringCommand(command.strip())
    if isinstance(command, StringCommand):
        text = command.get_raw_value()
        if isinstance(expected, Mapping) and "argv" in expected:
            return {"argv": _render_argv(shlex.split(text), expected["argv"])}
        if isinstance(expected, Mapping) and "shell" in expected:
            return {"shell": _render_fragments(text, expected["shell"])}
        return text
    if isinstance(command, FunctionCommand):
        return {"function": command.function.__name__, "args": encode(list(command.args)),
                "kwargs": encode(dict(command.kwargs))}
    if isinstance(command, FileUploadCommand):
        wanted = expected if isinstance(expected, Mapping) and "upload" in expected else {"lines": None}
        rendered: dict[str, Any] = {"upload": _render_word(str(command.dest), wanted.get("upload"))}
        data = _content(command.src)
        if "lines" in wanted:
            rendered["lines"] = data.decode(errors="replace").splitlines()
        if "json" in wanted:
            rendered["json"] = json.loads(data)
        if "sha256" in wanted:
            rendered["sha256"] = hashlib.sha256(data).hexdigest()
        if "local_path" in wanted:
            path = None if hasattr(command.src, "read") else str(command.src)
            rendered["local_path"] = _render_word(path, wanted["local_path"])
        return rendered
    raise AssertionError(f"{command!r}: not a command the data format knows (string, function, upload)")


def _render_word(word: Any, expected: Any) -> Any:
    if isinstance(expected, Mapping) and "regex" in expected:
        return dict(expected) if isinstance(word, str) and re.fullmatch(expected["regex"], word) else word
    if isinstance(expected, Mapping) and "same_as" in expected:
        return dict(expected) if word == str(resolve(expected["same_as"])) else word
    if isinstance(expected, Mapping) and "json" in expected:
        try:
            return {"json": json.loads(word)}
        except (TypeError, ValueError):
            return word
    return word


def _render_argv(words: list[str], expected: list[Any]) -> list[Any]:
    return [_render_word(word, expected[index] if index < len(expected) else None)
            for index, word in enumerate(words)]


def _render_fragments(text: str, expected: list[Any]) -> list[Any]:
    """Consume ``text`` fragment by fragment; the first fragment that does not match takes the rest as it is."""
    rendered: list[Any] = []
    rest = text
    for fragment in expected:
        value = str(resolve(fragment["same_as"])) if isinstance(fragment, Mapping) else fragment
        if not rest.startswith(value):
            break
        rendered.append(fragment)
        rest = rest[len(value):]
    if rest:
        rendered.append(rest)
    return rendered


def render_commands(commands: list[Any], expected: list[Any]) -> list[Any]:
    return [render_command(command, expected[index] if index < len(expected) else None)
            for index, command in enumerate(commands)]


def fact_key(fact_class: type) -> str:
    """How a data file names a fact: ``files.File`` for pyinfra's, ``labwright.git.GitCheckout`` for ours."""
    module = fact_class.__module__
    for prefix, shown in (("pyinfra.facts.", ""), ("labwright.facts.", "labwright.")):
        if module.startswith(prefix):
            return f"{shown}{module.removeprefix(prefix)}.{fact_class.__name__}"
    raise AssertionError(f"{module}.{fact_class.__name__}: not a pyinfra or labwright fact")


SRC = Path(__file__).resolve().parents[2] / "src" / "labwright"


def defined_outside(package: ModuleType, decorator: str | None = None, base: str | None = None) -> list[str]:
    """``labwright.MODULE.NAME`` for each module-level ``@<decorator>`` function or ``class X(<base>)`` in labwright's
    source outside ``package`` (operations a feature keeps beside its own code: snapshots.deploy; facts a deploy keeps:
    deploys.model), read from the source so that a new one elsewhere cannot escape the completeness tests. Operations
    made inside a function (guestlock.lock_operations) are not module-level: the lab tests cover them."""
    inside = Path(str(package.__file__)).resolve().parent
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if inside in path.parents:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        module = ".".join(("labwright", *path.relative_to(SRC).with_suffix("").parts))
        for node in tree.body:
            if decorator and isinstance(node, ast.FunctionDef) and any(
                    _name(d.func if isinstance(d, ast.Call) else d) == decorator for d in node.decorator_list):
                found.append(f"{module}.{node.name}")
            if base and isinstance(node, ast.ClassDef) and any(_name(b) == base for b in node.bases):
                found.append(f"{module}.{node.name}")
    return found


def _name(node: ast.expr) -> str:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""


def object_named(directory: str, package: str) -> Any:
    """A data directory's operation or fact: ``module.NAME`` in ``package``, or a full ``labwright.MODULE.NAME``."""
    module_name, name = directory.rsplit(".", 1)
    if not module_name.startswith("labwright."):
        module_name = f"{package}.{module_name}"
    return getattr(importlib.import_module(module_name), name)


def defined_in(package: ModuleType, keep: Callable[[Any], bool]) -> list[str]:
    """``module.NAME`` for what each module of ``package`` (labwright.operations, labwright.facts) defines itself and
    ``keep`` accepts: every operation, every fact, so that a new one without data fails the completeness test."""
    found = []
    for path in sorted(Path(str(package.__file__)).resolve().parent.glob("*.py")):
        if path.name == "__init__.py":
            continue
        module = importlib.import_module(f"{package.__name__}.{path.stem}")
        found += [f"{path.stem}.{name}" for name, value in vars(module).items()
                  if getattr(value, "__module__", None) == module.__name__ and keep(value)]
    return found
