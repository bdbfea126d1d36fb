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


@pytest.mark.parametrize("body", [b"<html>502 Bad Gateway</html>", b'["not", "an object"]', b'{"type": "sy'])
def test_an_answer_that_is_not_an_lxd_object_is_one_line(tmp_path, body):
    """What a daemon in the middle of a restart (or a proxy in front of it) can send: LxdError, not a traceback."""
    import threading

    from labwright.errors import LxdError

    path = str(tmp_path / "unix.socket")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(8)
    stop = threading.Event()

    def answer() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                request = b""
                while b"\r\n\r\n" not in request:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    request += chunk
                head, _, rest = request.partition(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                while len(rest) < length:
                    rest += conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                             + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        client = LxdClient(Endpoint(socket_path=path), timeout=10)
        for call in (client.server, lambda: client.exec("c1", ["true"])):
            with pytest.raises(LxdError) as err:
                call()
            assert "\n" not in str(err.value) and ("non-JSON" in str(err.value) or "instead of an object"
                                                   in str(err.value) or "no usable answer" in str(err.value))
    finally:
        stop.set()
        server.shutdown(socket.SHUT_RDWR)  # wakes the accept() (close alone does not on Linux)
        server.close()
        thread.join(timeout=10)
        assert not thread.is_alive(), "the stand-in LXD socket's thread did not end within 10 s"
