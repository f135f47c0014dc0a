"""Starting sandboxd: --help, --version, configuration errors naming their
key, .env and --config files, a unix socket, one supervisor per state
directory, and serving while Docker does not answer."""
import http.client
import os
import socket
import subprocess

import pytest
import requests

from conftest import SANDBOXD_BIN
from sandboxd_fixtures import (scratch, Sandboxd, docker_only,  # noqa: F401
                               minimal_tag, start_sandboxd)


def run(scratch, args, env=None, cwd=None):
    e = {"PATH": os.environ["PATH"], "SANDBOXD_STATE_DIR": scratch()}
    e.update(env or {})
    return subprocess.run([SANDBOXD_BIN, *args], env=e, cwd=cwd or "/tmp",
                          capture_output=True, text=True, timeout=30)


def test_help_and_version(scratch):
    r = run(scratch, ["--help"])
    assert r.returncode == 0
    assert r.stdout.startswith("usage: sandboxd")
    for key in ("--port", "--host", "--config", "POOL_SIZE", "BEARER_TOKEN",
                "--state-dir", "--types"):
        assert key in r.stdout
    r = run(scratch, ["--version"])
    assert r.returncode == 0
    assert r.stdout.startswith("sandboxd ")


@pytest.mark.parametrize("env,key", [
    ({"PORT_RANGE": "nope"}, "PORT_RANGE"),
    ({"POOL_SIZE": "many"}, "POOL_SIZE"),
    ({"DEFAULT_SANDBOX_TYPE": "unheard-of"}, "DEFAULT_SANDBOX_TYPE"),
    # Nothing listens on port 1: Redis is unreachable at start.
    ({"REDIS_ENABLED": "true", "REDIS_PORT": "1",
      "SANDBOXD_REDIS_SECRET": "s" * 32}, "REDIS_SERVER"),
    ({"HEARTBEAT_TIMEOUT": "-1"}, "HEARTBEAT_TIMEOUT"),
])
def test_bad_configuration_names_the_key(env, key, scratch):
    r = run(scratch, [], env)
    assert r.returncode == 2
    assert r.stderr.startswith("sandboxd: ")
    assert key in r.stderr


def test_config_file_and_dotenv(start_sandboxd, minimal_tag, scratch):
    d = scratch("sbxd-")
    with open(os.path.join(d, ".env"), "w") as f:
        f.write("BEARER_TOKEN=from-dotenv\nPOOL_SIZE=0\n")
    with open(os.path.join(d, "bad.env"), "w") as f:
        f.write("POOOL_SIZE=1\n")
    r = run(scratch, ["--config", "bad.env"], cwd=d)
    assert r.returncode == 2
    assert "bad.env:1: unknown key POOOL_SIZE" in r.stderr
    with open(os.path.join(d, "good.env"), "w") as f:
        f.write('BEARER_TOKEN="from-config"\n')
    s = start_sandboxd(workdir=d, args=["--config", "good.env"])
    assert requests.post(s.url + "/list_session_keys", json={},
                         headers={"Authorization": "Bearer from-dotenv"}
                         ).status_code == 401
    assert requests.post(s.url + "/list_session_keys", json={},
                         headers={"Authorization": "Bearer from-config"}
                         ).status_code == 200


def test_one_supervisor_per_state_dir(start_sandboxd, scratch):
    s = start_sandboxd()
    r = run(scratch, ["--port", "0"], {"SANDBOXD_STATE_DIR": s.state_dir})
    assert r.returncode != 0
    assert "another sandboxd is using the state directory" in r.stderr


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost")
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.path)


def test_unix_socket(start_sandboxd, scratch):
    d = scratch("sbxd-")
    path = os.path.join(d, "sandboxd.sock")
    s = start_sandboxd(args=["--unix-socket", path])
    conn = UnixHTTPConnection(path)
    conn.request("GET", "/health")
    r = conn.getresponse()
    assert r.status == 200
    assert b'"healthy"' in r.read()
    s.stop()
    assert not os.path.exists(path)


@docker_only
def test_serves_while_docker_is_away(start_sandboxd):
    s = start_sandboxd(env={"DOCKER_HOST": "unix:///tmp/no-docker-here.sock",
                            "POOL_SIZE": "1"})
    assert requests.get(s.url + "/health").json()["status"] == "healthy"
    r = s.post("/v1/sandboxes", {"type": "minimal"})
    assert r.status_code == 502
    assert "cannot reach the Docker daemon" in r.json()["detail"]
    r = s.post("/create", {"sandbox_type": "minimal"})
    assert r.status_code == 200 and r.json()["data"] is None
    # Nothing was left behind on our side either.
    assert os.listdir(os.path.join(s.state_dir, "workspaces")) == []
    listed = s.get("/v1/sandboxes").json()
    assert listed["sandboxes"] == [] and listed["total"] == 0
    assert "cannot list containers" in s.read_log()
