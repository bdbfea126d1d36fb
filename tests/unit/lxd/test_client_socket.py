"""The local-socket client's errors when no daemon listens (a fresh or rebooted machine)."""

from __future__ import annotations

import socket

import pytest

from labwright.errors import OperationFailed
from labwright.lxd.client import Endpoint, LxdClient


def test_stale_socket_file_is_a_one_line_operation_failed(tmp_path):
    # A daemon that died leaves its socket file: connect() is refused. That must read as "not
    # running" (OperationFailed, which ensure_daemon treats as "start it"), not a traceback.
    path = str(tmp_path / "unix.socket")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    sock.close()
    client = LxdClient(Endpoint(socket_path=path), timeout=2)
    with pytest.raises(OperationFailed) as err:
        client.server()
    assert path in str(err.value) and "unreachable" in str(err.value)
    assert "\n" not in str(err.value)


def test_missing_socket_file_names_the_path(tmp_path):
    path = str(tmp_path / "gone.socket")
    client = LxdClient(Endpoint(socket_path=path), timeout=2)
    with pytest.raises(OperationFailed, match="gone.socket"):
        client.server()
