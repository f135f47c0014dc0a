"""A VNC server (RFB 3.8, security None, a 64x48 screen) that answers
each FramebufferUpdateRequest as told, hostile or not, for
test_hostile_desktop.py. It stands where the desktop's Xvnc would (the
agent starts it as the desktop's user) and writes "PID UID GID" of each
client that connects (SO_PEERCRED) to PEERS.

    python3 rfb_server.py SOCKET ANSWER PEERS

ANSWER: ok (the screen, raw), huge_rect (a raw rectangle far outside the
screen), bad_encoding (an encoding no one knows), colour_map (65535
colour map entries, past any 32-bit screen), cut_text (a ServerCutText
announcing 4 GiB, then closed), truncated (half a rectangle, then
closed), resize (a DesktopSize of 65535x65535).
"""
import os
import socket
import struct
import sys
import threading

WIDTH, HEIGHT = 64, 48
# 32 bits a pixel, depth 24, little endian, true colour, 8 bits each.
PIXEL_FORMAT = struct.pack("!BBBBHHHBBB3x", 32, 24, 0, 1, 255, 255, 255,
                           16, 8, 0)
NAME = b"hostile"
# Bytes after the type of each client message we take (SetEncodings and
# ClientCutText carry more, read below).
CLIENT_MSG = {0: 19, 2: 3, 3: 9, 4: 7, 5: 5, 6: 7}


def recv_exactly(conn, n):
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def rect(x, y, w, h, encoding):
    return struct.pack("!HHHHi", x, y, w, h, encoding)


def update(answer):
    """What a FramebufferUpdateRequest gets; None: close after it."""
    if answer == "ok":
        return (struct.pack("!BxH", 0, 1) + rect(0, 0, WIDTH, HEIGHT, 0) +
                b"\x00\x00\xff\x00" * (WIDTH * HEIGHT), True)
    if answer == "huge_rect":
        return (struct.pack("!BxH", 0, 1) + rect(60000, 60000, 5000, 5000, 0)
                + b"\xff" * 65536, True)
    if answer == "bad_encoding":
        return (struct.pack("!BxH", 0, 1) + rect(0, 0, 8, 8, 0x1234567) +
                b"\xff" * 256, True)
    if answer == "colour_map":
        return (struct.pack("!BxHH", 1, 0, 65535) + b"\xff" * (6 * 65535),
                True)
    if answer == "cut_text":
        return struct.pack("!B3xI", 3, 0xffffffff) + b"x" * 4096, False
    if answer == "truncated":
        return struct.pack("!BxH", 0, 1) + rect(0, 0, 8, 8, 0)[:5], False
    if answer == "resize":
        return (struct.pack("!BxH", 0, 1) + rect(0, 0, 65535, 65535, -223),
                True)
    raise SystemExit(f"unknown answer {answer}")


def serve(conn, answer, peers):
    pid, uid, gid = struct.unpack(
        "3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    with open(peers, "a") as f:
        f.write(f"{pid} {uid} {gid}\n")
    conn.sendall(b"RFB 003.008\n")
    recv_exactly(conn, 12)
    conn.sendall(b"\x01\x01")		# one security type: None
    recv_exactly(conn, 1)
    conn.sendall(b"\0\0\0\0")
    recv_exactly(conn, 1)			# shared
    conn.sendall(struct.pack("!HH", WIDTH, HEIGHT) + PIXEL_FORMAT +
                 struct.pack("!I", len(NAME)) + NAME)
    while True:
        kind = recv_exactly(conn, 1)[0]
        if kind not in CLIENT_MSG:
            return
        body = recv_exactly(conn, CLIENT_MSG[kind])
        if kind == 2:
            recv_exactly(conn, 4 * struct.unpack("!H", body[1:3])[0])
        elif kind == 6:
            recv_exactly(conn, struct.unpack("!I", body[3:7])[0])
        elif kind == 3:
            data, keep = update(answer)
            conn.sendall(data)
            if not keep:
                return


def client(conn, answer, peers):
    try:
        serve(conn, answer, peers)
    except (EOFError, OSError):
        pass
    finally:
        conn.close()


def main():
    path, answer, peers = sys.argv[1:4]
    if os.path.exists(path):
        os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    os.chmod(path, 0o600)
    listener.listen(16)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=client, args=(conn, answer, peers),
                         daemon=True).start()


if __name__ == "__main__":
    main()
