"""The sandbox images, built by tools/build-image and run by the real dockerd.

Each type is built once per session (build-image skips a type whose inputs
have not changed) and started as a container of ours, published on
127.0.0.1 only; every request goes to the agent inside it. Containers carry
a label with this session's id and are removed by it.
"""
import base64
import json
import os
import re
import subprocess
import time
import uuid

import pytest
import requests

from conftest import ROOT, result_texts

BUILD_IMAGE = os.path.join(ROOT, "tools", "build-image")
TYPES = ("minimal", "base", "code-interpreter", "filesystem", "browser", "gui")
LABEL = "io.agentscope.sandbox.test"
SESSION = uuid.uuid4().hex[:12]
TOKEN = "image-test-" + uuid.uuid4().hex
MiB = 1024 * 1024


def docker(*args, check=True, timeout=120):
    r = subprocess.run(["docker", *args], capture_output=True, text=True,
                       timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)}: {r.stderr.strip()}")
    return r


# RUNTIME_SANDBOX_IMAGE_TAG picks the images' tag (default latest), for
# tools/build-image and these tests alike.
TAG = os.environ.get("RUNTIME_SANDBOX_IMAGE_TAG", "latest")


def image_name(sandbox_type):
    return f"agentscope/runtime-sandbox-{sandbox_type}:{TAG}"


def agent_version():
    with open(os.path.join(ROOT, "Makefile")) as f:
        return re.search(r"^VERSION := (\S+)$", f.read(), re.M).group(1)


