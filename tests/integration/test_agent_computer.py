"""The agent's desktop (--desktop) and its computer tool (--tools computer)
on a real X display: TigerVNC's Xvnc started and watched by the agent, a
real xterm, and the npm computer-use-mcp server on the same display for the
side-by-side comparisons. The display's sockets are unix sockets in this
test's own directories; no test listens on any network address but
127.0.0.1.
"""
import base64
import io
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

import pytest
import requests
from PIL import Image

from conftest import AGENT_BIN, ROOT, Agent, result_texts

NODE = "/usr/bin/node"
CUMCP = os.path.join(ROOT, "tests", "node_modules", "computer-use-mcp",
                     "dist", "main.js")
USER = 65534		# nobody: desktop programs never run as root
SHOTS = os.path.join(ROOT, "build", "test-screenshots")


def free_display():
    """A display number nothing on this machine uses."""
    for _ in range(200):
        n = random.randrange(200, 900)
        if not os.path.exists(f"/tmp/.X11-unix/X{n}") and \
                not os.path.exists(f"/tmp/.X{n}-lock"):
            return n
    raise AssertionError("no free X display number")


def desktop_config(directory, display, programs=(), server=None, **extra):
    """The desktop file; extra keys ("novnc") go in as given."""
    sock = os.path.join(directory, "vnc.sock")
    cfg = {
        "display": f":{display}",
        "vnc_socket": sock,
        "server": server or {"name": "Xvnc", "command": [
            "/usr/bin/Xvnc", f":{display}", "-geometry", "1280x800",
            "-depth", "24", "-rfbunixpath", sock, "-rfbunixmode", "0600",
            "-rfbport", "-1", "-SecurityTypes", "None", "-UseBlacklist=0",
            "-nolisten", "tcp", "-nolisten", "local", "-AlwaysShared",
            "-desktop", "sandbox"]},
        "programs": list(programs),
        **extra,
    }
    path = os.path.join(directory, "desktop.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    return path


def processes():
    """{pid: (ppid, name, state)} of every process."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        out[int(pid)] = (int(fields[1]),
                         stat[stat.index("(") + 1:stat.rindex(")")],
                         fields[0])
    return out


class Desktop:
    def __init__(self, agent, display, directory):
        self.agent, self.display, self.dir = agent, display, directory

    def call(self, action, **args):
        r = self.agent.post("/mcp/call_tool", {"tool_name": "computer",
                                               "arguments": {"action": action,
                                                             **args}})
        assert r.status_code == 200, r.text
        return r.json()

    def ok(self, action, **args):
        res = self.call(action, **args)
        assert res["isError"] is False, (action, args, res)
        return res

    def shell(self, command):
        res = self.agent.shell(command)
        assert result_texts(res)["returncode"] == "0", res
        return result_texts(res)["stdout"]

    def descendants(self):
        """{pid: (name, state)} of the processes under the agent."""
        procs = processes()
        out = {}
        for pid, (ppid, name, state) in procs.items():
            p = ppid
            for _ in range(64):
                if p == self.agent.proc.pid:
                    out[pid] = (name, state)
                    break
                if p <= 1 or p not in procs:
                    break
                p = procs[p][0]
        return out

    def pids_of(self, name):
        """Processes named name on this display: under the agent, or
        orphans of commands (the agent is not PID 1 here)."""
        mark = f"DISPLAY=:{self.display}".encode()
        out = []
        for pid, (_, n, state) in processes().items():
            if n != name or state == "Z":
                continue
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    if mark in f.read().split(b"\0"):
                        out.append(pid)
            except OSError:
                pass
        return sorted(out)

    def pid_of(self, name):
        pids = self.pids_of(name)
        assert len(pids) == 1, self.descendants()
        return pids[0]

    def wait_for(self, predicate, what, timeout=20):
        deadline = time.time() + timeout
        while time.time() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}:\n" +
                             self.agent.read_log()[-3000:])

    def terminal(self, command, geometry="80x20+300+200"):
        """An xterm running command in the workspace, started by a
        command as the user; returns once its window shows."""
        before = set(self.pids_of("xterm"))
        self.shell(f"(xterm -geometry {geometry} -e sh -c '{command}' "
                   ">/dev/null 2>&1 &)")
        self.wait_for(lambda: set(self.pids_of("xterm")) - before,
                      "the xterm")
        time.sleep(0.5)		# mapped and drawn


@pytest.fixture
def desktop_dir():
    d = tempfile.mkdtemp(prefix="sbx-desk-")
    os.chown(d, USER, USER)
    os.chmod(d, 0o700)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def start_desktop(start_agent, tmp_workspace, desktop_dir):
    """Factory: an agent with --desktop on a fresh display, and its
    computer tool."""
    os.chown(tmp_workspace, USER, USER)

    def start(*extra, programs=(), server=None, display=None, **keys):
        display = display or free_display()
        cfg = desktop_config(desktop_dir, display, programs, server, **keys)
        agent = start_agent("--run-as", f"{USER}:{USER}", "--tools",
                            "computer", "--desktop", cfg, *extra)
        return Desktop(agent, display, desktop_dir)

    return start


@pytest.fixture
def desk(start_desktop):
    return start_desktop()


def png_of(res):
    images = [c for c in res["content"] if c["type"] == "image"]
    assert len(images) == 1 and images[0]["mimeType"] == "image/png", res
    data = base64.b64decode(images[0]["data"])
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return Image.open(io.BytesIO(data)), data


def save_shot(name, data):
    os.makedirs(SHOTS, exist_ok=True)
    with open(os.path.join(SHOTS, name), "wb") as f:
        f.write(data)


# ---- the desktop ----------------------------------------------------------

def test_healthy_once_the_display_answers_and_commands_see_it(desk):
    # start_agent waited for /healthz: the display answered by then.
    names = {n for n, _ in desk.descendants().values()}
    assert "Xvnc" in names
    assert desk.shell("echo $DISPLAY") == f":{desk.display}\n"
    assert desk.shell("xdotool getdisplaygeometry") == "1280 800\n"
    # Run as the user, never root.
    xvnc = desk.pid_of("Xvnc")
    with open(f"/proc/{xvnc}/status") as f:
        uids = [line.split()[1:] for line in f if line.startswith("Uid:")][0]
    assert set(uids) == {str(USER)}
    # The VNC socket is the user's alone.
    st = os.stat(os.path.join(desk.dir, "vnc.sock"))
    assert st.st_uid == USER and st.st_mode & 0o777 == 0o600


def test_healthy_once_its_programs_drew_and_the_first_screenshot_shows_it(
        start_desktop):
    """The display answers at once, its window manager draws a moment
    later (jwm: 2-5 s under load): /healthz waits for the first drawing,
    so the first screenshot of a sandbox handed out shows it."""
    d = start_desktop(programs=[{"name": "late", "command": [
        "/bin/sh", "-c", "sleep 1.5; exec /usr/bin/xterm -geometry "
        "60x15+100+100"]}])
    img, _ = png_of(d.ok("get_screenshot"))
    pixels = img.convert("RGB").crop((110, 130, 400, 250)).getdata()
    assert sum(1 for p in pixels if p == (255, 255, 255)) / len(pixels) > 0.9
    assert "desktop: display :%d drawn on" % d.display in d.agent.read_log()


def test_a_desktop_that_draws_nothing_is_unhealthy_and_says_why(
        tmp_workspace, desktop_dir):
    os.chown(tmp_workspace, USER, USER)
    cfg = desktop_config(desktop_dir, free_display(), programs=[
        {"name": "idle", "command": ["/bin/sleep", "600"]}], draw_timeout=1)
    agent = StartingAgent(tmp_workspace, ("--run-as", f"{USER}:{USER}",
                                          "--desktop", cfg))
    late = ("the desktop's programs drew nothing on its display within 1 s "
            "of their start")
    try:
        details = set()
        deadline = time.time() + 30
        while late not in details and time.time() < deadline:
            r = agent.get("/healthz")
            assert r.status_code == 503, r.text
            details.add(r.json()["detail"])
            time.sleep(0.05)
        assert details <= {"the desktop's display is not ready",
                           "the desktop is starting: nothing is drawn on "
                           "its display yet", late}, details
        assert late in details
        assert late + "; unhealthy until they do" in agent.read_log()
    finally:
        assert agent.stop()


def test_ipython_kernel_sees_the_display(desk):
    r = desk.agent.post("/tools/run_ipython_cell",
                        {"code": "import os; print(os.environ['DISPLAY'])"})
    assert result_texts(r.json())["stdout"] == f":{desk.display}\n"


def test_programs_start_after_the_server_and_come_back(start_desktop):
    d = start_desktop(programs=[{"name": "term", "command": [
        "/usr/bin/xterm", "-geometry", "40x5+0+0"], "env": {"LANG": "C"}}])
    xterm = d.wait_for(lambda: d.pids_of("xterm"),
                       "the xterm of the desktop file")[0]
    with open(f"/proc/{xterm}/environ", "rb") as f:
        env = f.read().split(b"\0")
    assert b"LANG=C" in env and f"DISPLAY=:{d.display}".encode() in env
    assert not any(e.startswith(b"SECRET_TOKEN=") for e in env)
    os.kill(xterm, signal.SIGKILL)
    d.wait_for(lambda: [p for p in d.pids_of("xterm") if p != xterm],
               "the xterm restarted")
    assert "term was killed by signal 9; restarting it" in d.agent.read_log()


def test_killed_server_is_restarted_and_the_next_call_works(desk):
    desk.ok("mouse_move", coordinate=[10, 20])
    xvnc = desk.pid_of("Xvnc")
    os.kill(xvnc, signal.SIGKILL)
    # The very next call waits for the new server.
    res = desk.ok("get_cursor_position")
    assert res["structuredContent"] == {"x": 640, "y": 400}	# a new screen
    assert desk.pid_of("Xvnc") != xvnc
    desk.ok("mouse_move", coordinate=[30, 40])
    assert desk.ok("get_cursor_position")["structuredContent"] == \
        {"x": 30, "y": 40}
    # Reaped: no process under the agent is a zombie.
    assert all(state != "Z" for _, state in desk.descendants().values())
    assert desk.agent.get("/healthz").status_code == 200
    assert "the display server) was killed by signal 9" in \
        desk.agent.read_log()


def test_the_vnc_client_runs_as_the_user_confined_and_comes_back(desk):
    """The display's VNC and X clients run in the agent's VNC helper, a
    process of the user's under the commands' seccomp filter (the servers
    are the user's: what they send is parsed outside PID 1). The user may
    kill it: it is started again and the next call works."""
    [helper] = [pid for pid, (name, _) in desk.descendants().items()
                if name == "vnc-helper"]
    with open(f"/proc/{helper}/status") as f:
        status = dict(line.rstrip("\n").split(":\t", 1) for line in f)
    assert set(status["Uid"].split()) == {str(USER)}
    assert set(status["Gid"].split()) == {str(USER)}
    assert status["Seccomp"] == "2"
    with open(f"/proc/{helper}/environ", "rb") as f:
        assert b"SECRET_TOKEN" not in f.read()
    desk.ok("mouse_move", coordinate=[10, 20])
    os.kill(helper, signal.SIGKILL)
    assert desk.ok("get_cursor_position")["structuredContent"] == \
        {"x": 10, "y": 20}
    assert [pid for pid, (name, _) in desk.descendants().items()
            if name == "vnc-helper" and pid != helper]
    assert "vnc-helper (the display's VNC client) was killed by signal 9" \
        in desk.agent.read_log()
    assert desk.agent.get("/healthz").status_code == 200


def test_sigterm_stops_the_desktop(desk):
    pids = list(desk.descendants())
    assert desk.pids_of("Xvnc")
    assert desk.agent.stop()

    def gone():
        procs = processes()
        return not [p for p in pids if p in procs and procs[p][2] != "Z"]
    desk.wait_for(gone, "the desktop's processes to end", timeout=10)


class StartingAgent(Agent):
    """An agent that is up but not healthy: its display does not answer."""

    def wait_ready(self, timeout=10):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("agent exited: " + self.read_log())
            try:
                # A throwaway connection: see conftest's wait_ready.
                r = requests.get(self.url + "/healthz", timeout=1,
                                 headers=self.session.headers)
                if r.status_code == 503:
                    return
            except requests.ConnectionError:
                pass
            time.sleep(0.02)
        raise RuntimeError("agent did not answer: " + self.read_log())


def test_a_display_that_never_answers(tmp_workspace, desktop_dir):
    os.chown(tmp_workspace, USER, USER)
    # Not an X server at all: the display never answers.
    cfg = desktop_config(desktop_dir, free_display(), server={
        "name": "mute", "command": ["/bin/sleep", "600"]})
    agent = StartingAgent(tmp_workspace, ("--run-as", f"{USER}:{USER}",
                                          "--tools", "computer",
                                          "--desktop", cfg))
    try:
        r = agent.get("/healthz")
        assert r.status_code == 503
        assert r.json() == {"detail": "the desktop's display is not ready"}
        started = time.time()
        r = agent.post("/mcp/call_tool", {"tool_name": "computer",
                                          "arguments": {"action":
                                                        "get_screenshot"}})
        res = r.json()
        assert res["isError"] is True
        text = res["content"][0]["text"]
        assert text.startswith("The display is not running (the display's "
                               "VNC server does not answer at "), text
        assert text.endswith("the agent is restarting it: try again in a "
                             "few seconds")
        assert time.time() - started < 30
    finally:
        assert agent.stop()


def test_bad_desktop_files_stop_the_agent_at_start(tmp_workspace,
                                                   desktop_dir):
    def refused(cfg, *args):
        path = os.path.join(desktop_dir, "bad.json")
        with open(path, "w") as f:
            f.write(cfg if isinstance(cfg, str) else json.dumps(cfg))
        r = subprocess.run([AGENT_BIN, "--insecure-no-token", "--listen",
                            "127.0.0.1:0", "--workspace", tmp_workspace,
                            "--desktop", path, *args], capture_output=True,
                           text=True, timeout=10)
        assert r.returncode == 2, r.stderr
        return r.stderr.strip().replace(path, "FILE")

    server = {"command": ["/usr/bin/Xvnc", ":9"]}
    good = {"display": ":9", "vnc_socket": "/tmp/x.sock", "server": server}
    assert refused("{nope") == "sandbox-agent: --desktop FILE: " \
        "string or '}' expected near 'nope' (line 1)"
    assert refused({**good, "server": None}) == \
        "sandbox-agent: --desktop FILE: server: expected an object"
    assert refused({**good, "server": {"command": ["Xvnc"]}}) == \
        "sandbox-agent: --desktop FILE: server: the program must be an " \
        "absolute path, not Xvnc"
    assert refused({**good, "display": "host:0"}) == \
        "sandbox-agent: --desktop FILE: \"display\" must be local (\":N\") " \
        "and \"vnc_socket\" an absolute path"
    assert refused({**good, "colour": "red"}) == \
        "sandbox-agent: --desktop FILE: unknown key \"colour\" (display, " \
        "vnc_socket, server, programs, novnc, draw_timeout)"
    assert refused({**good, "draw_timeout": 0}) == \
        "sandbox-agent: --desktop FILE: \"draw_timeout\" must be seconds, " \
        "more than 0 and at most 3600"
    assert refused({**good, "novnc": "opt/novnc"}) == \
        "sandbox-agent: --desktop FILE: \"novnc\" must be an absolute path"
    assert refused({**good, "programs": [{"command": ["/bin/true"],
                                           "user": "0:0"}]},
                   "--run-as", f"{USER}:{USER}") == \
        "sandbox-agent: --desktop FILE: programs[0]: desktop programs " \
        "never run as root (give the agent --run-as, or the program a " \
        "\"user\")"
    # As root without --run-as, the server would be root: refused too.
    assert "desktop programs never run as root" in refused(good)


# ---- the computer tool ------------------------------------------------------

def test_cursor_moves_where_told(desk):
    desk.ok("mouse_move", coordinate=[123, 456])
    res = desk.ok("get_cursor_position")
    assert res["structuredContent"] == {"x": 123, "y": 456}
    assert json.loads(res["content"][0]["text"]) == {"x": 123, "y": 456}
    # As X itself says.
    assert desk.shell("xdotool getmouselocation --shell | head -2") == \
        "X=123\nY=456\n"
    # Coordinates are rounded as computer-use-mcp rounds them.
    desk.ok("mouse_move", coordinate=[10.5, 20.4])
    assert desk.ok("get_cursor_position")["structuredContent"] == \
        {"x": 11, "y": 20}
    desk.ok("left_click_drag", coordinate=[400, 300])
    assert desk.ok("get_cursor_position")["structuredContent"] == \
        {"x": 400, "y": 300}


def test_an_x_server_that_never_answers_is_given_up_on(start_desktop,
                                                      desktop_dir):
    """The pointer's place comes from the display's X server, the user's
    program: one that takes the connection and never answers costs each
    call a bounded wait, and the agent keeps serving."""
    fake = free_display()
    real = free_display()
    path = f"/tmp/.X11-unix/X{fake}"
    held = []
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    os.chmod(path, 0o777)	# the agent connects as the user
    listener.listen(16)

    def accept():
        while True:
            try:
                held.append(listener.accept()[0])	# never answered
            except OSError:
                return
    threading.Thread(target=accept, daemon=True).start()
    try:
        d = start_desktop(server={"name": "Xvnc", "command": [
            "/usr/bin/Xvnc", f":{real}", "-geometry", "1280x800",
            "-depth", "24", "-rfbunixpath",
            os.path.join(desktop_dir, "vnc.sock"), "-rfbport", "-1",
            "-SecurityTypes", "None", "-nolisten", "tcp", "-nolisten",
            "local", "-AlwaysShared"]}, display=fake)
        for _ in range(2):
            started = time.time()
            res = d.call("get_cursor_position")
            assert res["isError"] is True, res
            assert "the X server did not answer within 2000 ms" in \
                res["content"][0]["text"], res
            assert time.time() - started < 15
        assert held
        assert d.agent.get("/healthz").status_code == 200
        # The VNC side still works: a screenshot, without a crosshair.
        d.ok("get_screenshot")
    finally:
        listener.close()
        os.unlink(path)
        for s in held:
            s.close()


GRAB = """
import { screen } from "@nut-tree-fork/nut-js";
import { writeFileSync } from "node:fs";
const img = await screen.grab();
writeFileSync(process.argv[1], img.data);
"""


def x_picture(desk, path):
    """The screen as X itself has it (XGetImage, through nut-js), RGB."""
    r = subprocess.run([NODE, "--input-type=module", "-e", GRAB, path],
                       cwd=os.path.join(ROOT, "tests"), capture_output=True,
                       env={**os.environ, "DISPLAY": f":{desk.display}"},
                       timeout=60)
    assert r.returncode == 0, r.stderr
    with open(path, "rb") as f:
        # BGRX bytes as X gives them.
        return Image.frombytes("RGB", (1280, 800), f.read(), "raw", "BGRX")


def test_screenshot_is_what_x_shows(desk, tmp_path):
    """Our copy of the screen follows the VNC server's updates; it must
    be the picture X has, everywhere but under the cursor (X's picture
    has none, the VNC server draws it in ours) and the crosshair."""
    desk.terminal("seq 1 40; sleep 60", geometry="60x30+40+40")
    desk.ok("mouse_move", coordinate=[1200, 700])
    desk.ok("get_screenshot")
    desk.terminal("yes | head -c 3000; sleep 60", geometry="70x20+500+100")
    desk.ok("key", text="ctrl+c")
    time.sleep(0.5)
    ours = png_of(desk.ok("get_screenshot"))[0]
    x = x_picture(desk, str(tmp_path / "x.raw"))
    for img in (ours, x):
        img.paste((0, 0, 0), (1200 - 30, 700 - 30, 1200 + 30, 700 + 30))
    assert ours.tobytes() == x.tobytes()
    # Both windows are in it.
    assert dict((c, n) for n, c in ours.getcolors())[(255, 255, 255)] > \
        200000


def test_screenshot_is_a_1280x800_png_that_shows_the_screen(desk):
    desk.terminal("echo the screenshot test; sleep 60")
    desk.ok("mouse_move", coordinate=[640, 400])
    res = desk.ok("get_screenshot")
    assert res["content"][0] == {"type": "text", "text":
                                 '{"image_width":1280,"image_height":800}'}
    img, data = png_of(res)
    save_shot("agent-desktop.png", data)
    assert img.size == (1280, 800) and img.mode == "RGB"
    colours = img.getcolors(maxcolors=1 << 16)
    assert colours is not None and len(colours) >= 3	# not blank
    # The red crosshair where the cursor is.
    assert img.getpixel((640 + 15, 400)) == (255, 0, 0)
    assert img.getpixel((640, 400 - 15)) == (255, 0, 0)
    # The xterm's white window (default colours) is in the picture.
    assert img.getpixel((310, 210)) == (255, 255, 255)


def test_click_type_and_return_reach_a_program(desk):
    out = os.path.join(desk.agent.workspace, "typed.txt")
    desk.terminal("cat > typed.txt")
    text = "".join(chr(c) for c in range(0x20, 0x7f)) + \
        " héllo ÄÖÜß €→☃ ñ"
    desk.ok("left_click", coordinate=[500, 300])
    desk.ok("type", text=text)
    desk.ok("key", text="Return")
    desk.ok("type", text="second line\r\nthird\n")
    desk.ok("key", text="ctrl+d")
    desk.wait_for(lambda: os.path.exists(out) and
                  open(out, encoding="utf-8").read().endswith("third\n"),
                  "the typed text in the file")
    with open(out, encoding="utf-8") as f:
        assert f.read() == text + "\nsecond line\nthird\n"


def test_keys_and_combinations_as_the_terminal_gets_them(desk):
    out = os.path.join(desk.agent.workspace, "keys.bin")
    keys = [("ctrl+a", b"\x01"), ("F5", b"\x1b[15~"), ("Tab", b"\t"),
            ("shift+Tab", b"\x1b[Z"), ("Escape", b"\x1b"),
            ("BackSpace", b"\x7f"), ("Up", b"\x1b[A"), ("Home", b"\x1b[H"),
            ("Page_Down", b"\x1b[6~"), ("ctrl+shift+a", b"\x01"),
            ("shift+b", b"B"), ("A", b"A"), ("ctrl+e Return", b"\x05\r"),
            ("KP_Enter", b"\r"), ("space", b" "), ("minus", b"-"),
            ("plus", b"+"), ("alt+Tab", "\x89".encode())]	# 8-bit meta
    want = b"".join(w for _, w in keys)
    # Raw mode: every key's bytes as xterm sends them.
    desk.terminal(f"stty raw -echo; head -c {len(want)} > keys.bin")
    desk.ok("left_click", coordinate=[500, 300])
    for key, _ in keys:
        desk.ok("key", text=key)
    desk.wait_for(lambda: os.path.exists(out) and
                  os.path.getsize(out) >= len(want), "the keys' bytes",
                  timeout=5)
    with open(out, "rb") as f:
        assert f.read() == want


def test_bad_input_is_an_error_result_and_the_agent_keeps_serving(desk):
    def error(action=None, **args):
        body = dict(args)
        if action is not None:
            body["action"] = action
        r = desk.agent.post("/mcp/call_tool", {"tool_name": "computer",
                                               "arguments": body})
        assert r.status_code == 200, r.text
        res = r.json()
        assert res["isError"] is True, res
        return res["content"][0]["text"]

    prefix = ("MCP error -32602: Input validation error: Invalid arguments "
              "for tool computer: ")
    assert error("fly").startswith(prefix + "Invalid option: expected one "
                                   "of \"key\"|\"type\"|")
    assert error("mouse_move", coordinate=[1]) == prefix + \
        "Too small: expected array to have exactly 2 items at coordinate"
    assert error("mouse_move", coordinate=["a", 1]) == prefix + \
        "Invalid input: expected number, received string at coordinate[0]"
    assert error("type", text=5) == prefix + \
        "Invalid input: expected string, received number at text"
    assert error("key", text="a", extra=1) == prefix + \
        'Unrecognized key: "extra"'
    assert error("mouse_move") == "Coordinate required for mouse_move"
    assert error("type") == "Text required for type"
    assert error("key", text="") == "Text required for key"
    assert error("key", text="ctrl+nosuchkey") == "Invalid key: nosuchkey"
    assert error("scroll", coordinate=[5, 5], text="sideways") == \
        'Invalid scroll direction: sideways. Use "up", "down", "left", ' \
        'or "right"'
    assert error("scroll", coordinate=[5, 5], text="down:0") == \
        "Invalid scroll amount: 0"
    assert error("mouse_move", coordinate=[1280, 10]) == \
        "Coordinates (1280, 10) are outside display bounds of 1280x800"
    assert error("left_click", coordinate=[-3, 10]) == \
        "Coordinates (-3, 10) are outside display bounds of 1280x800"
    assert error("type", text="x" * 4097) == \
        "Text too long for type: 4097 characters (the limit is 4096; " \
        "type it in parts)"
    assert error("type", text="a\x07b") == \
        "Cannot type U+0007 (character 2 of the text): no key types that " \
        "control character"
    # Still serving, and the display still works.
    assert desk.agent.get("/healthz").status_code == 200
    desk.ok("scroll", coordinate=[5, 5], text="down:120")
    desk.ok("right_click")
    desk.ok("middle_click", coordinate=[7, 7])
    desk.ok("double_click")


# ---- side by side with computer-use-mcp ------------------------------------

@pytest.fixture
def pair(desk, start_agent, tmp_workspace):
    """Our desktop agent, and a second agent running the npm server (as its
    MCP server) on the same display."""
    ref_ws = os.path.join(os.path.dirname(tmp_workspace), "ref", "workspace")
    os.makedirs(ref_ws)
    ref = start_agent(workspace=ref_ws)
    r = ref.post("/mcp/add_servers", {"server_configs": {"mcpServers": {
        "computer-use": {"command": NODE, "args": [CUMCP], "env": {
            "DISPLAY": f":{desk.display}"}}}}})
    assert r.status_code == 200, r.text
    return desk, ref


def ref_call(ref, action, **args):
    r = ref.post("/mcp/call_tool", {"tool_name": "computer", "arguments": {
        "action": action, **args}})
    assert r.status_code == 200, r.text
    return r.json()


def shape(res):
    """The answer without its values: keys, item types, text when it is
    not data."""
    out = {"keys": sorted(res), "isError": res.get("isError"),
           "items": [(c["type"], sorted(c)) for c in res["content"]]}
    if "structuredContent" in res:
        out["structured"] = sorted(res["structuredContent"])
    return out


def test_listing_same_as_computer_use_mcp(pair):
    desk, ref = pair
    ours = desk.agent.get("/mcp/list_tools").json()
    theirs = ref.get("/mcp/list_tools").json()
    assert list(ours) == ["computer"] and list(ours["computer"]) == \
        ["computer"]
    o = ours["computer"]["computer"]
    t = theirs["computer-use"]["computer"]
    assert o["name"] == t["name"] == "computer"
    assert o["json_schema"]["function"]["parameters"] == \
        t["json_schema"]["function"]["parameters"]
    assert o["json_schema"]["function"]["name"] == "computer"


def test_answers_same_as_computer_use_mcp(pair):
    desk, ref = pair
    calls = [("mouse_move", {"coordinate": [200, 100]}),
             ("get_cursor_position", {}),
             ("left_click", {"coordinate": [5, 5]}),
             ("key", {"text": "shift"}),
             ("get_screenshot", {}),
             ("bogus", {}),
             ("mouse_move", {}),
             ("mouse_move", {"coordinate": [5000, 1]}),
             ("key", {"text": "nokey"}),
             ("type", {}),
             ("scroll", {"coordinate": [5, 5], "text": "sideways"}),
             ("key", {"text": "a", "extra": 1})]
    for action, args in calls:
        t = ref_call(ref, action, **args)
        o = desk.call(action, **args)
        assert shape(o) == shape(t), (action, args, o, t)
        if action == "get_screenshot":
            assert o["content"][0] == t["content"][0]
            assert png_of(o)[0].size == png_of(t)[0].size == (1280, 800)
        else:
            assert o["content"] == t["content"], (action, args)
        if "structuredContent" in t:
            assert o["structuredContent"] == t["structuredContent"]
    # Theirs is transparent: nut-js grabs X's 32-bit pixels, whose fourth
    # byte X leaves 0, as RGBA, and the PNG keeps that as alpha.
    theirs = png_of(ref_call(ref, "get_screenshot"))[0].convert("RGBA")
    alpha = theirs.getchannel("A").getcolors()
    assert alpha is not None and dict((v, n) for n, v in alpha)[0] > \
        1280 * 800 - 1000
    # Each sees where the other put the pointer: one display.
    desk.ok("mouse_move", coordinate=[321, 123])
    assert ref_call(ref, "get_cursor_position")["structuredContent"] == \
        {"x": 321, "y": 123}
    ref_call(ref, "mouse_move", coordinate=[42, 24])
    assert desk.ok("get_cursor_position")["structuredContent"] == \
        {"x": 42, "y": 24}
