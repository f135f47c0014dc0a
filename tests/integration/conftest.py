"""Fixtures shared by the integration tests: real binaries over real HTTP.

Every server here listens on loopback or a unix socket in a temporary
directory; no test talks to any other address.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest
import requests

# The tests' own servers and clients (tests/integration/helpers/),
# imported by name.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "helpers"))
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# SANDBOX_AGENT_BIN: another build of the agent (make integration-asan).
AGENT_BIN = os.environ.get("SANDBOX_AGENT_BIN") or os.path.join(ROOT, "agent", "sandbox-agent")
# SANDBOXD_BIN: another build of sandboxd (make integration-asan).
SANDBOXD_BIN = os.environ.get("SANDBOXD_BIN") or os.path.join(ROOT, "supervisor", "sandboxd")
# Debian's interpreter (with python3-ipython), not whatever is first on PATH.
SYSTEM_PYTHON = "/usr/bin/python3"


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "memory: measures the agent's memory (left out under ASan)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def relay(src, dst):
    """Copies src to dst until either ends, then shuts both down (one half
    of a TCP relay a test puts between a client and a server)."""
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def rss_kib(pid, field="VmRSS"):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


class LoggedProcess:
    """A program of ours whose output goes to the file self.log_path
    (open as self.log)."""

    def read_log(self):
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")


class Agent(LoggedProcess):
    """A running sandbox-agent on 127.0.0.1 with its own workspace."""

    def __init__(self, workspace, extra_args=(), env=None, token="test-token",
                 wrapper=(), preexec_fn=None):
        self.workspace = workspace
        self.token = token
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = os.path.join(os.path.dirname(workspace), "agent.log")
        e = dict(os.environ)
        e.pop("SECRET_TOKEN", None)
        if token is not None:
            e["SECRET_TOKEN"] = token
        e.setdefault("AGENT_PYTHON", SYSTEM_PYTHON)
        e.update(env or {})
        # wrapper: a command that execs the agent (setpriv ...), same pid.
        # LeakSanitizer cannot run under ptrace: it would fail the exit.
        if "strace" in wrapper:
            e["ASAN_OPTIONS"] = ":".join(
                filter(None, [e.get("ASAN_OPTIONS"), "detect_leaks=0"]))
        args = [*wrapper, AGENT_BIN, "--listen", f"127.0.0.1:{self.port}",
                "--workspace", workspace, "--access-log", "true", *extra_args]
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(args, env=e, stdout=self.log,
                                     stderr=subprocess.STDOUT,
                                     preexec_fn=preexec_fn)
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {token}"
        self.wait_ready()

    def wait_ready(self, timeout=10):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("agent exited: " + self.read_log())
            try:
                # Not through self.session: Debian's urllib3 leaves a
                # request's read timeout on the socket it keeps alive, and
                # the next request would send its body under this 1 s
                # limit (a large upload to a busy ASan agent then failed
                # with "timed out" in sendall).
                r = requests.get(self.url + "/healthz", timeout=1,
                                 headers=self.session.headers)
                if r.status_code == 200:
                    return
            except requests.ConnectionError:
                pass
            time.sleep(0.02)
        raise RuntimeError("agent did not become healthy: " + self.read_log())

    def get(self, path, **kw):
        return self.session.get(self.url + path, **kw)

    def post(self, path, payload=None, **kw):
        if payload is not None:
            kw["json"] = payload
        return self.session.post(self.url + path, **kw)

    def put(self, path, **kw):
        return self.session.put(self.url + path, **kw)

    def delete(self, path, **kw):
        return self.session.delete(self.url + path, **kw)

    def shell(self, command, **extra):
        r = self.post("/tools/run_shell_command", {"command": command, **extra})
        assert r.status_code == 200, r.text
        return r.json()

    def stop(self):
        """SIGTERM, as a container runtime would; returns whether the
        agent exited cleanly (status 0, which under ASan also means no
        leak was found). An agent that already exited is the test's own
        business."""
        clean = True
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                clean = self.proc.wait(10) == 0
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                clean = False
        self.log.close()
        return clean


def result_texts(result):
    """{description: text} of an MCP result's text items."""
    return {c.get("description"): c["text"] for c in result["content"]
            if c.get("type") == "text"}


@pytest.fixture
def tmp_workspace():
    d = tempfile.mkdtemp(prefix="sbx-test-")
    ws = os.path.join(d, "workspace")
    os.mkdir(ws)
    yield ws
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def start_agent(tmp_workspace):
    """Factory: start_agent(*args, env=..., token=..., wrapper=...,
    preexec_fn=...) -> Agent."""
    started = []

    def start(*extra_args, env=None, token="test-token", workspace=None,
              wrapper=(), preexec_fn=None):
        a = Agent(workspace or tmp_workspace, extra_args, env, token, wrapper,
                  preexec_fn)
        started.append(a)
        return a

    yield start
    unclean = [a for a in started if not a.stop()]
    if unclean:
        pytest.fail("agent did not exit cleanly on SIGTERM (status %s):\n%s" % (
            unclean[0].proc.returncode, unclean[0].read_log()[-4000:]))


@pytest.fixture
def agent(start_agent):
    return start_agent()
