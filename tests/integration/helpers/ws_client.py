"""A small RFC 6455 client for the tests and benchmarks of the desktop's
WebSocket (the agent's /websockify, sandboxd's /desktop/{id}): the opening
handshake, and frames both well formed and, on purpose, not.

Only loopback and unix sockets are reached.
"""
import base64
import hashlib
import os
import socket
import struct

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class Refused(Exception):
    """The server answered the handshake with something other than 101."""

    def __init__(self, status, headers, body):
        super().__init__(f"HTTP {status}: {body[:200]!r}")
        self.status, self.headers, self.body = status, headers, body


def _read_head(sock, limit=65536):
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError(f"closed during the head: {buf!r}")
        buf += chunk
        if len(buf) > limit:
            raise ConnectionError("head too long")
    head, rest = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, rest


def connect(path, port=None, unix=None, headers=None, protocols=("binary",),
            key=None, timeout=10, host="127.0.0.1", version="13"):
    """Open a WebSocket at path (with its query) on 127.0.0.1:port or a
    unix socket; returns a WebSocket, or raises Refused with the answer."""
    if unix is not None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        sock.connect(unix)
    else:
        sock = socket.create_connection((host, port), timeout=timeout)
    key = key or base64.b64encode(os.urandom(16)).decode()
    lines = [f"GET {path} HTTP/1.1", f"Host: {host}:{port or 0}",
             "Upgrade: websocket", "Connection: Upgrade",
             f"Sec-WebSocket-Key: {key}", f"Sec-WebSocket-Version: {version}"]
    if protocols:
        lines.append("Sec-WebSocket-Protocol: " + ", ".join(protocols))
    for name, value in (headers or {}).items():
        lines.append(f"{name}: {value}")
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    status, hdrs, rest = _read_head(sock)
    if status != 101:
        body = rest
        want = int(hdrs.get("content-length", "0"))
        while len(body) < want:
            chunk = sock.recv(65536)
            if not chunk:
                break
            body += chunk
        sock.close()
        raise Refused(status, hdrs, body)
    accept = base64.b64encode(hashlib.sha1(key.encode() + GUID).digest())
    if hdrs.get("sec-websocket-accept") != accept.decode():
        sock.close()
        raise AssertionError(f"bad Sec-WebSocket-Accept: {hdrs}")
    return WebSocket(sock, rest, hdrs)


def frame(payload, opcode=2, fin=True, mask=True, rsv=0, length=None,
          long_form=None):
    """One frame's bytes. length/long_form let a test lie or use a
    non-minimal length encoding."""
    n = len(payload) if length is None else length
    b0 = (0x80 if fin else 0) | (rsv << 4) | opcode
    form = long_form or (0 if n < 126 else 2 if n < 65536 else 8)
    mbit = 0x80 if mask else 0
    if form == 0:
        head = struct.pack("!BB", b0, mbit | n)
    elif form == 2:
        head = struct.pack("!BBH", b0, mbit | 126, n)
    else:
        head = struct.pack("!BBQ", b0, mbit | 127, n)
    if not mask:
        return head + payload
    key = os.urandom(4)
    masked = bytes(b ^ key[i & 3] for i, b in enumerate(payload)) \
        if len(payload) < 4096 else _mask_fast(payload, key)
    return head + key + masked


def _mask_fast(payload, key):
    n = len(payload)
    k = int.from_bytes((key * (n // 4 + 1))[:n], "big")
    return (int.from_bytes(payload, "big") ^ k).to_bytes(n, "big")


class WebSocket:
    def __init__(self, sock, rest, headers):
        self.sock, self.buf, self.headers = sock, bytearray(rest), headers
        self.data = bytearray()		# binary payload not yet taken
        self.closed_with = None		# (code, reason) of a close frame

    def _fill(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            self.buf += chunk

    def send(self, payload, opcode=2, **kw):
        self.sock.sendall(frame(payload, opcode, **kw))

    def send_raw(self, data):
        self.sock.sendall(data)

    def recv_frame(self):
        """(fin, opcode, payload) of the next frame."""
        self._fill(2)
        b0, b1 = self.buf[0], self.buf[1]
        if b1 & 0x80:
            raise AssertionError("the server masked a frame")
        n, at = b1 & 0x7f, 2
        if n == 126:
            self._fill(4)
            n, at = struct.unpack("!H", self.buf[2:4])[0], 4
        elif n == 127:
            self._fill(10)
            n, at = struct.unpack("!Q", self.buf[2:10])[0], 10
        self._fill(at + n)
        payload = bytes(self.buf[at:at + n])
        del self.buf[:at + n]
        return bool(b0 & 0x80), b0 & 0x0f, payload

    def recv(self, n):
        """Exactly n bytes of the binary stream (frames are no message
        boundaries here); pings are answered, a close frame raises
        ConnectionError."""
        while len(self.data) < n:
            fin, op, payload = self.recv_frame()
            if op in (0, 2):
                self.data += payload
            elif op == 9:
                self.send(payload, opcode=10)
            elif op == 8:
                code = struct.unpack("!H", payload[:2])[0] if payload \
                    else None
                self.closed_with = (code, payload[2:].decode())
                raise ConnectionError(f"closed by the server: "
                                      f"{self.closed_with}")
        out = bytes(self.data[:n])
        del self.data[:n]
        return out

    def recv_close(self):
        """Frames until a close frame: its (code, reason)."""
        while True:
            fin, op, payload = self.recv_frame()
            if op == 8:
                code = struct.unpack("!H", payload[:2])[0] if payload \
                    else None
                self.closed_with = (code, payload[2:].decode())
                return self.closed_with

    def close(self, code=1000):
        try:
            self.send(struct.pack("!H", code), opcode=8)
        except OSError:
            pass
        self.sock.close()
