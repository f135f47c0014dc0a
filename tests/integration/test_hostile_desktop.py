"""Hostile viewers of the desktop's web viewer: no token, a wrong one,
another sandbox's; malformed and oversized WebSocket frames; a viewer that
never reads; many viewers coming and going. A hostile VNC server (the
user's: Xvnc runs as them) before the computer tool. Against the agent's
/websockify (a real Xvnc the agent starts) and sandboxd's /desktop/{id}
(the filesystem image, which carries a desktop). Each must be refused or
bounded, no VNC byte may reach an unauthenticated client, no token may
reach a log, and the agent and sandboxd keep serving with their
descriptors back where they were. A desktop link's token opens that
desktop and nothing else.

Everything is on 127.0.0.1, unix sockets, and containers made here.
"""
import os
import socket
import struct
import subprocess
import time
import uuid

import pytest
import requests

import ws_client
from conftest import AGENT_BIN, ROOT, rss_kib
from sandboxd_fixtures import docker, minimal_tag, start_sandboxd  # noqa: F401
from test_agent_computer import (USER, desktop_dir,  # noqa: F401
                                 png_of, start_desktop)
from test_agent_desktop_web import read_update, rfb_handshake, web_desktop  # noqa: F401
from test_images_desktop import TAG, desktop_token, viewer

MiB = 1024 * 1024


def open_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def settle(pid, want, timeout=10):
    """Wait until pid has want descriptors open (or fewer); the count."""
    deadline = time.time() + timeout
    while open_fds(pid) > want and time.time() < deadline:
        time.sleep(0.05)
    return open_fds(pid)


def ask_for_screens(ws, n=100):
    """Ask for a full screen, raw (4 MiB), every 30 ms for 3 s: a VNC
    server sends the next one whenever the last has left it, so 400 MiB
    head for a relay that reads them all."""
    for _ in range(n):
        ws.send(struct.pack("!BBHHHH", 3, 0, 0, 0, 1280, 800))
        time.sleep(0.03)


