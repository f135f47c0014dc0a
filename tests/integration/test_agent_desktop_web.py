"""The desktop in a web browser, straight from the agent: GET /vnc/{path}
(noVNC's files from npm's @novnc/novnc in tests/node_modules, and the
agent's own vnc_relay.html) and the WebSocket at /websockify, relayed to
the display's VNC server (TigerVNC's Xvnc, started by the agent's
--desktop). Debian's headless Chromium opens the page through playwright-
core; a small RFC 6455 client (ws_client.py) speaks RFB through the relay.

Hostile input (bad tokens, malformed frames, slow and many viewers) is in
test_hostile_desktop.py. Everything is on 127.0.0.1 and unix sockets.
"""
import json
import os
import struct
import subprocess
import uuid

import pytest
import requests
from PIL import Image

import ws_client
from conftest import ROOT
from test_agent_computer import (USER, Desktop, StartingAgent,  # noqa: F401
                                 desktop_config, desktop_dir, free_display)

NODE = "/usr/bin/node"
NOVNC = os.path.join(ROOT, "tests", "node_modules", "@novnc", "novnc")
VIEW = os.path.join(ROOT, "tests", "integration", "helpers", "desktop_view.mjs")
SHOTS = os.path.join(ROOT, "build", "test-screenshots")


@pytest.fixture
def web_desktop(start_agent, tmp_workspace, desktop_dir):
    """Factory: an agent with a desktop (an xterm on it) whose web viewer
    is served, and a random token. Returns the agent."""
    os.chown(tmp_workspace, USER, USER)

    def start(novnc=NOVNC, programs=None, token=None):
        display = free_display()
        if programs is None:
            programs = [{"name": "xterm", "command": [
                "/usr/bin/xterm", "-geometry", "60x15+100+100"]}]
        keys = {"novnc": novnc} if novnc is not None else {}
        cfg = desktop_config(desktop_dir, display, programs, **keys)
        agent = start_agent("--run-as", f"{USER}:{USER}", "--tools",
                            "computer", "--desktop", cfg,
                            token=token or "t-" + uuid.uuid4().hex)
        agent.display = display
        return agent

    return start


def view(url, name, wait_ms=1500):
    """Open url in headless Chromium; the page's report, the screenshot
    saved as build/test-screenshots/name."""
    os.makedirs(SHOTS, exist_ok=True)
    shot = os.path.join(SHOTS, name)
    r = subprocess.run([NODE, VIEW, url, shot, str(wait_ms)],
                       cwd=os.path.join(ROOT, "tests"), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1]), Image.open(shot)


def rfb_handshake(ws):
    """The RFB 3.8 handshake with security None: (width, height, name)."""
    greeting = ws.recv(12)
    assert greeting == b"RFB 003.008\n", greeting
    ws.send(greeting)
    n = ws.recv(1)[0]
    assert 1 in ws.recv(n)		# None
    ws.send(b"\x01")
    assert ws.recv(4) == b"\0\0\0\0"
    ws.send(b"\x01")			# shared
    width, height = struct.unpack("!HH", ws.recv(4))
    ws.recv(16)				# pixel format
    name = ws.recv(struct.unpack("!I", ws.recv(4))[0])
    return width, height, name.decode()


def read_update(ws):
    """One FramebufferUpdate in raw encoding: [(x, y, w, h, pixels)]."""
    head = ws.recv(4)
    assert head[0] == 0, head
    rects = []
    for _ in range(struct.unpack("!H", head[2:])[0]):
        x, y, w, h, enc = struct.unpack("!HHHHi", ws.recv(12))
        assert enc == 0, enc
        rects.append((x, y, w, h, ws.recv(w * h * 4)))
    return rects


def full_update(ws, width, height):
    """Raw encoding, then the whole screen: its FramebufferUpdate."""
    ws.send(struct.pack("!BBHi", 2, 0, 1, 0))
    ws.send(struct.pack("!BBHHHH", 3, 0, 0, 0, width, height))
    return read_update(ws)


def barrier(ws):
    """The VNC server has read everything the viewer sent before: it
    answers an update request (raw encoding set) after what came
    before it on the connection."""
    ws.send(struct.pack("!BBHHHH", 3, 0, 0, 0, 1, 1))
    read_update(ws)


def try_to_drive(ws, pointer=(40, 50)):
    """What a viewer sends to drive the desktop: keys (to the window under
    the pointer), cut text, a click that moves the pointer; then the
    server has read them."""
    for c in b"view":
        ws.send(struct.pack("!BBxxI", 4, 1, c) + struct.pack("!BBxxI", 4, 0, c))
    ws.send(struct.pack("!BxxxI", 6, 5) + b"typed")
    ws.send(struct.pack("!BBHH", 5, 1, *pointer))
    ws.send(struct.pack("!BBHH", 5, 0, *pointer))
    barrier(ws)


