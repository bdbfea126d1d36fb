"""A bad @lxd/@incus/@pct host name as the connectors raise it inside pyinfra: labwright's one-line BadHostName
that is also pyinfra's ``InventoryError``, which pyinfra's CLI prints for a connector's bad name
(pyinfra.api.exceptions; labwright.inventory catches it as a LabwrightError first)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from pyinfra.api.exceptions import InventoryError

from labwright.hostnames import BadHostName

T = TypeVar("T")


class ConnectorHostName(BadHostName, InventoryError):
    """A host name a connector cannot use, in pyinfra's terms and labwright's."""


def parsed_for_pyinfra(parse: Callable[..., T], *args: object) -> T:
    """``parse(*args)`` (a labwright.hostnames parser) with its BadHostName raised as a ConnectorHostName."""
    try:
        return parse(*args)
    except BadHostName as exc:
        raise ConnectorHostName(str(exc)) from None
