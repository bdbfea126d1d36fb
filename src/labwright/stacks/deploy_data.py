"""labwright.deploys.stack's host data, read from a mapping (``host.data.dict()``): one line naming a bad key."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from pyinfra.api.exceptions import DeployError

from labwright.schema import checks

T = TypeVar("T")


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


def number(data: Mapping[str, Any], key: str, default: float) -> float:
    try:
        return float(value(data, key, default))
    except (TypeError, ValueError):
        raise DeployError(f"{key}: {data.get(key)!r} is not a number") from None


def directory(data: Mapping[str, Any], key: str, default: str | None = None) -> str:
    """A directory the stack deploy owns (``venv``, ``stacks_root``): absolute, normalised, not a system directory
    such as /usr or /etc (labwright.schema.checks.managed_dir); a refusal names the key."""
    return checked(key, value(data, key, default), checks.managed_dir)


def keep(data: Mapping[str, Any]) -> int:
    """``keep``: how many stack environments stay (current included), a whole number from 1 (default 2)."""
    return checked("keep", value(data, "keep", 2), checks.whole(1))


def seconds(data: Mapping[str, Any], key: str, default: float) -> float:
    """A wait in seconds (``health_timeout``): a number of seconds or a duration such as 90s, 5m."""
    return checked(key, value(data, key, default), checks.duration)