# ---- the page and its files ---------------------------------------------------

def test_page_and_files_are_served_with_the_token(web_desktop):
    a = web_desktop()
    url = a.url + "/vnc/vnc_relay.html"
    plain = requests.Session()
    r = plain.get(url)
    assert r.status_code == 403
    assert r.json() == {"detail": "Not authenticated"}
    r = plain.get(url, params={"password": "nope"})
    assert r.status_code == 403 and r.json() == {"detail": "Invalid token"}
    r = plain.get(url, params={"password": a.token})
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"] == "text/html; charset=utf-8"
    assert 'id="status"' in r.text and "./core/rfb.js" in r.text
    # The token, for the page's own directory, to the files it loads.
    cookie = r.headers["Set-Cookie"]
    assert cookie == f"sandbox_vnc={a.token}; HttpOnly; SameSite=Strict"
    assert "frame-ancestors 'none'" in \
        r.headers["Content-Security-Policy"]
    assert r.headers["Referrer-Policy"] == "no-referrer"
    r = plain.get(a.url + "/vnc/core/rfb.js")
    assert r.status_code == 200, r.text	# the cookie came back
    assert r.headers["Content-Type"] == "text/javascript; charset=utf-8"
    with open(os.path.join(NOVNC, "core", "rfb.js"), "rb") as f:
        assert r.content == f.read()
    # Also with the header (sandboxd's way), also under /fastapi.
    r = a.get("/fastapi/vnc/vendor/pako/lib/zlib/inflate.js")
    assert r.status_code == 200, r.text
    # Without any: refused, whatever the file.
    r = requests.get(a.url + "/vnc/core/rfb.js")
    assert r.status_code == 403
    assert a.get("/vnc/core/nope.js").status_code == 404
    assert a.get("/vnc/core").status_code == 404	# a directory


def test_a_desktop_without_novnc_says_so(web_desktop):
    a = web_desktop(novnc=None)
    r = a.get("/vnc/core/rfb.js")
    assert r.status_code == 404
    assert "no web viewer" in r.json()["detail"]
    # The page itself is the agent's own.
    assert a.get("/vnc/vnc_relay.html").status_code == 200


def test_an_agent_without_a_desktop_has_none_to_show(agent):
    assert agent.get("/vnc/vnc_relay.html").status_code == 404
    with pytest.raises(ws_client.Refused) as e:
        ws_client.connect("/websockify", port=agent.port, headers={
            "Authorization": f"Bearer {agent.token}"})
    assert e.value.status == 404
    assert json.loads(e.value.body) == {"detail": "this sandbox has no desktop"}


# ---- in a real browser --------------------------------------------------------

def white_area(img, box):
    """Share of pure white pixels in box of img."""
    region = img.convert("RGB").crop(box)
    pixels = list(region.getdata())
    return sum(1 for p in pixels if p == (255, 255, 255)) / len(pixels)


def test_chromium_shows_the_desktop_opened_on_the_agent(web_desktop):
    a = web_desktop()
    for prefix, shot in (("", "agent-web-desktop.png"),
                         ("/fastapi", "agent-web-desktop-fastapi.png")):
        report, img = view(f"{a.url}{prefix}/vnc/vnc_relay.html?password="
                           f"{a.token}", shot)
        assert report["status"] == "Connected to sandbox", report
        assert report["canvas"] == [1280, 800], report
        assert not [e for e in report["console"] if "rfb" in e.lower()], \
            report
        # Below the 20-pixel status line, the desktop unscaled: the
        # xterm's white window at 100,100 (60x15 characters).
        assert white_area(img, (110, 130, 400, 250)) > 0.9
        assert white_area(img, (700, 500, 1200, 800)) < 0.01
    log = a.read_log()
    assert "desktop: a viewer connected" in log
    assert a.token not in log


def test_chromium_is_told_when_the_desktop_cannot_be_reached(
        tmp_workspace, desktop_dir):
    """A display that never answers: the page loads, its WebSocket is
    refused (503), and the status line says so."""
    os.chown(tmp_workspace, USER, USER)
    token = "t-" + uuid.uuid4().hex
    cfg = desktop_config(desktop_dir, free_display(), server={
        "name": "mute", "command": ["/bin/sleep", "600"]}, novnc=NOVNC)
    a = StartingAgent(tmp_workspace, ("--run-as", f"{USER}:{USER}",
                                      "--desktop", cfg),
                      env=None, token=token)
    try:
        with pytest.raises(ws_client.Refused) as e:
            ws_client.connect(f"/websockify?password={token}", port=a.port)
        assert e.value.status == 503
        assert json.loads(e.value.body) == {
            "detail": "the desktop's display is not ready"}
        report, _ = view(f"{a.url}/vnc/vnc_relay.html?password={token}",
                         "agent-web-unreachable.png", wait_ms=0)
        assert report["connected"] is False
        assert report["status"].startswith("Could not connect to the "
                                           "desktop"), report
    finally:
        assert a.stop()