def build_image(*args, env=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([BUILD_IMAGE, *args], capture_output=True,
                          text=True, env=e, timeout=3600)


@pytest.fixture(scope="session")
def images():
    """Every type built (or found up to date) by tools/build-image."""
    r = build_image(*TYPES)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return {t: image_name(t) for t in TYPES}


@pytest.fixture(scope="session", autouse=True)
def remove_our_containers():
    yield
    ids = docker("ps", "-aq", "--filter", f"label={LABEL}={SESSION}").stdout
    if ids.split():
        docker("rm", "-f", *ids.split(), check=False)


class Sandbox:
    """One container of an image, its agent reached on 127.0.0.1."""

    def __init__(self, image, docker_args=()):
        self.id = docker("run", "-d", "--label", f"{LABEL}={SESSION}",
                         "-e", f"SECRET_TOKEN={TOKEN}",
                         "-p", "127.0.0.1::8000", *docker_args,
                         image).stdout.strip()
        r = docker("port", self.id, "8000/tcp", check=False)
        if r.returncode != 0:
            raise AssertionError("the container did not start: " + docker(
                "logs", self.id, check=False).stderr)
        port = r.stdout.split("\n")[0]
        self.url = "http://127.0.0.1:" + port.rsplit(":", 1)[1]
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {TOKEN}"
        self.wait_ready()

    def wait_ready(self, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                if self.session.get(self.url + "/healthz",
                                    timeout=2).status_code == 200:
                    return
            except requests.ConnectionError:
                pass
            state = docker("inspect", "-f", "{{.State.Status}}",
                           self.id).stdout.strip()
            if state not in ("created", "running"):
                break
            time.sleep(0.05)
        raise AssertionError("the agent did not become healthy: " +
                             docker("logs", self.id, check=False).stderr)

    def shell(self, command):
        r = self.session.post(self.url + "/tools/run_shell_command",
                              json={"command": command}, timeout=120)
        assert r.status_code == 200, r.text
        return r.json()

    def out(self, command):
        """stdout of a command that must succeed."""
        res = self.shell(command)
        t = result_texts(res)
        assert t["returncode"] == "0", res
        return t["stdout"]

    def remove(self):
        docker("rm", "-f", self.id, check=False)


@pytest.fixture
def sandbox(images):
    """Factory: sandbox(type, *docker_args) -> Sandbox, removed after."""
    started = []

    def start(sandbox_type, *docker_args):
        s = Sandbox(images[sandbox_type], docker_args)
        started.append(s)
        return s

    yield start
    for s in started:
        s.remove()


def image_size(name):
    return int(docker("image", "inspect", "-f", "{{.Size}}", name).stdout)


# ---- every image ------------------------------------------------------------

@pytest.mark.parametrize("sandbox_type", TYPES)
def test_image_runs_the_agent_as_pid1_and_commands_as_a_user(sandbox,
                                                             sandbox_type):
    s = sandbox(sandbox_type)
    res = s.shell("echo hello from $(cat /proc/1/comm); id -u; id -g; pwd")
    t = result_texts(res)
    assert t["returncode"] == "0"
    assert res["isError"] is False
    assert t["stdout"].split("\n")[:4] == [
        "hello from sandbox-agent", "1000", "1000", "/workspace"]
    # The token is the agent's alone.
    assert TOKEN not in s.out("env; cat /proc/1/environ 2>&1 || true")
    res = s.shell("echo oops >&2; exit 3")
    assert result_texts(res)["returncode"] == "3"
    assert result_texts(res)["stderr"] == "oops\n"
    assert res["isError"] is True


@pytest.mark.parametrize("sandbox_type", TYPES)
def test_image_labels_name_the_type_and_agent_version(images, sandbox_type):
    labels = json.loads(docker("image", "inspect", "-f",
                               "{{json .Config.Labels}}",
                               images[sandbox_type]).stdout)
    assert labels["io.agentscope.sandbox.type"] == sandbox_type
    assert labels["io.agentscope.sandbox.agent-version"] == agent_version()
    assert re.fullmatch(r"[0-9a-f]{64}",
                        labels["io.agentscope.sandbox.inputs-hash"])


@pytest.mark.parametrize("sandbox_type", ("minimal", "base"))
def test_healthcheck_reports_healthy_and_unhealthy(sandbox, sandbox_type):
    s = sandbox(sandbox_type, "--health-interval", "1s",
                "--health-retries", "1")

    def health():
        return docker("inspect", "-f", "{{.State.Health.Status}}",
                      s.id).stdout.strip()

    deadline = time.time() + 30
    while health() != "healthy" and time.time() < deadline:
        time.sleep(0.2)
    assert health() == "healthy"
    # A healthcheck that presents the wrong token is refused by the agent.
    r = docker("exec", "-e", "SECRET_TOKEN=wrong", s.id,
               "/usr/local/bin/sandbox-agent", "--healthcheck", check=False)
    assert r.returncode == 1
    assert "403" in r.stdout


def test_image_sizes(images):
    assert image_size(images["minimal"]) <= 8 * MiB
    assert image_size(images["base"]) <= 250 * MiB
    assert image_size(images["code-interpreter"]) <= 550 * MiB
    # The three with a desktop.
    assert image_size(images["filesystem"]) <= 350 * MiB
    assert image_size(images["browser"]) <= 1000 * MiB
    assert image_size(images["gui"]) <= 900 * MiB


# ---- base -------------------------------------------------------------------

def test_base_has_bash_python_ipython_pip_venv_and_git(sandbox):
    s = sandbox("base")
    assert s.out("echo $BASH_VERSION").startswith("5.")
    assert s.out("python3 -c 'import IPython; print(IPython.__name__)'") == \
        "IPython\n"
    assert s.out("python3 -m pip --version").startswith("pip ")
    # A user can make a venv and has pip in it.
    assert "pip" in s.out("python3 -m venv /tmp/v && /tmp/v/bin/pip --version")
    assert s.out("git --version").startswith("git version 2.")


def test_base_login_shell_sets_path_without_running_id(sandbox):
    # E2B's commands are `bash -l -c`: /etc/profile must take bash's $EUID
    # rather than run id (with no id on the PATH, it would print "id: not
    # found" and fail its test), and give the PATH dash's login shell
    # (which still asks id) gives.
    s = sandbox("base")
    user_path = "/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games"
    assert s.out("env PATH=/nonexistent /bin/bash -l -c "
                 "'echo \"$PATH\"' 2>&1") == user_path + "\n"
    assert s.out("sh -l -c 'echo \"$PATH\"' 2>&1") == user_path + "\n"


def test_base_workspace_is_a_git_repository_the_user_commits_to(sandbox):
    s = sandbox("base")
    assert s.out("git rev-parse --is-inside-work-tree") == "true\n"
    s.out("echo one > notes.txt && git add notes.txt && "
          "git commit -qm first")
    s.out("echo two >> notes.txt")
    diff = s.out("git diff")
    assert "+two" in diff
    assert s.out("git log --format=%an:%s") == "User:first\n"


def test_base_commit_and_diff_through_the_agent_with_the_users_git(sandbox):
    s = sandbox("base")
    r = s.session.put(s.url + "/workspace/file?path=notes/a.txt",
                      data=b"one\n")
    assert r.status_code == 200, r.text
    r = s.session.post(s.url + "/watcher/commit_changes",
                       json={"commit_message": "from the agent"})
    assert r.status_code == 200, r.text
    first = r.json()["commit"]
    assert re.fullmatch(r"[0-9a-f]{40}", first)
    # What the agent wrote and committed is the user's to change and to
    # commit on top of with git itself.
    s.out("echo two >> notes/a.txt && git commit -qam 'from the user'")
    assert s.out("git log --format=%s") == "from the user\nfrom the agent\n"
    s.out("echo three >> notes/a.txt")
    r = s.session.post(s.url + "/watcher/generate_diff",
                       json={"commit_a": None, "commit_b": None})
    assert r.status_code == 200, r.text
    diff = r.json()["diffs"]["notes/a.txt"]
    assert diff.startswith("--- a/notes/a.txt\n+++ b/notes/a.txt\n")
    assert "+three" in diff
    r = s.session.post(s.url + "/watcher/generate_diff",
                       json={"commit_a": first, "commit_b": s.out(
                           "git rev-parse HEAD").strip()})
    assert "+two" in r.json()["diffs"]["notes/a.txt"]


def test_base_ipython_cell_keeps_state_across_calls(sandbox):
    s = sandbox("base")

    def cell(code):
        r = s.session.post(s.url + "/tools/run_ipython_cell",
                           json={"code": code}, timeout=120)
        assert r.status_code == 200, r.text
        return r.json()

    assert cell("x = 40\nimport os")["isError"] is False
    res = cell("print(x + 2, os.getuid())")
    assert result_texts(res)["stdout"] == "42 1000\n"
    res = cell("1 / 0")
    assert res["isError"] is True
    assert "ZeroDivisionError" in result_texts(res)["stderr"]


# ---- code-interpreter ------------------------------------------------------

def test_code_interpreter_runs_pandas_and_matplotlib_warm(sandbox):
    """runCode as E2B's SDK sends it (sandboxd maps its port 49999 to /ci):
    the default context is started with the agent, as the user, in its
    home, with Debian's numpy, pandas and matplotlib."""
    s = sandbox("code-interpreter")
    deadline = time.time() + 60
    while "IPython kernel ready" not in docker("logs", s.id).stderr:
        assert time.time() < deadline, docker("logs", s.id).stderr
        time.sleep(0.1)
    assert "/ci/" not in docker("logs", s.id).stderr

    def run(code):
        r = s.session.post(s.url + "/ci/execute", json={"code": code},
                           timeout=120)
        assert r.status_code == 200, r.text
        lines = [json.loads(line) for line in r.text.splitlines()]
        assert lines[-1] == {"type": "end_of_execution"}
        assert not [x for x in lines if x["type"] == "error"], lines
        return [x for x in lines if x["type"] == "result"]

    [ctx] = s.session.get(s.url + "/ci/contexts").json()
    assert ctx["cwd"] == "/home/user"
    [who] = run("import os\nos.getuid(), os.getcwd()")
    assert who["text"] == "(1000, '/home/user')"
    [df] = run("import numpy as np, pandas as pd\n"
               "pd.DataFrame({'x': np.arange(3)})")
    assert "<table" in df["html"] and df["data"] == {"x": [0, 1, 2]}
    [fig] = run("import matplotlib.pyplot as plt\nplt.plot([1, 2])\n"
                "plt.show()")
    assert base64.b64decode(fig["png"]).startswith(b"\x89PNG")


# ---- filesystem ---------------------------------------------------------------

def test_filesystem_every_tool_through_the_agent(sandbox):
    s = sandbox("filesystem")

    def call(name, **arguments):
        r = s.session.post(s.url + "/mcp/call_tool",
                           json={"tool_name": name, "arguments": arguments},
                           timeout=60)
        assert r.status_code == 200, (name, r.text)
        res = r.json()
        assert res.get("isError") is not True, (name, res)
        return "\n".join(c["text"] for c in res["content"]
                         if c["type"] == "text")

    r = s.session.get(s.url + "/mcp/list_tools", timeout=60)
    names = {n for group in r.json().values() for n in group}
    assert {"read_file", "read_multiple_files", "write_file", "edit_file",
            "create_directory", "list_directory", "directory_tree",
            "move_file", "search_files", "get_file_info",
            "list_allowed_directories"} <= names
    assert "/workspace" in call("list_allowed_directories")
    call("create_directory", path="/workspace/docs")
    call("write_file", path="/workspace/docs/a.txt", content="alpha\nbeta\n")
    call("write_file", path="/workspace/docs/b.txt", content="gamma\n")
    assert call("read_file", path="/workspace/docs/a.txt") == "alpha\nbeta\n"
    both = call("read_multiple_files", paths=["/workspace/docs/a.txt",
                                              "/workspace/docs/b.txt"])
    assert "beta" in both and "gamma" in both
    call("edit_file", path="/workspace/docs/a.txt",
         edits=[{"oldText": "beta", "newText": "delta"}])
    assert "delta" in call("read_file", path="/workspace/docs/a.txt")
    listing = call("list_directory", path="/workspace/docs")
    assert "[FILE] a.txt" in listing and "[FILE] b.txt" in listing
    tree = json.loads(call("directory_tree", path="/workspace/docs"))
    assert {e["name"] for e in tree} == {"a.txt", "b.txt"}
    call("move_file", source="/workspace/docs/b.txt",
         destination="/workspace/docs/c.txt")
    assert "c.txt" in call("search_files", path="/workspace",
                           pattern="**/c.txt")
    assert "size" in call("get_file_info", path="/workspace/docs/c.txt")
    assert s.out("cat docs/a.txt docs/c.txt") == "alpha\ndelta\ngamma\n"


# ---- browser (through the agent's MCP client) ----------------------------

PAGE = """<!doctype html><html><head><title>Sandbox page</title></head><body>
<h1>served inside</h1><p id="msg">not clicked yet</p>
<button onclick="document.getElementById('msg').textContent='clicked, changed'">Press me</button>
<a href="/two.html">to page two</a></body></html>"""
PAGE_TWO = "<!doctype html><title>Page two</title><p>the second page</p>"
REFERENCE_BROWSER_TOOLS = {
    "browser_navigate", "browser_navigate_back", "browser_navigate_forward",
    "browser_close", "browser_resize", "browser_click", "browser_type",
    "browser_hover", "browser_drag", "browser_select_option",
    "browser_press_key", "browser_file_upload", "browser_snapshot",
    "browser_take_screenshot", "browser_pdf_save", "browser_tab_list",
    "browser_tab_new", "browser_tab_select", "browser_tab_close",
    "browser_wait_for", "browser_console_messages",
    "browser_network_requests", "browser_handle_dialog"}


def call_tool(s, name, arguments=None):
    r = s.session.post(s.url + "/mcp/call_tool",
                       json={"tool_name": name, "arguments": arguments or {}},
                       timeout=180)
    assert r.status_code == 200, (name, r.text)
    res = r.json()
    assert res.get("isError") is not True, (name, res)
    return res


def text_of(res):
    return "\n".join(c["text"] for c in res["content"] if c["type"] == "text")


def browser_tools(s):
    """The image's MCP servers start in the background with the agent; its
    MCP routes wait for them, so the first listing already has them."""
    r = s.session.get(s.url + "/mcp/list_tools", timeout=120)
    assert r.status_code == 200, r.text
    assert any("browser_navigate" in g for g in r.json().values()), r.json()
    return r.json()


@pytest.fixture
def browser(sandbox):
    """A browser sandbox with a site on 127.0.0.1:8123 inside it."""
    s = sandbox("browser")
    browser_tools(s)
    s.session.put(s.url + "/workspace/file?path=site/index.html",
                  data=PAGE.encode()).raise_for_status()
    s.session.put(s.url + "/workspace/file?path=site/two.html",
                  data=PAGE_TWO.encode()).raise_for_status()
    s.out("(cd site && nohup python3 -m http.server 8123 --bind 127.0.0.1 "
          ">/dev/null 2>&1 &) && for i in $(seq 100); do python3 -c "
          "'import socket; socket.create_connection((\"127.0.0.1\", 8123))' "
          "2>/dev/null && break; sleep 0.1; done")
    return s


def test_browser_lists_every_reference_tool_name(browser):
    names = {n for group in browser_tools(browser).values() for n in group}
    assert REFERENCE_BROWSER_TOOLS <= names, REFERENCE_BROWSER_TOOLS - names


def test_browser_navigates_snapshots_clicks_and_screenshots(browser):
    res = call_tool(browser, "browser_navigate",
                    {"url": "http://127.0.0.1:8123/"})
    assert "Sandbox page" in text_of(res)
    snap = text_of(call_tool(browser, "browser_snapshot"))
    assert "served inside" in snap and "not clicked yet" in snap
    ref = re.search(r'button "Press me" \[ref=(\w+)\]', snap).group(1)
    # The reference SDK's spelling of the element reference.
    call_tool(browser, "browser_click", {"element": "Press me button",
                                         "ref": ref})
    assert "clicked, changed" in text_of(call_tool(browser,
                                                   "browser_snapshot"))
    shot = call_tool(browser, "browser_take_screenshot", {})
    images = [c for c in shot["content"] if c["type"] == "image"]
    assert images and images[0]["mimeType"] == "image/png"
    assert base64.b64decode(images[0]["data"])[:8] == b"\x89PNG\r\n\x1a\n"


def test_browser_reference_tab_and_history_tools(browser):
    call_tool(browser, "browser_navigate", {"url": "http://127.0.0.1:8123/"})
    call_tool(browser, "browser_navigate",
              {"url": "http://127.0.0.1:8123/two.html"})
    call_tool(browser, "browser_navigate_back")
    assert "served inside" in text_of(call_tool(browser, "browser_snapshot"))
    call_tool(browser, "browser_navigate_forward")
    assert "the second page" in text_of(call_tool(browser,
                                                  "browser_snapshot"))
    call_tool(browser, "browser_tab_new", {"url": "http://127.0.0.1:8123/"})
    tabs = text_of(call_tool(browser, "browser_tab_list"))
    assert "Page two" in tabs and "Sandbox page" in tabs
    call_tool(browser, "browser_tab_select", {"index": 0})
    assert "the second page" in text_of(call_tool(browser,
                                                  "browser_snapshot"))
    call_tool(browser, "browser_tab_close", {"index": 1})
    assert "Sandbox page" not in text_of(call_tool(browser,
                                                   "browser_tab_list"))
    pdf = text_of(call_tool(browser, "browser_pdf_save",
                            {"filename": "page.pdf"}))
    assert "page.pdf" in pdf


# ---- the builder ----------------------------------------------------------------

def test_build_image_skips_types_whose_inputs_are_unchanged(images):
    r = build_image("minimal", "base")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("up to date (inputs unchanged), skipped") == 2


def test_build_image_builds_a_custom_dockerfile_as_a_new_type(images,
                                                                tmp_path):
    (tmp_path / "Dockerfile").write_text(
        "ARG BASE_IMAGE=debian:bookworm-slim\n"
        "FROM ${BASE_IMAGE}\n"
        "COPY sandbox-agent /usr/local/bin/sandbox-agent\n"
        "COPY hello.txt /etc/hello.txt\n"
        "ENTRYPOINT [\"/usr/local/bin/sandbox-agent\"]\n"
        "CMD [\"--listen\", \"0.0.0.0:8000\", \"--workspace\", \"/tmp\"]\n")
    (tmp_path / "hello.txt").write_text("custom type\n")
    name = f"sbxtest{SESSION}"
    tag = "t" + SESSION
    image = f"agentscope/runtime-sandbox-{name}:{tag}"
    try:
        r = build_image("--dockerfile", str(tmp_path / "Dockerfile"),
                        "--name", name, "--tag", tag)
        assert r.returncode == 0, r.stdout + r.stderr
        labels = json.loads(docker("image", "inspect", "-f",
                                   "{{json .Config.Labels}}", image).stdout)
        assert labels["io.agentscope.sandbox.type"] == name
        s = Sandbox(image)
        try:
            assert s.out("cat /etc/hello.txt") == "custom type\n"
        finally:
            s.remove()
    finally:
        docker("rmi", "-f", image, check=False)


def test_build_image_says_so_when_docker_is_not_reachable(tmp_path):
    r = build_image("minimal", env={
        "DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"})
    assert r.returncode == 1
    assert "cannot reach the Docker daemon" in r.stderr
    assert str(tmp_path) in r.stderr


def test_build_image_refuses_an_unknown_type():
    r = build_image("no-such-type")
    assert r.returncode == 1
    assert "unknown type 'no-such-type'" in r.stderr
