"""Proof that a refusal contacted nothing: every ``socket.connect`` (TCP, UDP, a unix socket such as LXD's) and every
name lookup made while :func:`no_contact` is active is recorded and refused (``ConnectionRefusedError``), so a
command that should have stopped at its input check and went on shows up in ``attempts``.

::

    with no_contact() as attempts:
        code = main(["guest", "snapshots", "@lxd/x1"])
    assert attempts == []
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def no_contact() -> Iterator[list[str]]:
    attempts: list[str] = []
    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex
    real_lookup = socket.getaddrinfo

    def connect(self: socket.socket, address: Any) -> None:
        attempts.append(f"connect {address!r}")
        raise ConnectionRefusedError(f"no_contact: connect to {address!r} refused")

    def connect_ex(self: socket.socket, address: Any) -> int:
        attempts.append(f"connect {address!r}")
        return 111

    def lookup(host: Any, *args: Any, **kwargs: Any) -> Any:
        attempts.append(f"getaddrinfo {host!r}")
        raise socket.gaierror(f"no_contact: lookup of {host!r} refused")

    socket.socket.connect, socket.socket.connect_ex = connect, connect_ex  # type: ignore[method-assign]
    socket.getaddrinfo = lookup
    try:
        yield attempts
    finally:
        socket.socket.connect, socket.socket.connect_ex = real_connect, real_connect_ex  # type: ignore[method-assign]
        socket.getaddrinfo = real_lookup
