"""The gui image through sandboxd, the way the AgentScope SDK drives it:
GuiSandbox(base_url=sandboxd) is a Sandbox whose computer_use(action,
coordinate, text) is call_tool("computer", {...}) over the manager's
/call_tool, like every other remote call (restated with requests, call for
call, as test_sandboxd_sdk.py does). Real Xvnc, jwm and xterm inside the
built image; the agent's computer tool over VNC.

RUNTIME_SANDBOX_IMAGE_TAG picks the images' tag (default latest), for
tools/build-image and sandboxd alike.
"""
import base64
import io
import json
import os
import subprocess
import time

import pytest
from PIL import Image

from conftest import ROOT
from sandboxd_fixtures import (minimal_tag, scratch,  # noqa: F401
                               start_sandboxd, write_types)
from test_sandboxd_sdk import RemoteManager

TAG = os.environ.get("RUNTIME_SANDBOX_IMAGE_TAG", "latest")
SHOTS = os.path.join(ROOT, "build", "test-screenshots")


@pytest.fixture(scope="module")
def gui_image():
    r = subprocess.run([os.path.join(ROOT, "tools", "build-image"), "gui"],
                       capture_output=True, text=True, timeout=3600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return f"agentscope/runtime-sandbox-gui:{TAG}"


class GuiSandbox:
    """GuiSandbox(base_url=..., bearer_token=...): a Sandbox on the
    manager's remote API."""

    def __init__(self, base_url, bearer_token):
        self.manager_api = RemoteManager(base_url, bearer_token=bearer_token)
        self.sandbox_id = self.manager_api.create_from_pool(
            sandbox_type="gui", meta=None)
        assert isinstance(self.sandbox_id, str), self.sandbox_id

    def call_tool(self, name, arguments=None):
        return self.manager_api.call_tool(self.sandbox_id, name,
                                          arguments or {})

    def computer_use(self, action, coordinate=None, text=None):
        payload = {"action": action}
        if coordinate is not None:
            payload["coordinate"] = coordinate
        if text is not None:
            payload["text"] = text
        return self.call_tool("computer", payload)

    def run_shell_command(self, command):
        return self.call_tool("run_shell_command", {"command": command})

    def run_ipython_cell(self, code):
        return self.call_tool("run_ipython_cell", {"code": code})

    def list_tools(self, tool_type=None):
        return self.manager_api.list_tools(self.sandbox_id,
                                           tool_type=tool_type)

    def close(self):
        return self.manager_api.release(self.sandbox_id)

    # What the tests check with.

    def ok(self, action, coordinate=None, text=None):
        res = self.computer_use(action, coordinate, text)
        assert isinstance(res, dict) and res["isError"] is False, res
        return res

    def out(self, command):
        res = self.run_shell_command(command)
        texts = {c.get("description"): c["text"] for c in res["content"]}
        assert texts["returncode"] == "0", res
        return texts["stdout"]

    def wait_for(self, command, want, timeout=20):
        """Until command's stdout is want (whatever its status)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            res = self.run_shell_command(command)
            got = [c["text"] for c in res["content"]
                   if c.get("description") == "stdout"][0]
            if got == want:
                return
            time.sleep(0.1)
        raise AssertionError(f"{command!r}: {got!r}, not {want!r}")


@pytest.fixture
def box(gui_image, start_sandboxd):  # noqa: F811
    s = start_sandboxd(tag=TAG, token="gui-token",
                       env={"SANDBOXD_HEALTH_INTERVAL": "5"})
    b = GuiSandbox(s.url, "gui-token")
    yield b
    assert b.close() is True


def screenshot(box, name):
    res = box.ok("get_screenshot")
    assert res["content"][0] == {"type": "text", "text":
                                 '{"image_width":1280,"image_height":800}'}
    item = res["content"][1]
    assert item["type"] == "image" and item["mimeType"] == "image/png"
    data = base64.b64decode(item["data"])
    os.makedirs(SHOTS, exist_ok=True)
    with open(os.path.join(SHOTS, name), "wb") as f:
        f.write(data)
    return Image.open(io.BytesIO(data))


def assert_jwm_desktop(img):
    """jwm's desktop: its tray along the bottom, its background above."""
    assert len(img.getcolors(maxcolors=1 << 20)) > 16
    assert img.getpixel((900, 100)) == (0x2f, 0x5f, 0x8f)
    assert img.getpixel((900, 790)) != (0x2f, 0x5f, 0x8f)


def test_the_first_screenshot_after_create_shows_the_desktop(box):
    """A sandbox is handed out once its window manager has drawn (the
    display answers seconds before): an agent's first look at its
    desktop shows something to click, not a black screen."""
    img = screenshot(box, "gui-first-look.png")
    black = sum(n for n, rgb in img.getcolors(maxcolors=1 << 20)
                if rgb == (0, 0, 0))
    assert black < 1280 * 800 // 10, black
    assert_jwm_desktop(img)


def test_a_desktop_that_draws_nothing_fails_its_create_and_says_why(
        gui_image, start_sandboxd, scratch):  # noqa: F811
    """The gui image with a desktop file whose only program draws nothing:
    the agent stays unhealthy, and the create's answer gives its reason."""
    root = scratch("sbxd-blind-")
    workspace = os.path.join(root, "w")
    os.mkdir(workspace)
    with open(os.path.join(ROOT, "images", "desktop", "desktop.json")) as f:
        desktop = json.load(f)
    desktop.update(programs=[{"name": "idle", "command": ["/bin/sleep",
                                                          "600"]}],
                   draw_timeout=1)
    with open(os.path.join(workspace, "desktop.json"), "w") as f:
        json.dump(desktop, f)
    types = write_types(root, {"blind": {"from": "gui", "environment": {
        "AGENT_DESKTOP": "/workspace/desktop.json"}}})
    s = start_sandboxd(tag=TAG, args=["--types", types], env={
        "SANDBOXD_ALLOWED_MOUNT_DIRS": root, "SANDBOXD_CREATE_TIMEOUT": "6"})
    r = s.post("/v1/sandboxes", {"type": "blind", "mount_dir": workspace})
    assert r.status_code == 504, r.text
    assert r.json()["detail"].endswith(
        "its agent was not healthy within 6 s (/healthz answered HTTP 503: "
        "the desktop's programs drew nothing on its display within 1 s of "
        "their start)"), r.text
    assert s.containers() == {}


def test_gui_sandbox_as_the_sdk_drives_it(box):
    listed = box.list_tools()
    assert set(listed) == {"generic", "computer"}
    schema = listed["computer"]["computer"]["json_schema"]["function"]
    assert schema["parameters"]["required"] == ["action"]
    assert "get_screenshot" in \
        schema["parameters"]["properties"]["action"]["enum"]

    box.computer_use(action="get_cursor_position")
    box.ok("mouse_move", coordinate=[321, 234])
    assert box.ok("get_cursor_position")["structuredContent"] == \
        {"x": 321, "y": 234}

    img = screenshot(box, "gui-desktop.png")
    assert img.size == (1280, 800)
    assert_jwm_desktop(img)

    # GuiSandbox is a BaseSandbox too.
    assert box.out("echo $DISPLAY; id -u") == ":1\n1000\n"
    res = box.run_ipython_cell("import os; print(os.environ['DISPLAY'])")
    assert res["content"][0]["text"] == ":1\n"


def test_click_type_and_return_reach_a_program_in_a_terminal(box):
    box.out("(xterm -geometry 70x12+200+150 -e sh -c 'cat > typed.txt' "
            ">/dev/null 2>&1 &)")
    box.wait_for("for p in /proc/[0-9]*; do cat $p/comm; done | "
                 "grep -c '^xterm$'", "1\n")
    time.sleep(1)		# mapped by the window manager
    box.ok("left_click", coordinate=[480, 260])
    box.ok("type", text="hello from the agent: ünïcödé ~!@#$%^&*()")
    box.ok("key", text="Return")
    box.ok("type", text="second line")
    box.ok("key", text="Return")
    img = screenshot(box, "gui-terminal.png")
    assert img.size == (1280, 800)
    box.ok("key", text="ctrl+d")
    box.wait_for("cat typed.txt 2>/dev/null",
                 "hello from the agent: ünïcödé ~!@#$%^&*()\nsecond line\n")


XVNC_PID = ("for p in /proc/[0-9]*; do [ \"$(cat $p/comm)\" = Xvnc ] && "
            "echo ${p#/proc/}; done; true")


def test_killed_vnc_server_comes_back_and_leaves_no_zombie(box):
    box.ok("mouse_move", coordinate=[10, 10])
    first = box.out(XVNC_PID)
    assert first.strip().isdigit(), first
    box.out(f"kill -9 {first.strip()}")
    # The next call still works: it waits for the new server.
    assert box.ok("get_cursor_position")["structuredContent"] == \
        {"x": 640, "y": 400}
    box.ok("mouse_move", coordinate=[50, 60])
    assert box.ok("get_cursor_position")["structuredContent"] == \
        {"x": 50, "y": 60}
    again = box.out(XVNC_PID)
    assert again.strip().isdigit() and again != first
    # The window manager came back too, and nothing is left unreaped.
    box.wait_for("for p in /proc/[0-9]*; do cat $p/comm; done | "
                 "grep -c '^jwm$'", "1\n")
    zombies = box.out("cat /proc/[0-9]*/stat 2>/dev/null | "
                      "awk '$3 == \"Z\"' | wc -l")
    assert zombies == "0\n"


def test_bad_input_is_an_error_result_and_the_sandbox_keeps_serving(box):
    res = box.computer_use(action="teleport")
    assert res["isError"] is True
    assert "Invalid option: expected one of" in res["content"][0]["text"]
    res = box.computer_use(action="left_click", coordinate=[1280, 0])
    assert res["content"][0]["text"] == \
        "Coordinates (1280, 0) are outside display bounds of 1280x800"
    res = box.computer_use(action="type")
    assert res["content"][0]["text"] == "Text required for type"
    box.ok("get_cursor_position")
