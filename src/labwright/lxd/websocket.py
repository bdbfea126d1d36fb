"""A minimal RFC 6455 websocket client, enough for LXD's exec streams.

Why not a library: ws4py (what pylxd, no longer a dependency, used) runs a thread per
socket and is too slow for a per-command hot path; this needs none. It works on any connected
socket (a unix socket or a TLS socket to an HTTPS remote, see ``LxdClient.new_socket``) and stays
single-threaded, so it is cooperative under gevent's monkey-patching and plain blocking without it.

Reading is incremental: :meth:`WebSocket.read_available` does one ``recv`` (call it when a selector
says the socket is readable) and returns every complete data message, so a caller can multiplex
several websockets with one selector and never block on a half-received frame. Control frames are
handled inside: pings are answered, a close is echoed and ends the stream.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import socket
import ssl
import struct
from collections.abc import Mapping
from dataclasses import dataclass

from labwright.errors import OperationFailed
from labwright.textio import ascii_digits

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

OP_CONTINUATION = 0x0
OP_TEXT = 0x1
OP_BINARY = 0x2
OP_CLOSE = 0x8
OP_PING = 0x9
OP_PONG = 0xA
DATA_OPCODES = (OP_CONTINUATION, OP_TEXT, OP_BINARY)
CONTROL_OPCODES = (OP_CLOSE, OP_PING, OP_PONG)

CLOSE_NORMAL = 1000
CLOSE_PROTOCOL_ERROR = 1002
CLOSE_TOO_BIG = 1009

MAX_HEADER = 64 * 1024
RECV_SIZE = 256 * 1024


class WebSocketError(OperationFailed):
    """The handshake failed or the peer broke the protocol."""


@dataclass(frozen=True)
class Message:
    opcode: int  # OP_TEXT or OP_BINARY
    data: bytes

    @property
    def text(self) -> str:
        return self.data.decode("utf-8")


def accept_key(key: str) -> str:
    """The Sec-WebSocket-Accept a server must answer to Sec-WebSocket-Key ``key``."""
    return base64.b64encode(hashlib.sha1((key + GUID).encode("ascii")).digest()).decode("ascii")


def mask(data: bytes, key: bytes) -> bytes:
    """XOR ``data`` with the 4-byte ``key`` repeated; one big-integer XOR, so megabytes cost milliseconds
    where a byte loop would cost seconds."""
    n = len(data)
    if not n:
        return b""
    stream = (key * (n // 4 + 1))[:n]
    return (int.from_bytes(data, "little") ^ int.from_bytes(stream, "little")).to_bytes(n, "little")


def encode_frame(opcode: int, payload: bytes, fin: bool = True, masked: bool = True) -> bytes:
    """One frame; clients must mask (RFC 6455 5.3), servers must not."""
    first = (0x80 if fin else 0) | opcode
    bit = 0x80 if masked else 0
    n = len(payload)
    if n < 126:
        header = struct.pack("!BB", first, bit | n)
    elif n < 1 << 16:
        header = struct.pack("!BBH", first, bit | 126, n)
    else:
        header = struct.pack("!BBQ", first, bit | 127, n)
    if not masked:
        return header + payload
    key = os.urandom(4)
    return header + key + mask(payload, key)


def _read_http_head(sock: socket.socket) -> tuple[bytes, bytes]:
    """Read up to the blank line ending an HTTP head; return (head, bytes read past it)."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(4096)
        if not chunk:
            raise WebSocketError("websocket handshake: connection closed before the answer's headers ended")
        buf += chunk
        if len(buf) > MAX_HEADER:
            raise WebSocketError("websocket handshake: answer headers too long")
    head, _, rest = buf.partition(b"\r\n\r\n")
    return head, rest