# ---- the WebSocket --------------------------------------------------------------

def test_the_websocket_speaks_rfb_both_ways(web_desktop):
    a = web_desktop()
    ws = ws_client.connect(f"/websockify?password={a.token}", port=a.port)
    assert ws.headers["sec-websocket-protocol"] == "binary"
    width, height, name = rfb_handshake(ws)
    assert (width, height, name) == (1280, 800, "sandbox")
    ws.send(struct.pack("!BBHi", 2, 0, 1, 0))		# raw only
    ws.send(struct.pack("!BBHHHH", 3, 0, 100, 100, 20, 20))
    rects = read_update(ws)
    assert sum(w * h for _, _, w, h, _ in rects) >= 400
    # Input goes the other way: the pointer moves where the viewer says.
    ws.send(struct.pack("!BBHH", 5, 0, 321, 123))
    for _ in range(50):
        res = a.post("/mcp/call_tool", {"tool_name": "computer", "arguments":
                                        {"action": "get_cursor_position"}})
        if res.json()["structuredContent"] == {"x": 321, "y": 123}:
            break
    assert res.json()["structuredContent"] == {"x": 321, "y": 123}
    # A ping is answered with its payload; a close with the same code.
    ws.send(b"are you there", opcode=9)
    fin, op, payload = ws.recv_frame()
    while op == 2:
        fin, op, payload = ws.recv_frame()
    assert (fin, op, payload) == (True, 10, b"are you there")
    ws.send(struct.pack("!H", 1000) + b"bye", opcode=8)
    assert ws.recv_close() == (1000, "")
    ws.sock.close()


def test_a_view_only_viewer_sees_the_desktop_and_cannot_drive_it(
        web_desktop, desktop_dir):
    """view_only=true (sandboxd's view-only desktop link): the screen comes
    as to anyone, keys, the pointer, cut text and resizes never reach the
    desktop; a message the filter cannot follow ends the viewer."""
    a = web_desktop()
    d = Desktop(a, a.display, desktop_dir)
    d.terminal("cat > typed.txt")
    d.ok("mouse_move", coordinate=[500, 300])		# over the xterm
    ws = ws_client.connect(f"/websockify?password={a.token}&view_only=true",
                           port=a.port)
    assert rfb_handshake(ws) == (1280, 800, "sandbox")
    rects = full_update(ws, 1280, 800)
    assert sum(w * h for _, _, w, h, _ in rects) == 1280 * 800
    try_to_drive(ws)
    assert d.ok("get_cursor_position")["structuredContent"] == \
        {"x": 500, "y": 300}
    # A resize, extended cut text: dropped too.
    ws.send(struct.pack("!BxHHBx", 251, 640, 400, 1) + bytes(16))
    ws.send(struct.pack("!Bxxxi", 6, -4) + b"\0\0\0\1")
    barrier(ws)
    assert d.shell("xdotool getdisplaygeometry") == "1280 800\n"
    # The agent's own input still reaches the xterm, alone.
    d.ok("type", text="driven\n")
    d.ok("key", text="ctrl+d")
    out = os.path.join(a.workspace, "typed.txt")
    d.wait_for(lambda: open(out).read().endswith("driven\n"),
               "the typed line")
    with open(out) as f:
        assert f.read() == "driven\n"
    # QEMU's messages are none a view-only viewer needs.
    ws.send(b"\xff\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x61")
    assert ws.recv_close() == (1008, "a view-only viewer may not send "
                                     "message type 255")
    ws.sock.close()
    assert "a viewer connected (view only)" in a.read_log()


def test_handshakes_the_relay_refuses(web_desktop):
    a = web_desktop()
    auth = {"Authorization": f"Bearer {a.token}"}

    def refused(**kw):
        with pytest.raises(ws_client.Refused) as e:
            ws_client.connect("/websockify", port=a.port,
                              headers={**auth, **kw.pop("headers", {})}, **kw)
        return e.value.status, json.loads(e.value.body)["detail"], \
            e.value.headers

    status, detail, headers = refused(version="8")
    assert status == 426 and headers["sec-websocket-version"] == "13"
    assert refused(key="c2hvcnQ=")[:2] == (400, "Sec-WebSocket-Key must be "
                                           "the base64 of 16 bytes")
    assert refused(protocols=("base64",))[:2] == (
        400, 'the only WebSocket subprotocol spoken here is "binary"')
    # Not an upgrade at all.
    r = a.get("/websockify")
    assert r.status_code == 400 and "WebSocket upgrade" in r.json()["detail"]
    # Without a subprotocol offered, none is named, and it works.
    ws = ws_client.connect("/websockify", port=a.port, headers=auth,
                           protocols=())
    assert "sec-websocket-protocol" not in ws.headers
    assert ws.recv(12) == b"RFB 003.008\n"
    ws.close()
