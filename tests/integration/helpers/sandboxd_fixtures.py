"""Fixtures of the sandboxd tests: the real daemon, a real dockerd, the real
minimal image built from this tree's agent.

SANDBOXD_TEST_BACKEND picks what runs the sandboxes: docker (the default)
or crun (CONTAINER_DEPLOYMENT=crun: the images come from the image store
tools/build-image fills; dockerd only builds them). Tests of what only
Docker has are marked docker_only; the crun backend's own tests start crun
sandboxd whatever this says (CONTAINER_DEPLOYMENT in their env).

Every sandboxd here gets its own state directory, so its own instance id;
at teardown it is stopped and every container of that instance is removed
(Docker: by its label with the docker CLI; crun: everything under its
state directory's crun root), whatever the test did. Containers are only
ever reached over unix sockets or 127.0.0.1.
"""
import hashlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

import pytest
import requests

from conftest import ROOT, SANDBOXD_BIN, LoggedProcess, free_port, rss_kib

AGENT_BIN = os.path.join(ROOT, "agent", "sandbox-agent")
BUILD_IMAGE = os.path.join(ROOT, "tools", "build-image")
IMAGE_STORE = os.path.join(ROOT, "tools", "image-store")
LABEL_INSTANCE = "io.agentscope.sandboxd.instance"
LABEL_ANY = "io.agentscope.sandboxd"
BACKEND = os.environ.get("SANDBOXD_TEST_BACKEND", "docker")
assert BACKEND in ("docker", "crun"), BACKEND
docker_only = pytest.mark.skipif(BACKEND != "docker",
                                 reason="Docker's own behaviour")
# crun list's words as Docker's.
CRUN_STATES = {"running": "running", "paused": "paused", "stopped": "exited",
               "created": "created"}


def docker(*args, check=True, timeout=120):
    return subprocess.run(["docker", *args], capture_output=True, text=True,
                          check=check, timeout=timeout)


def log_tail(s, size=4000):
    """The end of a sandboxd's log without the access lines of polls."""
    lines = [line for line in s.read_log().splitlines(keepends=True)
             if '"GET /metrics"' not in line and '"GET /health"' not in line]
    return "".join(lines)[-size:]


def wait_until(predicate, timeout=30, interval=0.05, what="condition",
               logs=()):
    """logs: sandboxd instances whose log tails go into the failure."""
    deadline = time.time() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.time() > deadline:
            tails = "".join(f"\n--- log of {s.url}:\n{log_tail(s)}"
                            for s in logs)
            raise AssertionError(
                f"timed out after {timeout} s waiting for {what}{tails}")
        time.sleep(interval)


