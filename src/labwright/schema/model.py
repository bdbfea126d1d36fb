"""The base of every schema, and the one way a pydantic ``ValidationError`` reaches the user.

::

    class TabbyData(Schema):
        port: Port = 5000
        data_dir: ManagedDir = "/srv/tabbyapi"

    settings = parse(TabbyData, {"port": 99999}, prefix="tabbyapi", error=DeployError)
    # DeployError: tabbyapi_port: 99999 is out of range (a port is 1-65535)

A refusal is one line: the key as the user wrote it (``tabbyapi_port``; ``build[1]`` for an item of a list), what
is wrong with the value, and the fix; an unknown key names the closest known key ("did you mean ...?").

This module imports pydantic: import it inside the function that parses data, never at a CLI module's top.
"""

from __future__ import annotations

import difflib
import re
import typing
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from labwright.errors import BadInput

M = TypeVar("M", bound=BaseModel)


class Schema(BaseModel):
    """A schema: unknown keys refused, defaults checked like given values, the parsed object frozen. Fields use the
    types of :mod:`labwright.schema.fields` (strict where a loose reading would be wrong: ``StrictBool``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, hide_input_in_errors=False)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


def key_name(loc: Iterable[int | str], prefix: str = "", model: type[BaseModel] | None = None) -> str:
    """The key of an error's ``loc`` as the user wrote it: ``PREFIX_KEY`` (the field's alias if it has one), then
    ``[N]`` for a list item and ``.KEY`` for a table's key."""
    parts = list(loc)
    if not parts:
        return prefix or (model.__name__ if model is not None else "input")
    first = str(parts[0])
    if model is not None and first in model.model_fields:
        first = model.model_fields[first].alias or first
    text = f"{prefix}_{first}" if prefix else first
    for part in parts[1:]:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text


def known_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every top-level key ``model`` reads, as the user writes it."""
    names = [field.alias or name for name, field in model.model_fields.items()]
    return sorted(f"{prefix}_{name}" if prefix else name for name in names)


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    """The model a field's type holds (``Item``, ``tuple[Item, ...]``, ``Item | None``, ``Annotated[...]``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _nested_model(arg)
        if found is not None:
            return found
    return None


def model_at(model: type[BaseModel] | None, loc: Iterable[int | str]) -> type[BaseModel] | None:
    """The model whose key the last part of ``loc`` is: ``model`` itself for a top-level key, the item's model for
    ``("mounts", 0, "ro")``; None when a part is not a model's field."""
    current = model
    for part in list(loc)[:-1]:
        if isinstance(part, int):
            continue
        if current is None:
            return None
        fields = {field.alias or name: field for name, field in current.model_fields.items()}
        field = current.model_fields.get(str(part)) or fields.get(str(part))
        current = _nested_model(field.annotation) if field is not None else None
    return current


def error_line(error: ValidationError, model: type[BaseModel] | None = None, prefix: str = "",
               noun: str = "key", where: str = "") -> str:
    """The first error of ``error`` as labwright's one-line refusal: ``KEY: VALUE is not ...; fix`` (nothing was
    changed); an unknown key first (a typo is likelier the cause than the errors it leads to). An unknown key names
    the closest known key of its model (``model``, or the model of the list item or table it is in: "did you mean
    ...?"), else where the keys are listed (``where``) or the known keys. ``noun`` words the unknown key ("data key
    for this deploy")."""
    errors = error.errors(include_url=False)
    first = next((found for found in errors if found.get("type") == "extra_forbidden"), errors[0])
    loc = first.get("loc", ())
    key = key_name(loc, prefix, model)
    kind = first.get("type", "")
    if kind == "extra_forbidden":
        owner = model_at(model, loc)
        nested = len(tuple(loc)) > 1
        known = (known_keys(owner) if nested else known_keys(owner, prefix)) if owner is not None else []
        near = difflib.get_close_matches(str(tuple(loc)[-1]) if nested else key, known, n=1, cutoff=0.6)
        hint = (f"did you mean {near[0]}?" if near else f"the keys are listed in {where}" if where and not nested
                else f"known keys: {', '.join(known)}" if known else "no keys are read here")
        return one_line(f"{key}: unknown {noun} ({hint}); fix or remove it (nothing was changed)")
    message = str(first.get("msg", "is not valid"))
    if kind == "value_error":
        message = message.removeprefix("Value error, ")
    elif kind == "missing":
        message = "is required; give it"
    else:
        message = f"{_show(first.get('input'))}: {message[:1].lower()}{message[1:]}"
    return one_line(f"{key}: {message}")


def one_line(text: str) -> str:
    """``text`` with its line breaks and other control characters written as escapes: one line whatever the
    input held."""
    return re.sub(r"[\x00-\x1f\x7f]", lambda m: repr(m.group())[1:-1], text)


def parse(model: type[M], data: Mapping[str, Any], prefix: str = "",
          error: Callable[[str], Exception] = BadInput, **line: str) -> M:
    """``data`` checked as ``model``; a refusal raised as ``error(error_line(...))`` (``BadInput`` for the CLI,
    ``DeployError`` in a deploy: pyinfra prints it without a traceback). ``line``: ``noun``/``where`` of
    :func:`error_line`."""
    try:
        return model.model_validate(dict(data))
    except ValidationError as found:
        raise error(error_line(found, model, prefix, **line)) from None
