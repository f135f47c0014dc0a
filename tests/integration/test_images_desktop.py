"""Desktops in a web browser through sandboxd: every type with a desktop
(filesystem, browser, gui) opens its desktop_url (get_info's,
{base_url}/desktop/{id}/vnc/vnc_relay.html?password={desktop token}, and
the SDK's, with the runtime_token, redirected to it) in Debian's headless
Chromium (playwright-core), the page and noVNC's files streamed from the
sandbox's agent and its WebSocket relayed by sandboxd to the agent's
/websockify. The browser type's desktop shows the page its agent
navigated to (served inside the sandbox). A small RFC 6455 client speaks
RFB through sandboxd: the interactive link drives the desktop, the
view-only one (desktop_view_url) only watches; many viewers come and go;
releasing a sandbox closes its viewers.

Hostile input is in test_hostile_desktop.py. RUNTIME_SANDBOX_IMAGE_TAG
picks the images' tag (default latest), for tools/build-image and sandboxd
alike. Everything is on 127.0.0.1, unix sockets, and containers made here.
"""
import os
import socket
import struct
import subprocess
import threading
import time
from urllib.parse import parse_qs, urlparse

import pytest
import requests

import ws_client
from conftest import ROOT, relay
from sandboxd_fixtures import minimal_tag, start_sandboxd  # noqa: F401
from test_agent_desktop_web import (full_update, rfb_handshake,
                                    try_to_drive, view)

TAG = os.environ.get("RUNTIME_SANDBOX_IMAGE_TAG", "latest")
TOKEN = "desktop-bearer"
TYPES = ("filesystem", "browser", "gui")
# The browser's page: a green screen the desktop must show.
GREEN = (b"<!doctype html><title>Green page</title><body style='margin:0;"
         b"background:#00c000'><h1>Sandbox page, seen on the desktop</h1>")