def handshake(sock: socket.socket, host: str, resource: str, headers: Mapping[str, str] | None = None) -> bytes:
    """Upgrade ``sock`` to a websocket on ``resource``; return bytes already read past the answer (the
    start of the frame stream). Raises WebSocketError with the server's reason when it refuses."""
    key = base64.b64encode(os.urandom(16)).decode("ascii")
    lines = [
        f"GET {resource} HTTP/1.1",
        f"Host: {host}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {key}",
        "Sec-WebSocket-Version: 13",
        *(f"{name}: {value}" for name, value in (headers or {}).items()),
    ]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
    head, rest = _read_http_head(sock)
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not ascii_digits(parts[1]):
        raise WebSocketError(f"websocket handshake: not an HTTP answer: {status_line[:100]!r}")
    answer: dict[str, str] = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        answer[name.strip().lower()] = value.strip()
    status = int(parts[1])
    if status != 101:
        # The daemon says why in a (JSON) body; show a bounded piece of it.
        body = rest
        try:
            want = min(int(answer.get("content-length", "0")), 4096)
            while len(body) < want:
                chunk = sock.recv(want - len(body))
                if not chunk:
                    break
                body += chunk
        except (OSError, ValueError):
            pass
        detail = body[:4096].decode("utf-8", "replace").strip()
        raise WebSocketError(f"websocket handshake refused: HTTP {status} {' '.join(parts[2:])}"
                             + (f": {detail}" if detail else ""))
    if answer.get("upgrade", "").lower() != "websocket" or "upgrade" not in answer.get("connection", "").lower():
        raise WebSocketError("websocket handshake: the answer does not upgrade to websocket")
    if answer.get("sec-websocket-accept") != accept_key(key):
        raise WebSocketError("websocket handshake: wrong Sec-WebSocket-Accept")
    return rest


