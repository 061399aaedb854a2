"""A minimal WebSocket client (RFC 6455) for ComfyUI's ``/ws``: enough to read its JSON status
messages. Client frames are masked (RFC 6455 5.3); server text frames are returned as str,
binary frames (ComfyUI's latent previews) as bytes; pings are answered; fragmented messages are
reassembled. No extensions (ComfyUI's aiohttp server negotiates none unless asked), no TLS.
"""

from __future__ import annotations

import base64
import hashlib
import os
import socket
import struct

#: RFC 6455 1.3: the GUID appended to Sec-WebSocket-Key before hashing.
_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
OP_CONT, OP_TEXT, OP_BIN, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA


class WebSocketError(Exception):
    """The handshake was refused or the stream broke the protocol; the message says how."""


def accept_key(key: str) -> str:
    """Sec-WebSocket-Accept for a Sec-WebSocket-Key (RFC 6455 4.2.2)."""
    return base64.b64encode(hashlib.sha1((key + _GUID).encode()).digest()).decode()


def encode_frame(opcode: int, payload: bytes, mask: bytes | None = None) -> bytes:
    """One final client frame, masked with ``mask`` (4 random bytes when None)."""
    mask = os.urandom(4) if mask is None else mask
    head = bytes([0x80 | opcode])
    n = len(payload)
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 1 << 16:
        head += bytes([0x80 | 126]) + struct.pack(">H", n)
    else:
        head += bytes([0x80 | 127]) + struct.pack(">Q", n)
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


class WebSocket:
    """A connected client socket: :meth:`recv` returns the next message, None once closed."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buf = b""

    @classmethod
    def connect(cls, host: str, port: int, path: str, timeout: float = 30.0) -> WebSocket:
        """Open ``ws://host:port/path``. Raises WebSocketError when the server does not switch
        protocols (status other than 101, or a wrong Sec-WebSocket-Accept), OSError on network
        failure."""
        sock = socket.create_connection((host, port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        sock.sendall(
            (
                f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        ws = cls(sock)
        head = ws._read_until(b"\r\n\r\n").decode("latin-1")
        lines = head.split("\r\n")
        if len(lines[0].split()) < 2 or lines[0].split()[1] != "101":
            sock.close()
            raise WebSocketError(f"ws://{host}:{port}{path}: no protocol switch: {lines[0]!r}")
        headers = {
            k.strip().lower(): v.strip()
            for k, _, v in (line.partition(":") for line in lines[1:] if line)
        }
        if headers.get("sec-websocket-accept") != accept_key(key):
            sock.close()
            raise WebSocketError(f"ws://{host}:{port}{path}: bad Sec-WebSocket-Accept")
        return ws

    def _read_until(self, marker: bytes) -> bytes:
        while marker not in self._buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise WebSocketError("connection closed during the handshake")
            self._buf += chunk
        head, _, self._buf = self._buf.partition(marker)
        return head

    def _read(self, n: int) -> bytes:
        while len(self._buf) < n:
            chunk = self.sock.recv(max(65536, n - len(self._buf)))
            if not chunk:
                raise WebSocketError("connection closed mid-frame")
            self._buf += chunk
        data, self._buf = self._buf[:n], self._buf[n:]
        return data

    def _frame(self) -> tuple[bool, int, bytes]:
        b0, b1 = self._read(2)
        fin, opcode, masked, n = bool(b0 & 0x80), b0 & 0x0F, bool(b1 & 0x80), b1 & 0x7F
        if n == 126:
            n = struct.unpack(">H", self._read(2))[0]
        elif n == 127:
            n = struct.unpack(">Q", self._read(8))[0]
        mask = self._read(4) if masked else None
        payload = self._read(n)
        if mask:
            payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        return fin, opcode, payload

    def recv(self) -> str | bytes | None:
        """The next text (str) or binary (bytes) message; None when the server closed.
        Raises socket.timeout when nothing arrives within the socket's timeout."""
        parts: list[bytes] = []
        first = None
        while True:
            fin, opcode, payload = self._frame()
            if opcode == OP_PING:
                self.sock.sendall(encode_frame(OP_PONG, payload))
                continue
            if opcode == OP_PONG:
                continue
            if opcode == OP_CLOSE:
                try:
                    self.sock.sendall(encode_frame(OP_CLOSE, payload[:2]))
                except OSError:
                    pass
                return None
            if opcode != OP_CONT:
                first = opcode
            parts.append(payload)
            if fin:
                data = b"".join(parts)
                return data.decode() if first == OP_TEXT else data

    def close(self) -> None:
        """Send a close frame (status 1000) and close the socket."""
        try:
            self.sock.sendall(encode_frame(OP_CLOSE, struct.pack(">H", 1000)))
        except OSError:
            pass
        self.sock.close()
