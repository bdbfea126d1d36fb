"""labwright.deploys.stack's host data, read from a mapping (``host.data.dict()``): one line naming a bad key."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyinfra.api.exceptions import DeployError


def value(data: Mapping[str, Any], key: str, default: Any = None) -> Any:
    """``data[key]``, or ``default`` when it is absent or None."""
    found = data.get(key)
    return default if found is None else found


def flag(data: Mapping[str, Any], key: str) -> bool:
    """A boolean as --data or an inventory spells it (true/false, yes/no, on/off, 1/0; absent or "" is false)."""
    found = value(data, key, False)
    if isinstance(found, bool):
        return found
    text = str(found).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise DeployError(f"{key}: {found!r} is not a boolean (use true or false)")


def number(data: Mapping[str, Any], key: str, default: float) -> float:
    try:
        return float(value(data, key, default))
    except (TypeError, ValueError):
        raise DeployError(f"{key}: {data.get(key)!r} is not a number") from None