class WebSocket:
    """Client end of one websocket on a connected socket (blocking or gevent-cooperative)."""

    def __init__(self, sock: socket.socket, buffered: bytes = b"", max_message: int = 64 * 1024 * 1024,
                 client: bool = True):
        self.sock = sock
        self.client = client  # a client masks what it sends; the tests' server end does not
        self.max_message = max_message
        self._buf = bytearray(buffered)
        # recv() would allocate (and, at this size, mmap) a fresh buffer per call: ~20 us a read. Made on
        # first use: most of LXD's four exec websockets are never read from.
        self._landing: memoryview | None = None
        self._fragments: list[bytes] = []
        self._fragment_opcode: int | None = None
        self._fragment_size = 0
        self.closed = False  # no more messages will come: close received, EOF, or error
        self.close_sent = False
        self.close_code: int | None = None
        self.close_reason = ""

    @classmethod
    def connect(cls, sock: socket.socket, host: str, resource: str, headers: Mapping[str, str] | None = None,
                max_message: int = 64 * 1024 * 1024) -> WebSocket:
        """Handshake on ``sock`` and return the websocket; the socket is closed when that fails."""
        try:
            rest = handshake(sock, host, resource, headers)
        except BaseException:
            sock.close()
            raise
        return cls(sock, rest, max_message=max_message)

    def fileno(self) -> int:
        return self.sock.fileno()

    # --- sending --------------------------------------------------------------------------------
    def _send_frame(self, opcode: int, payload: bytes, fin: bool = True) -> None:
        self.sock.sendall(encode_frame(opcode, payload, fin=fin, masked=self.client))

    def send(self, data: bytes, opcode: int = OP_BINARY) -> None:
        """Send one message (one frame). Raises OSError when the connection is gone."""
        if self.close_sent:
            raise WebSocketError("websocket: send after close")
        self._send_frame(opcode, data)

    def send_text(self, text: str) -> None:
        self.send(text.encode("utf-8"), OP_TEXT)

    def send_fragmented(self, data: bytes, size: int, opcode: int = OP_BINARY) -> None:
        """Send one message as frames of ``size`` bytes (a first frame, continuations, FIN on the last)."""
        chunks = [data[i:i + size] for i in range(0, len(data), size)] or [b""]
        for index, chunk in enumerate(chunks):
            self._send_frame(opcode if index == 0 else OP_CONTINUATION, chunk, fin=index == len(chunks) - 1)

    def ping(self, data: bytes = b"") -> None:
        self._send_frame(OP_PING, data)

    def send_close(self, code: int = CLOSE_NORMAL, reason: str = "") -> None:
        """Start (or answer) the closing handshake; idempotent, and quiet when the connection is gone."""
        if self.close_sent:
            return
        self.close_sent = True
        try:
            self._send_frame(OP_CLOSE, struct.pack("!H", code) + reason.encode("utf-8")[:120])
        except OSError:
            self.closed = True

    def close(self, code: int = CLOSE_NORMAL, reason: str = "") -> None:
        """Send a close frame (if not yet) and close the socket, without waiting for the answer."""
        self.send_close(code, reason)
        self.closed = True
        with contextlib.suppress(OSError):
            self.sock.close()

    # --- receiving ------------------------------------------------------------------------------
    def _fill(self) -> bool:
        """One ``recv`` into the buffer (plus whatever TLS already decrypted, which a selector cannot
        see); False at EOF or when the connection broke."""
        landing = self._landing
        if landing is None:
            landing = self._landing = memoryview(bytearray(RECV_SIZE))
        try:
            got = self.sock.recv_into(landing)
            if got:
                self._buf += landing[:got]
                while isinstance(self.sock, ssl.SSLSocket) and self.sock.pending():
                    got = self.sock.recv_into(landing)
                    if not got:
                        break
                    self._buf += landing[:got]
        except (ConnectionError, ssl.SSLEOFError):
            got = 0
        if not got:
            self.closed = True
            return False
        return True

    def _frame(self) -> tuple[bool, int, bytes] | None:
        """Take one complete frame off the buffer: (fin, opcode, payload), or None if incomplete."""
        buf = self._buf
        if len(buf) < 2:
            return None
        first, second = buf[0], buf[1]
        if first & 0x70:
            self._fail(CLOSE_PROTOCOL_ERROR, "reserved bits set (no extension was negotiated)")
        fin, opcode = bool(first & 0x80), first & 0x0F
        length, pos = second & 0x7F, 2
        if length == 126:
            if len(buf) < 4:
                return None
            length, pos = struct.unpack_from("!H", buf, 2)[0], 4
        elif length == 127:
            if len(buf) < 10:
                return None
            length, pos = struct.unpack_from("!Q", buf, 2)[0], 10
        if opcode in CONTROL_OPCODES and (length > 125 or not fin):
            self._fail(CLOSE_PROTOCOL_ERROR, "control frame fragmented or over 125 bytes")
        if opcode not in DATA_OPCODES + CONTROL_OPCODES:
            self._fail(CLOSE_PROTOCOL_ERROR, f"unknown opcode {opcode:#x}")
        if length > self.max_message:
            self._fail(CLOSE_TOO_BIG, f"frame of {length} bytes is over the {self.max_message}-byte limit")
        key = None
        if second & 0x80:
            if len(buf) < pos + 4:
                return None
            key, pos = bytes(buf[pos:pos + 4]), pos + 4
        if len(buf) < pos + length:
            return None
        payload = bytes(buf[pos:pos + length])
        del buf[:pos + length]  # cheap: bytearray drops a prefix without moving the rest
        if key is not None:
            payload = mask(payload, key)
        return fin, opcode, payload

    def _fail(self, code: int, why: str) -> None:
        self.close(code, why[:100])
        raise WebSocketError(f"websocket protocol error: {why}")

    def _next_message(self) -> Message | None:
        """The next complete data message in the buffer, handling control frames on the way."""
        while not self.closed or self._buf:
            frame = self._frame()
            if frame is None:
                return None
            fin, opcode, payload = frame
            if opcode == OP_PING:
                if not self.close_sent:
                    try:
                        self._send_frame(OP_PONG, payload)
                    except OSError:
                        self.closed = True
            elif opcode == OP_PONG:
                pass
            elif opcode == OP_CLOSE:
                self.close_code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None
                self.close_reason = payload[2:].decode("utf-8", "replace")
                self.send_close(self.close_code or CLOSE_NORMAL)
                self.closed = True
                self._buf.clear()
                return None
            elif opcode == OP_CONTINUATION:
                if self._fragment_opcode is None:
                    self._fail(CLOSE_PROTOCOL_ERROR, "continuation frame without a message to continue")
                self._fragments.append(payload)
                self._fragment_size += len(payload)
                if self._fragment_size > self.max_message:
                    self._fail(CLOSE_TOO_BIG, f"message over the {self.max_message}-byte limit")
                if fin:
                    message = Message(self._fragment_opcode or OP_BINARY, b"".join(self._fragments))
                    self._fragments, self._fragment_opcode, self._fragment_size = [], None, 0
                    return message
            else:
                if self._fragment_opcode is not None:
                    self._fail(CLOSE_PROTOCOL_ERROR, "new message before the fragmented one ended")
                if fin:
                    return Message(opcode, payload)
                self._fragments, self._fragment_opcode, self._fragment_size = [payload], opcode, len(payload)
        return None

    def read_available(self) -> list[Message]:
        """One read from the socket (call it when it is readable: this blocks otherwise), then every
        complete data message. After EOF or a close frame, ``closed`` is set and no more come."""
        if self.closed:
            return []
        self._fill()
        messages = []
        while (message := self._next_message()) is not None:
            messages.append(message)
        return messages

    def recv(self) -> Message | None:
        """Block until the next data message; None once the peer closed (or the connection ended)."""
        while True:
            message = self._next_message()
            if message is not None:
                return message
            if self.closed or not self._fill():
                return None
