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


def error_line(error: ValidationError, model: type[BaseModel] | None = None, prefix: str = "",
               noun: str = "key", where: str = "") -> str:
    """The first error of ``error`` as labwright's one-line refusal: ``KEY: VALUE is not ...; fix`` (nothing was
    changed). An unknown key names the closest known key of ``model`` ("did you mean ...?"), else where the keys
    are listed (``where``) or the known keys. ``noun`` words the unknown key ("data key for this deploy")."""
    first = error.errors(include_url=False)[0]
    loc = first.get("loc", ())
    key = key_name(loc, prefix, model)
    kind = first.get("type", "")
    if kind == "extra_forbidden":
        known = known_keys(model, prefix) if model is not None else []
        near = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        hint = (f"did you mean {near[0]}?" if near else f"the keys are listed in {where}" if where
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
