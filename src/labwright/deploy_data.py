"""Inventory data for a deploy: ``PREFIX_KEY`` host data over the defaults of its templates, checked.

Every deploy reads its data the same way, and a bad value is one line naming the data key
(pyinfra prints a ``DeployError`` without a traceback)::

    KEYS = DeployData("llamacpp", load_defaults())
    port = KEYS.int_of("port", KEYS.get("port"), 1, 65535)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from pyinfra import host
from pyinfra.api.exceptions import DeployError

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
        """The host's ``PREFIX_KEY``, else the default of ``key`` in ``section``."""
        value = (host.data if self.data is None else self.data).get(f"{self.prefix}_{key}")
        return self.defaults[section].get(key) if value is None else value

    def int_of(self, key: str, value: Any, low: int, high: int | None = None) -> int:
        try:
            number = int(str(value).strip())
        except ValueError:
            raise self.fail(key, f"{value!r} is not a whole number") from None
        if number < low or (high is not None and number > high):
            raise self.fail(key, f"{number} is out of range ({low}..{high if high is not None else ''})")
        return number

    def bool_of(self, key: str, value: Any) -> bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in TRUE or text in FALSE:
            return text in TRUE
        raise self.fail(key, f"{value!r} is not true or false")
