"""The sandbox images, built by tools/build-image and run by the real dockerd.

Each type is built once per session (build-image skips a type whose inputs
have not changed) and started as a container of ours, published on
127.0.0.1 only; every request goes to the agent inside it. Containers carry
a label with this session's id and are removed by it.
"""
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
TYPES = ("minimal", "base", "filesystem", "browser")
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


def image_name(sandbox_type):
    return f"agentscope/runtime-sandbox-{sandbox_type}:latest"


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
        port = docker("port", self.id, "8000/tcp").stdout.split("\n")[0]
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


def test_base_workspace_is_a_git_repository_the_user_commits_to(sandbox):
    s = sandbox("base")
    assert s.out("git rev-parse --is-inside-work-tree") == "true\n"
    s.out("echo one > notes.txt && git add notes.txt && "
          "git commit -qm first")
    s.out("echo two >> notes.txt")
    diff = s.out("git diff")
    assert "+two" in diff
    assert s.out("git log --format=%an:%s") == "User:first\n"


# ---- browser ----------------------------------------------------------------

def test_browser_chromium_renders_a_page_served_inside_the_sandbox(sandbox):
    s = sandbox("browser")
    s.out("mkdir -p /tmp/site && echo '<p id=x>served inside</p>' "
          "> /tmp/site/index.html && "
          "(cd /tmp/site && nohup python3 -m http.server 8123 "
          "--bind 127.0.0.1 >/dev/null 2>&1 &) && "
          "for i in $(seq 50); do python3 -c 'import socket; "
          "socket.create_connection((\"127.0.0.1\", 8123))' 2>/dev/null "
          "&& break; sleep 0.1; done")
    dom = s.out("/usr/bin/chromium --headless --no-sandbox --disable-gpu "
                "--disable-dev-shm-usage --no-first-run "
                "--dump-dom http://127.0.0.1:8123/ 2>/dev/null")
    assert "served inside" in dom


def test_browser_mcp_server_starts_from_the_image_config(sandbox):
    s = sandbox("browser")
    cfg = json.loads(s.out("cat $MCP_CONFIG"))
    server = next(iter(cfg["mcpServers"].values()))
    init = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                       "params": {"protocolVersion": "2025-03-26",
                                  "capabilities": {},
                                  "clientInfo": {"name": "t",
                                                 "version": "1"}}})
    listing = json.dumps({"jsonrpc": "2.0", "id": 2,
                          "method": "tools/list"})
    cmd = " ".join([server["command"], *server["args"]])
    out = s.out(f"(echo '{init}'; sleep 1; echo '{listing}'; sleep 2) | "
                f"timeout 60 {cmd}")
    answers = {m["id"]: m for m in map(json.loads, out.strip().split("\n"))}
    assert answers[1]["result"]["serverInfo"]["name"] == "Playwright"
    names = {t["name"] for t in answers[2]["result"]["tools"]}
    assert {"browser_navigate", "browser_snapshot", "browser_click",
            "browser_take_screenshot", "browser_pdf_save",
            "browser_tabs"} <= names


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
