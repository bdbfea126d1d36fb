"""The websocket client against a real (test-local) RFC 6455 server over unix and TLS sockets.

The server side here is written independently of labwright.lxd.websocket (its own framing, byte-wise
unmasking), so the two cannot agree on a mistake.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import hashlib
import os
import selectors
import socket
import socketserver
import ssl
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from labwright.lxd.websocket import (
    OP_BINARY,
    OP_CLOSE,
    OP_CONTINUATION,
    OP_PING,
    OP_PONG,
    OP_TEXT,
    Message,
    WebSocket,
    WebSocketError,
    accept_key,
    mask,
)

RFC_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


# --- an independent server end ------------------------------------------------------------------
def recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def read_frame(sock: socket.socket) -> tuple[bool, int, bytes, bool]:
    """(fin, opcode, unmasked payload, was masked)."""
    b0, b1 = recv_exact(sock, 2)
    n = b1 & 0x7F
    if n == 126:
        n = struct.unpack("!H", recv_exact(sock, 2))[0]
    elif n == 127:
        n = struct.unpack("!Q", recv_exact(sock, 8))[0]
    key = recv_exact(sock, 4) if b1 & 0x80 else None
    payload = recv_exact(sock, n)
    if key:
        payload = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
    return bool(b0 & 0x80), b0 & 0x0F, payload, key is not None


def frame(opcode: int, payload: bytes, fin: bool = True, rsv: int = 0) -> bytes:
    b0 = (0x80 if fin else 0) | rsv | opcode
    n = len(payload)
    if n < 126:
        return bytes([b0, n]) + payload
    if n < 65536:
        return bytes([b0, 126]) + struct.pack("!H", n) + payload
    return bytes([b0, 127]) + struct.pack("!Q", n) + payload


def server_handshake(sock: socket.socket, answer: Callable[[str], bytes] | None = None, extra: bytes = b"") -> None:
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    headers = {}
    for line in head.decode().split("\r\n")[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    assert headers["upgrade"] == "websocket" and headers["sec-websocket-version"] == "13"
    assert len(base64.b64decode(headers["sec-websocket-key"])) == 16
    accept = base64.b64encode(hashlib.sha1(headers["sec-websocket-key"].encode() + RFC_GUID).digest()).decode()
    response = answer(accept) if answer else (
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Accept: {accept}\r\n\r\n").encode()
    sock.sendall(response + extra)


class Server:
    """Runs ``behaviour(sock)`` for each connection (after the handshake, unless it does its own)."""

    def __init__(self, behaviour: Callable[[socket.socket], None], tmp_path: Path, tls: ssl.SSLContext | None = None,
                 handshake: bool = True):
        self.errors: list[BaseException] = []
        outer = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                sock = self.request
                try:
                    if tls is not None:
                        sock = tls.wrap_socket(sock, server_side=True)
                    if handshake:
                        server_handshake(sock)
                    behaviour(sock)
                except BaseException as exc:  # reported by the test, not lost in a thread
                    outer.errors.append(exc)

        if tls is None:
            self.path = str(tmp_path / "ws.sock")
            self.server: socketserver.BaseServer = socketserver.ThreadingUnixStreamServer(self.path, Handler)
        else:
            self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True  # type: ignore[attr-defined]
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    def raw(self) -> socket.socket:
        if isinstance(self.server, socketserver.ThreadingUnixStreamServer):
            sock = socket.socket(socket.AF_UNIX)
            sock.connect(self.path)
        else:
            sock = socket.create_connection(self.server.server_address)  # type: ignore[arg-type]
        sock.settimeout(10)
        return sock

    def connect(self, **kwargs) -> WebSocket:
        return WebSocket.connect(self.raw(), "localhost", "/1.0/operations/x/websocket?secret=s", **kwargs)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)
        if self.errors:
            raise self.errors[0]


@pytest.fixture
def serve(tmp_path) -> Iterator[Callable[..., Server]]:
    servers: list[Server] = []

    def start(behaviour, **kwargs) -> Server:
        server = Server(behaviour, tmp_path, **kwargs)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def echo(sock: socket.socket) -> None:
    """Echo data messages (reassembled) until a close, which is answered."""
    parts: list[bytes] = []
    first = None
    while True:
        fin, opcode, payload, masked = read_frame(sock)
        assert masked, "a client must mask every frame"
        if opcode == OP_CLOSE:
            with contextlib.suppress(OSError):  # the client may not wait for the answer
                sock.sendall(frame(OP_CLOSE, payload[:2]))
            return
        if opcode == OP_PING:
            sock.sendall(frame(OP_PONG, payload))
            continue
        first = first if opcode == OP_CONTINUATION else opcode
        parts.append(payload)
        if fin:
            sock.sendall(frame(first or OP_BINARY, b"".join(parts)))
            parts = []


def eventually(check: Callable[[], object], timeout: float = 5.0) -> None:
    """Wait for the server thread to have recorded what the test checks."""
    deadline = time.monotonic() + timeout
    while not check() and time.monotonic() < deadline:
        time.sleep(0.01)


# --- tests --------------------------------------------------------------------------------------
def test_accept_key_is_the_rfc_example():
    assert accept_key("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


@pytest.mark.parametrize("size", [0, 1, 3, 4, 5, 1000, 65537])
def test_mask_is_bytewise_xor(size):
    data, key = os.urandom(size), os.urandom(4)
    assert mask(data, key) == bytes(b ^ key[i % 4] for i, b in enumerate(data))
    assert mask(mask(data, key), key) == data


@pytest.mark.parametrize("size", [0, 1, 125, 126, 127, 65535, 65536, 300_000])
def test_echo_of_every_length_encoding(serve, size):
    ws = serve(echo).connect()
    data = os.urandom(size)
    ws.send(data)
    assert ws.recv() == Message(OP_BINARY, data)
    ws.send_text("ünï ✓")
    message = ws.recv()
    assert message is not None and message.opcode == OP_TEXT and message.text == "ünï ✓"
    ws.close()


def test_fragmented_messages_both_ways_with_a_ping_in_between(serve):
    pongs: list[bytes] = []

    def behaviour(sock):
        sock.sendall(frame(OP_TEXT, b"hel", fin=False) + frame(OP_PING, b"are you there")
                     + frame(OP_CONTINUATION, b"lo ", fin=False) + frame(OP_CONTINUATION, b"world"))
        fin, opcode, payload, masked = read_frame(sock)
        assert (fin, opcode, masked) == (True, OP_PONG, True)
        pongs.append(payload)
        echo(sock)

    ws = serve(behaviour).connect()
    assert ws.recv() == Message(OP_TEXT, b"hello world")
    data = os.urandom(10_000)
    ws.send_fragmented(data, 3000)
    assert ws.recv() == Message(OP_BINARY, data)
    ws.close()
    eventually(lambda: pongs)
    assert pongs == [b"are you there"]


def test_server_close_is_echoed_and_ends_the_stream(serve):
    echoed: list[tuple[int, bytes]] = []

    def behaviour(sock):
        sock.sendall(frame(OP_BINARY, b"last") + frame(OP_CLOSE, struct.pack("!H", 1001) + b"going away"))
        _, opcode, payload, _ = read_frame(sock)
        echoed.append((opcode, payload))

    ws = serve(behaviour).connect()
    assert ws.recv() == Message(OP_BINARY, b"last")
    assert ws.recv() is None
    assert ws.closed and ws.close_code == 1001 and ws.close_reason == "going away"
    assert ws.recv() is None
    ws.close()
    eventually(lambda: echoed)
    assert echoed == [(OP_CLOSE, struct.pack("!H", 1001))]


def test_client_close_sends_a_close_frame(serve):
    got: list[tuple[int, int]] = []

    def behaviour(sock):
        _, opcode, payload, masked = read_frame(sock)
        got.append((opcode, struct.unpack("!H", payload[:2])[0]))

    ws = serve(behaviour).connect()
    ws.close()
    ws.close()  # idempotent
    eventually(lambda: got)
    assert got == [(OP_CLOSE, 1000)]
    with pytest.raises(WebSocketError):
        ws.send(b"after close")


def test_abrupt_end_without_close_frame(serve):
    ws = serve(lambda sock: sock.sendall(frame(OP_BINARY, b"partial")[:5])).connect()
    assert ws.recv() is None
    assert ws.closed and ws.close_code is None


def test_frames_sent_with_the_handshake_answer_are_not_lost(serve):
    def behaviour(sock):
        server_handshake(sock, extra=frame(OP_BINARY, b"early") + frame(OP_TEXT, b"bird"))
        read_frame(sock)

    ws = serve(behaviour, handshake=False).connect()
    assert ws.recv() == Message(OP_BINARY, b"early")
    assert ws.recv() == Message(OP_TEXT, b"bird")
    ws.close()


def test_refused_handshake_says_why(serve):
    body = b'{"type":"error","error":"not authorized","error_code":403}'

    def behaviour(sock):
        server_handshake(sock, answer=lambda _: (
            b"HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body))

    server = serve(behaviour, handshake=False)
    with pytest.raises(WebSocketError, match="HTTP 403 Forbidden.*not authorized"):
        server.connect()


def test_wrong_accept_key_is_refused(serve):
    def behaviour(sock):
        server_handshake(sock, answer=lambda accept: (
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Accept: {accept[::-1]}\r\n\r\n").encode())

    with pytest.raises(WebSocketError, match="Sec-WebSocket-Accept"):
        serve(behaviour, handshake=False).connect()


@pytest.mark.parametrize(("wire", "why"), [
    (frame(OP_BINARY, b"x", rsv=0x40), "reserved bits"),
    (frame(OP_CONTINUATION, b"x"), "continuation frame without"),
    (frame(OP_PING, b"p" * 126), "over 125 bytes"),
    (frame(OP_PING, b"p", fin=False), "fragmented"),
    (frame(OP_TEXT, b"a", fin=False) + frame(OP_BINARY, b"b"), "before the fragmented one ended"),
    (frame(0x3, b"x"), "unknown opcode"),
    (frame(OP_BINARY, b"y" * 2000), "over the 1000-byte limit"),
    (frame(OP_BINARY, b"y" * 600, fin=False) + frame(OP_CONTINUATION, b"y" * 600), "over the 1000-byte limit"),
])
def test_protocol_errors_close_the_connection(serve, wire, why):
    closes: list[int] = []

    def behaviour(sock):
        sock.sendall(wire)
        try:
            _, opcode, payload, _ = read_frame(sock)
            closes.append(struct.unpack("!H", payload[:2])[0] if opcode == OP_CLOSE else -opcode)
        except EOFError:
            pass

    ws = serve(behaviour).connect(max_message=1000)
    with pytest.raises(WebSocketError, match=why):
        ws.recv()
    assert ws.closed
    eventually(lambda: closes)
    assert closes in ([1002], [1009])


def test_read_available_never_blocks_on_a_split_frame(serve):
    """A selector loop gets a frame that arrives a few bytes at a time, and nothing before it is whole."""
    data = os.urandom(70_000)

    def behaviour(sock):
        wire = frame(OP_BINARY, data) + frame(OP_TEXT, b"next")
        for piece in (wire[:1], wire[1:3], wire[3:9], wire[9:40_000], wire[40_000:]):
            sock.sendall(piece)
            time.sleep(0.05)
        read_frame(sock)

    ws = serve(behaviour).connect()
    ws.sock.settimeout(None)
    selector = selectors.DefaultSelector()
    selector.register(ws.sock, selectors.EVENT_READ)
    got: list[Message] = []
    empty_reads = 0
    deadline = time.monotonic() + 10
    while len(got) < 2 and time.monotonic() < deadline:
        for _ in selector.select(1):
            messages = ws.read_available()
            empty_reads += not messages
            got += messages
    assert got == [Message(OP_BINARY, data), Message(OP_TEXT, b"next")]
    assert empty_reads >= 3
    ws.close()


def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp_path / "server.crt", tmp_path / "server.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def test_over_tls_with_bursts_of_small_messages(serve, tmp_path):
    """Many messages in one TLS burst: decrypted bytes the selector cannot see must still be read."""
    cert, key = self_signed(tmp_path)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    big = os.urandom(2_000_000)

    def behaviour(sock):
        sock.sendall(b"".join(frame(OP_BINARY, str(i).encode()) for i in range(500)))
        sock.sendall(frame(OP_BINARY, big))
        echo(sock)

    server = serve(behaviour, tls=server_ctx)
    client_ctx = ssl.create_default_context(cafile=str(cert))
    raw = server.raw()
    ws = WebSocket.connect(client_ctx.wrap_socket(raw, server_hostname="localhost"), "localhost", "/")
    ws.sock.settimeout(None)
    selector = selectors.DefaultSelector()
    selector.register(ws.sock, selectors.EVENT_READ)
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(got) < 501 and time.monotonic() < deadline:
        for _ in selector.select(2):  # a lost wake-up shows as a timeout here
            got += [m.data for m in ws.read_available()]
    assert got[:500] == [str(i).encode() for i in range(500)]
    assert got[500] == big
    ws.send(b"over tls")
    assert ws.recv() == Message(OP_BINARY, b"over tls")
    ws.close()