@pytest.fixture(scope="session")
def minimal_tag():
    """The minimal image of this tree's agent, tagged with the agent's hash
    so parallel checkouts with other agents never share a tag."""
    r = docker("version", "--format", "{{.Server.Version}}", check=False)
    assert r.returncode == 0, (
        "these tests need a Docker daemon; run them with tools/with-dockerd "
        "(make test does): " + r.stderr)
    with open(AGENT_BIN, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    tag = "t-" + sha[:16]
    image = f"agentscope/runtime-sandbox-minimal:{tag}"
    have = docker("image", "inspect", "--format",
                  "{{index .Config.Labels \"io.agentscope.sandboxd.agent-sha256\"}}",
                  image, check=False)
    if have.returncode != 0 or have.stdout.strip() != sha:
        subprocess.run([BUILD_IMAGE, "--tag", tag, "minimal"], check=True,
                       timeout=600)
    return tag


@pytest.fixture(scope="session")
def base_tag(minimal_tag):
    """The base image (Python and IPython) of this tree's agent, under the
    minimal image's tag so that one sandboxd serves both. Its Debian
    layers come from Docker's build cache after the first build."""
    subprocess.run([BUILD_IMAGE, "--tag", minimal_tag, "base"], check=True,
                   timeout=1800)
    return minimal_tag


@pytest.fixture(scope="session")
def filesystem_tag(base_tag):
    """The filesystem image (base plus the npm filesystem MCP server) of
    this tree's agent, under the same tag, built as base_tag is."""
    subprocess.run([BUILD_IMAGE, "--tag", base_tag, "filesystem"],
                   check=True, timeout=1800)
    return base_tag


class Sandboxd(LoggedProcess):
    """A running sandboxd on 127.0.0.1 with its own state directory."""

    def __init__(self, tag, env=None, args=(), token=None, workdir=None,
                 state_dir=None, wait=True, wrapper=()):
        # Short paths: agents' unix sockets live under the state dir.
        self.dir = workdir or tempfile.mkdtemp(prefix="sbxd-", dir="/tmp")
        self.state_dir = state_dir or os.path.join(self.dir, "st")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = token
        self.log_path = os.path.join(self.dir, "sandboxd.log")
        e = {k: v for k, v in os.environ.items()
             if k in ("PATH", "HOME", "LANG", "DOCKER_HOST", "ASAN_OPTIONS",
                      "UBSAN_OPTIONS")}
        e.update({
            "CONTAINER_DEPLOYMENT": BACKEND,
            "RUNTIME_SANDBOX_IMAGE_TAG": tag,
            "DEFAULT_SANDBOX_TYPE": "minimal",
            "POOL_SIZE": "0",
            "SANDBOXD_HEALTH_INTERVAL": "1",
            "SANDBOXD_STATE_DIR": self.state_dir,
            "SANDBOXD_ACCESS_LOG": "true",
        })
        if token is not None:
            e["BEARER_TOKEN"] = token
        e.update(env or {})
        self.env = e
        self.backend = e["CONTAINER_DEPLOYMENT"]
        self.args = list(args)
        # A command that execs sandboxd (strace -D ...), same pid.
        # LeakSanitizer cannot run under ptrace: it would fail the exit.
        self.wrapper = list(wrapper)
        if self.wrapper:
            e["ASAN_OPTIONS"] = ":".join(
                filter(None, [e.get("ASAN_OPTIONS"), "detect_leaks=0"]))
        self.session = requests.Session()
        if token is not None:
            self.session.headers["Authorization"] = f"Bearer {token}"
        self.proc = None
        self.instance = None
        # What the fixture's teardown takes as a clean exit.
        self.expected_exit = 0
        self.start(wait)

    def start(self, wait=True):
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [*self.wrapper, SANDBOXD_BIN, "--port", str(self.port),
             *self.args],
            env=self.env, cwd=self.dir, stdout=self.log,
            stderr=subprocess.STDOUT)
        if wait:
            self.wait_ready()

    def wait_ready(self, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("sandboxd exited: " + self.read_log())
            try:
                if requests.get(self.url + "/health", timeout=1).ok:
                    break
            except requests.ConnectionError:
                pass
            time.sleep(0.02)
        else:
            raise RuntimeError("sandboxd did not answer: " + self.read_log())
        with open(os.path.join(self.state_dir, "instance")) as f:
            self.instance = f.read().strip()

    # HTTP

    def get(self, path, **kw):
        kw.setdefault("timeout", 120)
        return self.session.get(self.url + path, **kw)

    def post(self, path, payload=None, **kw):
        kw.setdefault("timeout", 120)
        if payload is not None:
            kw["json"] = payload
        return self.session.post(self.url + path, **kw)

    def delete(self, path, **kw):
        kw.setdefault("timeout", 120)
        return self.session.delete(self.url + path, **kw)

    def rpc(self, method, **kwargs):
        """A manager method as the SDK calls it: {"data": ...} or raise."""
        r = self.post("/" + method, kwargs)
        assert r.status_code == 200, f"{method}: {r.status_code} {r.text}"
        return r.json()["data"]

    def create(self, sandbox_type="minimal", **kw):
        name = self.rpc("create", sandbox_type=sandbox_type, **kw)
        assert name, "create answered null: " + self.read_log()[-2000:]
        return name

    def shell(self, identity, command):
        result = self.rpc("call_tool", identity=identity,
                          tool_name="run_shell_command",
                          arguments={"command": command})
        return {c.get("description"): c["text"] for c in result["content"]}

    def metrics(self):
        r = self.get("/metrics")
        assert r.status_code == 200, r.text
        values = {}
        for line in r.text.splitlines():
            if line and not line.startswith("#"):
                key, value = line.rsplit(" ", 1)
                values[key] = float(value)
        return values

    # The backend's view

    @property
    def crun_root(self):
        return os.path.join(self.state_dir, "crun", "state")

    @property
    def crun_bundles(self):
        return os.path.join(self.state_dir, "crun", "sandboxes")

    def crun(self, *args, check=True):
        return subprocess.run(["crun", "--root", self.crun_root, *args],
                              capture_output=True, text=True, check=check,
                              timeout=120)

    def containers(self, all_states=True):
        """{name: state} of the containers of this instance (crun: every
        sandbox directory, "dead" when crun has no state of it)."""
        if self.backend == "crun":
            found = {}
            if os.path.isdir(self.crun_bundles):
                found = {n: "dead" for n in os.listdir(self.crun_bundles)}
            if os.path.isdir(self.crun_root):
                for c in json.loads(self.crun("list", "--format", "json")
                                    .stdout or "[]"):
                    found[c["id"]] = CRUN_STATES.get(c["status"],
                                                     c["status"])
            return {n: st for n, st in found.items()
                    if all_states or st == "running"}
        args = ["ps", "--format", "{{.Names}} {{.State}}", "--filter",
                f"label={LABEL_INSTANCE}={self.instance}"]
        if all_states:
            args.insert(1, "-a")
        out = docker(*args).stdout.split("\n")
        return dict(line.split(" ", 1) for line in out if line.strip())

    def kill_container(self, name):
        """Its first process killed behind sandboxd's back."""
        if self.backend == "crun":
            self.crun("kill", name, "KILL")
        else:
            docker("kill", name)

    def remove_container(self, name):
        """Gone behind sandboxd's back (docker rm -f)."""
        if self.backend == "crun":
            self.crun("delete", "--force", name)
            shutil.rmtree(os.path.join(self.crun_bundles, name))
        else:
            docker("rm", "-f", name)

    def sandbox_env(self, name):
        """The environment a sandbox's first process was given."""
        if self.backend == "crun":
            return self.crun_config(name)["process"]["env"]
        return self.inspect(name)["Config"]["Env"]

    def crun_config(self, name):
        """The OCI configuration of a crun sandbox."""
        with open(os.path.join(self.crun_bundles, name, "config.json")) as f:
            return json.load(f)

    def crun_saved(self, name):
        """What the crun backend keeps of a sandbox (sandbox.json)."""
        with open(os.path.join(self.crun_bundles, name, "sandbox.json")) as f:
            return json.load(f)

    def inspect(self, name):
        return json.loads(docker("inspect", name).stdout)[0]

    def rss_kib(self):
        return rss_kib(self.proc.pid)

    # Ending

    def signal(self, sig):
        self.proc.send_signal(sig)

    def wait_exit(self, timeout=120):
        try:
            return self.proc.wait(timeout)
        finally:
            self.log.close()

    def stop(self, timeout=300):
        """SIGTERM; returns the exit status (0 is clean: under an ASan
        build, also no memory error and no leak)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if not self.log.closed:
            self.log.close()
        return self.proc.returncode

    def remove_leftovers(self):
        if self.backend == "crun":
            for name in self.containers():
                self.crun("delete", "--force", name, check=False)
            return
        if self.instance is None:
            return
        ids = docker("ps", "-aq", "--filter",
                     f"label={LABEL_INSTANCE}={self.instance}").stdout.split()
        if ids:
            docker("rm", "-f", *ids, check=False, timeout=600)


@pytest.fixture
def start_sandboxd(minimal_tag):
    """Factory: start_sandboxd(env={...}, args=[...], token=...,
    tag=...) -> Sandboxd, its images of that tag (default: this tree's
    minimal). Stops each at teardown and removes every container of its
    instance."""
    started = []

    def start(tag=None, **kw):
        s = Sandboxd(tag or minimal_tag, **kw)
        started.append(s)
        return s

    yield start
    unclean = []
    for s in started:
        status = s.stop()
        if status != s.expected_exit:
            unclean.append(f"sandboxd exited with {status}:\n"
                           + s.read_log()[-4000:])
    for s in started:
        s.remove_leftovers()
    for s in started:
        shutil.rmtree(s.dir, ignore_errors=True)
    assert not unclean, "\n".join(unclean)


@pytest.fixture
def sandboxd(start_sandboxd):
    return start_sandboxd()


def write_types(directory, types):
    """A --types file; returns its path."""
    path = os.path.join(directory, "types.json")
    with open(path, "w") as f:
        json.dump({"types": types}, f)
    return path


@pytest.fixture
def scratch():
    """Factory: scratch(prefix) -> a new directory under /tmp, removed at
    teardown."""
    made = []

    def make(prefix="sbxd-"):
        d = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
        made.append(d)
        return d

    yield make
    for d in made:
        shutil.rmtree(d, ignore_errors=True)
