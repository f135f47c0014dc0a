"""build/httpc (common/http_client.c) against the real dockerd and agent."""
import json
import os
import subprocess
import time

from conftest import ROOT

HTTPC = os.path.join(ROOT, "build", "httpc")
DOCKER = "unix:/var/run/docker.sock"


def httpc(*args, stdin=None, timeout=60):
    return subprocess.run([HTTPC, *args], input=stdin, capture_output=True,
                          timeout=timeout)


def test_docker_version():
    p = httpc(DOCKER, "GET", "/version")
    assert p.returncode == 0, p.stderr
    version = json.loads(p.stdout)
    assert version["ApiVersion"]


def test_docker_head_shows_headers_only():
    p = httpc("-i", DOCKER, "HEAD", "/_ping")
    assert p.returncode == 0, p.stderr
    head, _, body = p.stdout.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert b"\r\nApi-Version: " in head
    assert body == b""


def test_docker_chunked_event_stream():
    # A bounded window of the event stream: dockerd sends it chunked and
    # closes at `until`.
    now = int(time.time())
    p = httpc("-i", DOCKER, "GET", f"/events?since={now - 600}&until={now + 1}")
    assert p.returncode == 0, p.stderr
    head, _, body = p.stdout.partition(b"\r\n\r\n")
    assert b"\r\nTransfer-Encoding: chunked" in head
    # The chunk framing is gone: what is left is the events, one per line.
    for line in body.splitlines():
        assert "Type" in json.loads(line)


def test_docker_error_answer():
    p = httpc(DOCKER, "GET", "/containers/no-such-container-httpc/json")
    assert p.returncode == 1
    assert "message" in json.loads(p.stdout)


def test_agent_with_bearer_token(agent):
    addr = f"127.0.0.1:{agent.port}"
    p = httpc("-H", f"Authorization: Bearer {agent.token}", addr, "GET",
              "/healthz")
    assert p.returncode == 0, p.stderr
    assert p.stdout == b"OK"

    p = httpc(addr, "GET", "/healthz")
    assert p.returncode == 1
    assert "detail" in json.loads(p.stdout)
    # The token never shows up in what the client or the agent logs.
    p = httpc("-H", "Authorization: Bearer wrong-token-value", addr, "GET",
              "/healthz")
    assert b"wrong-token-value" not in p.stderr
    assert "wrong-token-value" not in agent.read_log()


def test_agent_whole_and_chunked_bodies(agent):
    addr = f"127.0.0.1:{agent.port}"
    auth = f"Authorization: Bearer {agent.token}"
    payload = json.dumps({"command": "echo hello from httpc"})
    p = httpc("-H", auth, "-H", "Content-Type: application/json",
              "-d", payload, addr, "POST", "/tools/run_shell_command")
    assert p.returncode == 0, p.stderr
    assert "hello from httpc" in p.stdout.decode()

    # The same body streamed from stdin with chunked transfer encoding.
    p = httpc("-H", auth, "-H", "Content-Type: application/json",
              "-T", "-", addr, "POST", "/tools/run_shell_command",
              stdin=payload.encode())
    assert p.returncode == 0, p.stderr
    assert "hello from httpc" in p.stdout.decode()


def test_missing_socket(tmp_path):
    path = tmp_path / "missing.sock"
    p = httpc(f"unix:{path}", "GET", "/")
    assert p.returncode == 2
    err = p.stderr.decode()
    assert "502" in err and str(path) in err


def test_timeout_without_answer(tmp_path):
    import socket
    with socket.socket(socket.AF_UNIX) as s:
        path = str(tmp_path / "silent.sock")
        s.bind(path)
        s.listen(1)
        p = httpc("-t", "0.2", f"unix:{path}", "GET", "/")
    assert p.returncode == 2
    assert "504" in p.stderr.decode()