@pytest.fixture(scope="module")
def desktop_images():
    r = subprocess.run([os.path.join(ROOT, "tools", "build-image"), *TYPES],
                       capture_output=True, text=True, timeout=3600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


@pytest.fixture
def sbxd(desktop_images, start_sandboxd):  # noqa: F811
    return start_sandboxd(tag=TAG, token=TOKEN,
                          env={"SANDBOXD_HEALTH_INTERVAL": "5"})


def desktop_url(s, name, key="desktop_url"):
    """get_info's link (key "desktop_view_url": the view-only one)."""
    return s.rpc("get_info", identity=name)[key]


def desktop_token(s, name, key="desktop_url"):
    """The token of get_info's link."""
    return parse_qs(urlparse(desktop_url(s, name, key)).query)["password"][0]


def sdk_desktop_url(s, name):
    """As the SDK's GUIMixin.desktop_url builds it: the runtime_token."""
    token = s.rpc("get_info", identity=name)["runtime_token"]
    return f"{s.url}/desktop/{name}/vnc/vnc_relay.html?password={token}"


def open_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def viewer(s, name, token=None, query="", **kw):
    token = token or desktop_token(s, name)
    return ws_client.connect(f"/desktop/{name}?password={token}{query}",
                             port=s.port, **kw)


def tool(s, name, tool_name, **arguments):
    res = s.rpc("call_tool", identity=name, tool_name=tool_name,
                arguments=arguments)
    assert res.get("isError") is not True, (tool_name, res)
    return res


def colour_share(img, rgb, box):
    pixels = list(img.convert("RGB").crop(box).getdata())
    return sum(1 for p in pixels if p == rgb) / len(pixels)


@pytest.mark.parametrize("sandbox_type,link", (("filesystem", sdk_desktop_url),
                                               ("gui", desktop_url)))
def test_desktop_url_opens_the_desktop_in_chromium(sbxd, sandbox_type, link):
    """The SDK's link (redirected) and get_info's."""
    name = sbxd.create(sandbox_type)
    report, img = view(link(sbxd, name),
                       f"sandboxd-{sandbox_type}-desktop.png")
    assert report["status"] == "Connected to sandbox", report
    assert report["canvas"] == [1280, 800], report
    # jwm's desktop, unscaled below the 20-pixel status line: its tray
    # along the bottom differs from the background above it.
    above = img.convert("RGB").getpixel((640, 400))
    tray = img.convert("RGB").getpixel((640, 20 + 800 - 10))
    assert above != tray, (above, tray)
    assert colour_share(img, above, (0, 100, 1280, 700)) > 0.9
    assert sbxd.rpc("release", identity=name) is True


def test_browser_desktop_shows_the_page_the_agent_navigated_to(sbxd):
    name = sbxd.create("browser")
    r = sbxd.session.put(f"{sbxd.url}/v1/sandboxes/{name}/agent/workspace/"
                         "file?path=site/index.html", data=GREEN, timeout=60)
    assert r.status_code == 200, r.text
    out = sbxd.shell(name, "(cd site && nohup python3 -m http.server 8123 "
                     "--bind 127.0.0.1 >/dev/null 2>&1 &) && for i in "
                     "$(seq 100); do python3 -c 'import socket; "
                     "socket.create_connection((\"127.0.0.1\", 8123))' "
                     "2>/dev/null && break; sleep 0.1; done")
    assert out["returncode"] == "0", out
    res = tool(sbxd, name, "browser_navigate", url="http://127.0.0.1:8123/")
    assert "Green page" in "".join(c.get("text", "") for c in res["content"])
    # Headed, on the desktop: the browser's own screenshot still works.
    shot = tool(sbxd, name, "browser_take_screenshot")
    assert any(c["type"] == "image" for c in shot["content"])
    report, img = view(desktop_url(sbxd, name),
                       "sandboxd-browser-desktop.png", wait_ms=2500)
    assert report["status"] == "Connected to sandbox", report
    # Most of the screen is the page's green, as the agent's chromium
    # draws it (a window over the whole desktop).
    assert colour_share(img, (0, 192, 0), (0, 20, 1280, 820)) > 0.5
    assert sbxd.rpc("release", identity=name) is True


def test_the_files_come_with_their_type_and_the_cookie_serves_them(sbxd):
    name = sbxd.create("filesystem")
    token = desktop_token(sbxd, name)
    browser = requests.Session()	# no bearer: as a browser
    r = browser.get(f"{sbxd.url}/desktop/{name}/vnc/vnc_relay.html",
                    params={"password": token}, timeout=30)
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"] == "text/html; charset=utf-8"
    # The link's own token, for the page's directory (no Path: the
    # browser's default, whatever prefix a reverse proxy adds).
    assert r.headers["Set-Cookie"] == \
        f"sandbox_vnc={token}; HttpOnly; SameSite=Strict"
    assert [(c.name, c.value, c.path) for c in browser.cookies] == \
        [("sandbox_vnc", token, f"/desktop/{name}/vnc")]
    r = browser.get(f"{sbxd.url}/desktop/{name}/vnc/core/rfb.js", timeout=30)
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"] == "text/javascript; charset=utf-8"
    assert "export default class RFB" in r.text
    # sandboxd's bearer token in the header serves them too.
    r = sbxd.get(f"/desktop/{name}/vnc/vendor/pako/lib/zlib/inflate.js")
    assert r.status_code == 200, r.text


def test_a_websocket_speaks_rfb_through_sandboxd(sbxd):
    name = sbxd.create("gui")
    ws = viewer(sbxd, name)
    assert ws.headers["sec-websocket-protocol"] == "binary"
    assert rfb_handshake(ws) == (1280, 800, "sandbox")
    rects = full_update(ws, 1280, 800)
    assert sum(w * h for _, _, w, h, _ in rects) == 1280 * 800
    # The viewer's pointer is the desktop's: the computer tool sees it.
    ws.send(struct.pack("!BBHH", 5, 0, 200, 300))
    deadline = time.time() + 10
    while time.time() < deadline:
        res = tool(sbxd, name, "computer", action="get_cursor_position")
        if res["structuredContent"] == {"x": 200, "y": 300}:
            break
        time.sleep(0.05)
    assert res["structuredContent"] == {"x": 200, "y": 300}
    ws.close()


def test_the_view_only_link_watches_and_the_interactive_one_drives(sbxd):
    name = sbxd.create("gui")
    here = {"x": 600, "y": 400}
    tool(sbxd, name, "computer", action="mouse_move", coordinate=[600, 400])
    token = desktop_token(sbxd, name)
    view_token = desktop_token(sbxd, name, "desktop_view_url")
    # The view-only token, even asking to drive; the interactive one
    # asking only to watch.
    for t, query in ((view_token, ""), (view_token, "&view_only=false"),
                     (token, "&view_only=true")):
        ws = viewer(sbxd, name, t, query)
        assert rfb_handshake(ws) == (1280, 800, "sandbox")
        rects = full_update(ws, 1280, 800)
        assert sum(w * h for _, _, w, h, _ in rects) == 1280 * 800
        try_to_drive(ws)
        res = tool(sbxd, name, "computer", action="get_cursor_position")
        assert res["structuredContent"] == here, query
        ws.close()
    ws = viewer(sbxd, name, token)
    rfb_handshake(ws)
    full_update(ws, 1280, 800)
    try_to_drive(ws, pointer=(40, 50))
    res = tool(sbxd, name, "computer", action="get_cursor_position")
    assert res["structuredContent"] == {"x": 40, "y": 50}
    ws.close()
    # The page of the view-only link says so, over the same desktop.
    report, img = view(desktop_url(sbxd, name, "desktop_view_url"),
                       "sandboxd-gui-view-only.png")
    assert report["status"] == "Connected to sandbox (view only)", report
    assert img.convert("RGB").getpixel((900, 120)) == (0x2f, 0x5f, 0x8f)


def test_many_viewers_come_and_go_and_release_closes_them(sbxd):
    name = sbxd.create("filesystem")
    token = desktop_token(sbxd, name)
    viewer(sbxd, name, token).close()		# warm
    time.sleep(0.5)
    before = open_fds(sbxd.proc.pid)
    for _ in range(2):
        views = [viewer(sbxd, name, token) for _ in range(20)]
        for ws in views:
            assert ws.recv(12) == b"RFB 003.008\n"
        for ws in views:
            ws.close()
    deadline = time.time() + 10
    while open_fds(sbxd.proc.pid) != before and time.time() < deadline:
        time.sleep(0.1)
    assert open_fds(sbxd.proc.pid) == before
    # Viewers still there when the sandbox goes are closed by sandboxd.
    views = [viewer(sbxd, name, token) for _ in range(3)]
    for ws in views:
        assert ws.recv(12) == b"RFB 003.008\n"
    assert sbxd.rpc("release", identity=name) is True
    for ws in views:
        ws.sock.settimeout(10)
        with pytest.raises((ConnectionError, socket.timeout)) as e:
            while True:
                ws.recv_frame()
        assert e.type is ConnectionError
        ws.sock.close()
    deadline = time.time() + 10
    while open_fds(sbxd.proc.pid) > before and time.time() < deadline:
        time.sleep(0.1)
    assert open_fds(sbxd.proc.pid) <= before
    assert "a viewer connected" in sbxd.read_log()


class PrefixProxy:
    """A reverse proxy on 127.0.0.1 that serves sandboxd under /tools: one
    request a connection, its path's prefix taken off; after the head,
    bytes are relayed as they come (an upgraded WebSocket too)."""

    def __init__(self, port, prefix="/tools"):
        self.target, self.prefix = port, prefix
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.paths = []
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                conn = self.listener.accept()[0]
            except OSError:
                return
            threading.Thread(target=self.handle, args=(conn,),
                             daemon=True).start()

    def handle(self, conn):
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = conn.recv(65536)
            if not chunk:
                conn.close()
                return
            buf += chunk
        head, rest = buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        method, path, version = lines[0].split(" ")
        self.paths.append(path)
        upgrade = any(line.lower().startswith("upgrade:") for line in lines)
        out = [f"{method} {path[len(self.prefix):]} {version}"]
        for line in lines[1:]:
            if upgrade or not line.lower().startswith("connection:"):
                out.append(line)
        if not upgrade:
            out.append("Connection: close")
        up = socket.create_connection(("127.0.0.1", self.target))
        up.sendall(("\r\n".join(out) + "\r\n\r\n").encode("latin-1") + rest)
        threading.Thread(target=relay, args=(up, conn), daemon=True).start()
        relay(conn, up)

    def close(self):
        self.listener.close()


def test_the_page_keeps_a_reverse_proxys_prefix(sbxd):
    """The SDK's link behind a reverse proxy: redirected (relative) to the
    desktop token's under the prefix, whose cookie serves the files."""
    name = sbxd.create("filesystem")
    runtime = sbxd.rpc("get_info", identity=name)["runtime_token"]
    token = desktop_token(sbxd, name)
    proxy = PrefixProxy(sbxd.port)
    page = f"/tools/desktop/{name}/vnc/vnc_relay.html"
    try:
        report, _ = view(f"http://127.0.0.1:{proxy.port}{page}?password="
                         f"{runtime}", "sandboxd-behind-a-proxy.png")
        assert report["status"] == "Connected to sandbox", report
        assert proxy.paths[:2] == [f"{page}?password={runtime}",
                                   f"{page}?password={token}"]
        # Its WebSocket went to the prefix's /desktop/{id} too; the
        # sandbox's token went nowhere after the first request.
        assert f"/tools/desktop/{name}?password={token}" in proxy.paths
        assert [p for p in proxy.paths if runtime in p] == proxy.paths[:1]
    finally:
        proxy.close()
