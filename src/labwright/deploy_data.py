"""Inventory data for a deploy: ``PREFIX_KEY`` host data over the defaults of its templates, checked.

Every deploy reads its data the same way, and a bad value is one line naming the data key
(pyinfra prints a ``DeployError`` without a traceback)::

    KEYS = DeployData("llamacpp", load_defaults())
    port = KEYS.int_of("port", KEYS.get("port"), 1, 65535)
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from pyinfra import host
from pyinfra.api.exceptions import DeployError

from labwright.errors import BadInput
from labwright.shell import path_problem

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
        try:
            number = int(str(value).strip())
        except ValueError:
            raise self.fail(key, f"{value!r} is not a whole number") from None
        if number < low or (high is not None and number > high):
            raise self.fail(key, f"{number} is out of range ({low}..{high if high is not None else ''})")
        return number

    def path_of(self, key: str, value: Any, absolute: bool = True) -> str:
        """``value`` as a path that may go into commands and units: refused in one line naming the key when it holds
        shell characters (;|&<>$`), quotes, spaces or line breaks, or (``absolute``) is relative."""
        text = str(value)
        problem = path_problem(text, absolute)
        if problem is not None:
            raise self.fail(key, problem)
        return text

    def bool_of(self, key: str, value: Any) -> bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in TRUE or text in FALSE:
            return text in TRUE
        raise self.fail(key, f"{value!r} is not true or false")


def one_value_problem(value: Any, default: Any) -> str | None:
    """Why ``value`` cannot stand for a key whose default is one value (a string, number or bool): a list/dict (or
    set, tuple) given for it; None when it can. The caller raises it naming the key."""
    if isinstance(default, str | int | float | bool) and isinstance(value, list | dict | tuple | set):
        kind = "true or false" if isinstance(default, bool) else "a number" if isinstance(default, int | float) \
            else "a string"
        return f"{value!r} is a {type(value).__name__}; give one value ({kind}, default {default!r})"
    return None


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

    ``where`` tells the user where the keys are listed (a defaults.toml, a doc)."""
    names = sorted(f"{prefix}_{key}" for key in set(known))
    for key in sorted(str(k) for k in data):
        if key.startswith(f"{prefix}_") and key not in names:
            near = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
            hint = f"did you mean {near[0]}?" if near else f"the {prefix}_* keys are listed in {where}"
            return BadInput(f"{key}: unknown data key for this deploy ({hint}); fix or remove it (nothing was changed)")
    return None


def refuse_unknown_keys(data: Mapping[str, Any], prefix: str, known: Iterable[str], where: str) -> None:
    """Raise :func:`unknown_key_error`'s line as a DeployError (pyinfra prints it without a traceback)."""
    error = unknown_key_error(data, prefix, known, where)
    if error is not None:
        raise DeployError(str(error))