def raw_upgrade(port, path, headers=()):
    """An upgrade request on a plain socket: everything the server sends
    until it closes."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    lines = [f"GET {path} HTTP/1.1", "Host: x", "Upgrade: websocket",
             "Connection: Upgrade", "Sec-WebSocket-Version: 13",
             "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
             "Sec-WebSocket-Protocol: binary", *headers]
    s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    return data


def refused_whole(data, status, body):
    """data is exactly one refusal: its head and body, no byte more (no
    VNC greeting behind it)."""
    head, _, rest = data.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {status} ".encode()), head
    assert rest == body, rest
    assert b"RFB" not in data


# ---- the agent ------------------------------------------------------------------

def test_the_agent_refuses_viewers_without_its_token(web_desktop):
    a = web_desktop()
    for path, headers, detail in (
            ("/websockify", (), b'{"detail":"Not authenticated"}'),
            (f"/websockify?password={a.token}x", (),
             b'{"detail":"Invalid token"}'),
            ("/websockify", ("Authorization: Bearer nope",),
             b'{"detail":"Invalid token"}'),
            # The page's cookie is for its files, never for the socket.
            ("/websockify", (f"Cookie: sandbox_vnc={a.token}",),
             b'{"detail":"Not authenticated"}')):
        refused_whole(raw_upgrade(a.port, path, headers), 403, detail)
    for path in ("/vnc/vnc_relay.html", "/vnc/core/rfb.js"):
        r = requests.get(a.url + path, params={"password": "x" + a.token})
        assert r.status_code == 403 and "Set-Cookie" not in r.headers
    # The right one, once: the token is in no line of the log.
    ws = ws_client.connect(f"/websockify?password={a.token}", port=a.port)
    assert ws.recv(12) == b"RFB 003.008\n"
    ws.close()
    requests.get(a.url + "/vnc/vnc_relay.html", params={"password": a.token})
    time.sleep(0.2)
    log = a.read_log()
    assert "/websockify" in log and a.token not in log


BAD_FRAMES = [
    ("unmasked", ws_client.frame(b"x", mask=False), 1002),
    ("reserved bit", ws_client.frame(b"x", rsv=4), 1002),
    ("unknown opcode", ws_client.frame(b"x", opcode=3), 1002),
    ("long ping", ws_client.frame(b"p" * 126, opcode=9), 1002),
    ("fragmented ping", ws_client.frame(b"p", opcode=9, fin=False), 1002),
    ("long form of a short length",
     ws_client.frame(b"hello", long_form=2), 1002),
    ("top bit of a 64-bit length",
     ws_client.frame(b"", length=1 << 63, long_form=8), 1002),
    ("continuation outside a message", ws_client.frame(b"x", opcode=0), 1002),
    ("new message inside a fragmented one",
     ws_client.frame(b"", fin=False) + ws_client.frame(b"x"), 1002),
    ("text", ws_client.frame(b"hi", opcode=1), 1003),
    ("one-byte close", ws_client.frame(b"\x03", opcode=8), 1002),
    ("close code 1005", ws_client.frame(struct.pack("!H", 1005), opcode=8),
     1002),
    ("close reason not UTF-8",
     ws_client.frame(struct.pack("!H", 1000) + b"\xff\xfe", opcode=8), 1007),
    ("frame over the limit", ws_client.frame(b"", length=5 * MiB), 1009),
    ("frame of a terabyte", ws_client.frame(b"", length=1 << 40), 1009),
]


@pytest.mark.parametrize("what,data,code", BAD_FRAMES,
                         ids=[b[0] for b in BAD_FRAMES])
def test_malformed_frames_close_the_viewer_alone(web_desktop, what, data,
                                                 code):
    a = web_desktop()
    good = ws_client.connect(f"/websockify?password={a.token}", port=a.port)
    bad = ws_client.connect(f"/websockify?password={a.token}", port=a.port)
    assert bad.recv(12) == b"RFB 003.008\n"
    bad.send_raw(data)
    got, _ = bad.recv_close()
    assert got == code, what
    # The server's side is gone: the connection ends.
    bad.sock.settimeout(10)
    assert bad.sock.recv(1) == b""
    bad.sock.close()
    # The others are unharmed.
    assert rfb_handshake(good)[2] == "sandbox"
    good.close()
    assert a.get("/healthz").status_code == 200


@pytest.mark.memory
def test_large_frames_stream_through_without_being_held(web_desktop):
    a = web_desktop()
    ws = ws_client.connect(f"/websockify?password={a.token}", port=a.port)
    rfb_handshake(ws)
    before = rss_kib(a.proc.pid)
    # 4 MiB frames (the limit) of pointer events, each frame streamed on
    # to the VNC server as it comes, never held whole.
    moves = b"".join(struct.pack("!BBHH", 5, 0, i % 1280, i % 800)
                     for i in range(4 * MiB // 6))
    for _ in range(3):
        ws.send(moves)
    ws.send(b"ping", opcode=9)
    while ws.recv_frame()[1] != 10:
        pass
    assert rss_kib(a.proc.pid) - before < 2048
    ws.close()


@pytest.mark.memory
def test_a_viewer_that_never_reads_costs_a_bounded_buffer(web_desktop):
    a = web_desktop()
    cursor = {"tool_name": "computer", "arguments": {"action":
                                                     "get_cursor_position"}}
    assert a.post("/mcp/call_tool", cursor).json()["isError"] is False
    fds = open_fds(a.proc.pid)	# the computer tool's connections in
    stuck = ws_client.connect(f"/websockify?password={a.token}", port=a.port)
    rfb_handshake(stuck)
    stuck.send(struct.pack("!BBHi", 2, 0, 1, 0))
    before = rss_kib(a.proc.pid)
    ask_for_screens(stuck)
    assert rss_kib(a.proc.pid) - before < 8 * 1024
    # Meanwhile another viewer and the computer tool are served.
    other = ws_client.connect(f"/websockify?password={a.token}",
                              port=a.port)
    rfb_handshake(other)
    other.send(struct.pack("!BBHi", 2, 0, 1, 0))
    other.send(struct.pack("!BBHHHH", 3, 0, 0, 0, 64, 64))
    assert sum(w * h for _, _, w, h, _ in read_update(other)) == 64 * 64
    other.close()
    assert a.post("/mcp/call_tool", cursor).json()["isError"] is False
    stuck.sock.close()
    assert settle(a.proc.pid, fds) == fds


def test_viewers_come_and_go_and_leave_nothing_open(web_desktop):
    a = web_desktop()
    ws_client.connect(f"/websockify?password={a.token}", port=a.port).close()
    time.sleep(0.3)
    fds = open_fds(a.proc.pid)
    for _ in range(3):
        views = [ws_client.connect(f"/websockify?password={a.token}",
                                   port=a.port) for _ in range(20)]
        for ws in views:
            assert ws.recv(12) == b"RFB 003.008\n"
        for i, ws in enumerate(views):
            if i % 2:
                ws.close()		# with a close frame
            else:
                ws.sock.close()		# just gone
    assert settle(a.proc.pid, fds) == fds
    # As many as the agent takes; one more is told so.
    views = [ws_client.connect(f"/websockify?password={a.token}",
                               port=a.port) for _ in range(32)]
    with pytest.raises(ws_client.Refused) as e:
        ws_client.connect(f"/websockify?password={a.token}", port=a.port)
    assert e.value.status == 503
    for ws in views:
        ws.sock.close()
    assert settle(a.proc.pid, fds) == fds
    assert a.get("/healthz").status_code == 200


RFB_SERVER = os.path.join(ROOT, "tests", "integration", "helpers", "rfb_server.py")


@pytest.mark.parametrize("answer", ["ok", "huge_rect", "bad_encoding",
                                    "colour_map", "cut_text", "truncated",
                                    "resize"])
def test_a_hostile_vnc_server_reaches_only_a_process_of_the_user(
        start_desktop, desktop_dir, answer):
    """The display's VNC server is the user's program: what it sends is
    read by the agent's VNC helper, a process of the user's (neither PID 1
    nor root), so a server that gets the better of the VNC client gets
    nothing the user had not. Whatever the server answers a screenshot
    with, the tool answers (the picture, or an error saying the display
    failed) and the agent serves on."""
    peers = os.path.join(desktop_dir, "peers")
    d = start_desktop(server={"name": "rfb", "command": [
        "/usr/bin/python3", RFB_SERVER, os.path.join(desktop_dir, "vnc.sock"),
        answer, peers]})
    for _ in range(2):
        res = d.call("get_screenshot")
        if answer == "ok":
            assert res["isError"] is False, res
            assert png_of(res)[0].size == (64, 48)
        else:
            assert res["isError"] is True, res
            assert res["content"][0]["text"].startswith(
                "The get_screenshot action failed on the display ("), res
    assert d.agent.get("/healthz").status_code == 200
    with open(peers) as f:
        clients = [tuple(map(int, line.split())) for line in f]
    assert clients
    for pid, uid, gid in clients:
        assert pid != d.agent.proc.pid, clients
        assert (uid, gid) == (USER, USER), clients


def helper_call(chan, op):
    """One request to the VNC helper (vnc_wire.h): the reply's status,
    width, height and data."""
    chan.sendall(struct.pack("=I3iI", op, 0, 0, 0, 0))
    head = b""
    while len(head) < 24:
        chunk = chan.recv(24 - len(head))
        assert chunk, "the helper closed its channel"
        head += chunk
    status, width, height, _, _, length = struct.unpack("=5iI", head)
    data = b""
    while len(data) < length:
        chunk = chan.recv(length - len(data))
        assert chunk, "the helper closed its channel"
        data += chunk
    return status, width, height, data


@pytest.mark.parametrize("answer", ["ok", "huge_rect", "bad_encoding",
                                    "colour_map", "cut_text", "truncated",
                                    "resize"])
def test_the_vnc_helper_before_a_hostile_server(tmp_path, answer):
    """The VNC helper alone, as the agent drives it, before the same
    servers: each answer is a screen or a failure, and at the end of its
    channel it exits 0 (under ASan: no memory error, no leak)."""
    sock, peers = str(tmp_path / "vnc.sock"), str(tmp_path / "peers")
    server = subprocess.Popen(["/usr/bin/python3", RFB_SERVER, sock, answer,
                               peers])
    ours, theirs = socket.socketpair()
    try:
        deadline = time.time() + 30
        while not os.path.exists(sock) and time.time() < deadline:
            time.sleep(0.01)
        # Its channel on its descriptor 3, as the agent gives it.
        helper = subprocess.Popen(
            [AGENT_BIN, "--vnc-helper", sock, ":0", "info"],
            pass_fds=[3], stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            preexec_fn=lambda: os.dup2(theirs.fileno(), 3))
        theirs.close()
        assert helper_call(ours, 1)[:3] == (0, 64, 48)		# BEGIN
        for _ in range(3):
            status, width, height, data = helper_call(ours, 5)  # CAPTURE
            if answer == "ok":
                assert (status, width, height) == (0, 64, 48)
                assert data == b"\x00\x00\xff\x00" * (64 * 48)
            else:
                assert status == 503, (status, data)
                assert data.startswith(b"the display's VNC connection "), \
                    data
            # BEGIN connects anew where the connection was lost.
            assert helper_call(ours, 1)[:3] == (0, 64, 48)
        ours.close()
        out = helper.communicate(timeout=30)[0].decode()
        assert helper.returncode == 0, out
    finally:
        server.kill()
        server.wait()


# ---- sandboxd -------------------------------------------------------------------

@pytest.fixture(scope="module")
def filesystem_image():
    r = subprocess.run([os.path.join(ROOT, "tools", "build-image"),
                        "filesystem"], capture_output=True, text=True,
                       timeout=3600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


@pytest.fixture
def sbxd(filesystem_image, start_sandboxd):  # noqa: F811
    return start_sandboxd(tag=TAG, token="bearer-" + uuid.uuid4().hex,
                          env={"SANDBOXD_HEALTH_INTERVAL": "5"})


def test_sandboxd_lets_in_only_the_sandboxes_own_desktop_tokens(sbxd):
    one, two = sbxd.create("filesystem"), sbxd.create("filesystem")
    t1, t2 = desktop_token(sbxd, one), desktop_token(sbxd, two)
    v1 = desktop_token(sbxd, one, "desktop_view_url")
    r1 = sbxd.rpc("get_info", identity=one)["runtime_token"]
    denied = b'{"detail":"Authentication required"}'
    for path, headers in (
            (f"/desktop/{one}", ()),
            (f"/desktop/{one}?password=wrong", ()),
            (f"/desktop/{one}?password={t2}", ()),		# the other's
            (f"/desktop/{one}?password={r1}", ()),		# not in a URL
            (f"/desktop/{one}", (f"Cookie: sandbox_vnc={t1}",)),
            (f"/desktop/{one}", ("Authorization: Bearer wrong",)),
            (f"/desktop/{one}", (f"Authorization: Bearer {t1}",)),
            (f"/desktop/sandboxd-0000000000000000?password={t1}", ())):
        refused_whole(raw_upgrade(sbxd.port, path, headers), 401, denied)
    browser = requests.Session()
    for path in (f"/desktop/{one}/vnc/vnc_relay.html?password={t2}",
                 f"/desktop/{one}/vnc/core/rfb.js",
                 f"/desktop/{one}/vnc/core/rfb.js?password={r1}"):
        r = browser.get(sbxd.url + path, timeout=30)
        assert r.status_code == 401 and r.content == denied, path
    r = browser.get(f"{sbxd.url}/desktop/{one}/vnc/core/rfb.js", timeout=30,
                    headers={"Cookie": f"sandbox_vnc={r1}"})
    assert r.status_code == 401 and r.content == denied
    # Each its own: either link's token, or sandboxd's bearer token.
    for token in (t1, v1):
        ws = viewer(sbxd, one, token)
        assert ws.recv(12) == b"RFB 003.008\n"
        ws.close()
    ws = ws_client.connect(f"/desktop/{two}", port=sbxd.port, headers={
        "Authorization": f"Bearer {sbxd.token}"})
    assert ws.recv(12) == b"RFB 003.008\n"
    ws.close()
    r = browser.get(f"{sbxd.url}/desktop/{one}/vnc/vnc_relay.html?password="
                    f"{t1}", timeout=30)
    assert r.status_code == 200
    # No token in any log: sandboxd's, the agents'.
    time.sleep(0.5)
    logs = sbxd.read_log() + "".join(docker("logs", n).stdout + docker(
        "logs", n).stderr for n in (one, two))
    assert "/desktop/" in logs
    for secret in (t1, t2, v1, r1, sbxd.token):
        assert secret not in logs


SECRET = "the workspace's secret"


def test_a_desktop_link_opens_the_desktop_and_nothing_else(sbxd):
    """A desktop_url's token opens /desktop/{id}/vnc/ and the desktop's
    WebSocket, nothing of the agent, nor /proxy/{id}, nor the API; the
    runtime_token is in no link sandboxd gives, and the SDK's link (which
    carries it) is redirected to the desktop token's at once."""
    name = sbxd.create("filesystem")
    r = sbxd.session.put(f"{sbxd.url}/v1/sandboxes/{name}/agent/workspace/"
                         "file?path=secret.txt", data=SECRET, timeout=60)
    assert r.status_code == 200, r.text
    info = sbxd.rpc("get_info", identity=name)
    runtime = info["runtime_token"]
    browser = requests.Session()	# no bearer: as a browser

    def no_agent_routes(t):
        """The agent's routes under /desktop/{id}: never."""
        for path in (f"/desktop/{name}/workspace/file?path=secret.txt&"
                     f"password={t}",
                     f"/desktop/{name}/fastapi/workspace/file?path=secret.txt"
                     f"&password={t}",
                     f"/desktop/{name}/vnc/../workspace/file?path=secret.txt"
                     f"&password={t}",
                     f"/desktop/{name}/healthz?password={t}"):
            r = browser.get(sbxd.url + path, timeout=30)
            assert r.status_code in (401, 404), (path, r.status_code)
            assert SECRET not in r.text
        r = browser.get(f"{sbxd.url}/desktop/{name}/workspace/file",
                        params={"path": "secret.txt"}, timeout=30,
                        headers={"Cookie": f"sandbox_vnc={t}"})
        assert r.status_code in (401, 404) and SECRET not in r.text

    # The SDK's link carries the runtime_token: it opens no more.
    no_agent_routes(runtime)
    token, view_token = desktop_token(sbxd, name), \
        desktop_token(sbxd, name, "desktop_view_url")
    assert info["desktop_url"] == (f"{sbxd.url}/desktop/{name}/vnc/"
                                   f"vnc_relay.html?password={token}")
    assert info["desktop_view_url"] == (
        f"{sbxd.url}/desktop/{name}/vnc/vnc_relay.html?password="
        f"{view_token}&view_only=true")
    assert len({runtime, token, view_token}) == 3
    assert runtime not in info["desktop_url"] + info["desktop_view_url"]
    no_agent_routes(token)
    no_agent_routes(view_token)
    # The desktop tokens open nothing else of sandboxd.
    for t in (token, view_token):
        bearer = {"Authorization": f"Bearer {t}"}
        r = requests.get(f"{sbxd.url}/proxy/{name}/workspace/file",
                         params={"path": "secret.txt"}, headers=bearer,
                         timeout=30)
        assert r.status_code == 401 and SECRET not in r.text
        r = requests.post(f"{sbxd.url}/proxy/{name}/tools/run_shell_command",
                          json={"command": "id"}, headers=bearer, timeout=30)
        assert r.status_code == 401
        r = requests.post(f"{sbxd.url}/call_tool", headers=bearer, json={
            "identity": name, "tool_name": "run_shell_command",
            "arguments": {"command": "id"}}, timeout=30)
        assert r.status_code == 401
    # The SDK's link: redirected before anything is served, the cookie is
    # never the runtime_token.
    page = f"{sbxd.url}/desktop/{name}/vnc/vnc_relay.html"
    for query, want in (("", token), ("&view_only=true", view_token)):
        r = browser.get(f"{page}?password={runtime}{query}", timeout=30,
                        allow_redirects=False)
        assert r.status_code == 303
        assert r.headers["Location"] == f"vnc_relay.html?password={want}" + \
            query
        assert r.headers["Referrer-Policy"] == "no-referrer"
        assert "Set-Cookie" not in r.headers and runtime not in r.text
    r = browser.get(f"{page}?password={runtime}", timeout=30)
    assert r.status_code == 200 and r.url == f"{page}?password={token}"
    assert r.headers["Set-Cookie"] == \
        f"sandbox_vnc={token}; HttpOnly; SameSite=Strict"
    assert runtime not in str(browser.cookies.get_dict())
    # Before auth, nothing of the client's path comes back.
    for path in ("/desktop//secret-marker", "/desktop/?secret-marker"):
        r = requests.get(sbxd.url + path, timeout=30)
        assert r.status_code == 404 and "secret-marker" not in r.text


def test_sandboxd_keeps_serving_bad_slow_and_many_viewers(sbxd):
    name = sbxd.create("filesystem")
    token = desktop_token(sbxd, name)
    viewer(sbxd, name, token).close()
    time.sleep(0.5)
    fds = open_fds(sbxd.proc.pid)
    # A malformed frame: the agent's close comes through sandboxd.
    bad = viewer(sbxd, name, token)
    assert bad.recv(12) == b"RFB 003.008\n"
    bad.send_raw(ws_client.frame(b"x", mask=False))
    assert bad.recv_close()[0] == 1002
    bad.sock.close()
    # A viewer that never reads, asking for a lot.
    stuck = flood(sbxd, name, token)
    # 20 viewers come and go meanwhile.
    for _ in range(2):
        views = [viewer(sbxd, name, token) for _ in range(20)]
        for ws in views:
            assert ws.recv(12) == b"RFB 003.008\n"
            ws.close()
    stuck.sock.close()
    assert sbxd.get("/health").status_code == 200
    assert settle(sbxd.proc.pid, fds) == fds


def flood(s, name, token):
    """A viewer that asks for many full screens and reads none."""
    ws = viewer(s, name, token)
    rfb_handshake(ws)
    ws.send(struct.pack("!BBHi", 2, 0, 1, 0))
    ask_for_screens(ws)
    return ws


@pytest.mark.memory
def test_sandboxd_holds_little_for_a_viewer_that_never_reads(sbxd):
    name = sbxd.create("filesystem")
    token = desktop_token(sbxd, name)
    viewer(sbxd, name, token).close()
    before = sbxd.rss_kib()
    stuck = flood(sbxd, name, token)
    assert sbxd.rss_kib() - before < 4 * 1024
    stuck.sock.close()
