"""Hostile clients of the HTTP server both programs share (common/http_*.c):
what a security review did to the agent and sandboxd over the wire, each
reproduced against the real binaries, byte for byte.

- a NUL in a query parameter made the 400 before auth carry freed heap bytes;
- 'Transfer-Encoding : chunked' and folded header lines were taken, which a
  proxy in front may read otherwise (request smuggling);
- 404 and 405 told clients without the token which paths exist;
- connections had no limit, and with descriptors exhausted the accept loop
  spun at 100% CPU writing tens of MB of log a second;
- the head timeout was an idle one (a byte every 20 s held a connection
  forever), and a body could be trickled as slowly as one liked;
- a 30 MiB JSON body of '[],' took the agent to 1.4 GiB, and kept it;
- a path's %0a went into the access log decoded: a forged log line.

Limits are shortened through the programs' options (environment variables,
which builds without the option ignore: the tests then fail on the missing
behaviour, not on a refused flag).
"""
import json
import os
import resource
import socket
import subprocess
import time

import pytest
import requests

from conftest import AGENT_BIN, free_port, rss_kib
from sandboxd_fixtures import minimal_tag, start_sandboxd  # noqa: F401

TOKEN = "test-token"
AUTH = b"Authorization: Bearer test-token\r\n"


def exchange(port, data, timeout=10):
    """Send raw bytes; everything the server answers until it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        while True:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                break
            out += chunk
    return out


def answer(raw):
    """(status, body) of the first answer in raw."""
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 "), raw[:200]
    return int(head.split(b" ", 2)[1]), body


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def closed_by_server(sock):
    """Whether the server has closed (or answered and closed) sock."""
    sock.setblocking(False)
    try:
        data = sock.recv(65536)
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        sock.setblocking(True)
    return data == b"" or data.startswith(b"HTTP/1.1 408")


def trickle(port, first, step, seconds=15, pause=0.5):
    """Send first, then step every pause seconds; True once the server has
    cut the connection, False if it still listens after `seconds`."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(first)
        deadline = time.time() + seconds
        while time.time() < deadline:
            time.sleep(pause)
            if closed_by_server(s):
                return True
            try:
                s.sendall(step)
            except OSError:
                return True
    return False


# Replies before auth: fixed text only.

NAMES = ["x", "a" * 40, "n" * 300]


@pytest.mark.parametrize("name", NAMES)
def test_agent_bad_query_before_auth_is_fixed_text(agent, name):
    raw = exchange(agent.port, b"GET /healthz?%s=a%%00b HTTP/1.1\r\n"
                   b"Host: x\r\n\r\n" % name.encode())
    assert answer(raw) == (400, b'{"detail":"malformed query string"}')
    raw = exchange(agent.port, b"GET /healthz?%s%%00=b HTTP/1.1\r\n"
                   b"Host: x\r\n\r\n" % name.encode())
    assert answer(raw) == (400, b'{"detail":"malformed query string"}')
    assert agent.get("/healthz").status_code == 200


def test_agent_unknown_paths_need_the_token(agent):
    cases = [(b"GET /nope", 404), (b"POST /healthz", 405),
             (b"GET /fastapi/nope", 404), (b"DELETE /tools/run_shell_command",
                                           405)]
    for line, status in cases:
        raw = exchange(agent.port, line + b" HTTP/1.1\r\nHost: x\r\n"
                       b"Content-Length: 0\r\n\r\n")
        assert answer(raw) == (403, b'{"detail":"Not authenticated"}'), line
        raw = exchange(agent.port, line + b" HTTP/1.1\r\nHost: x\r\n"
                       b"Authorization: Bearer wrong\r\n"
                       b"Content-Length: 0\r\n\r\n")
        assert answer(raw) == (403, b'{"detail":"Invalid token"}'), line
        raw = exchange(agent.port, line + b" HTTP/1.1\r\nHost: x\r\n" + AUTH +
                       b"Content-Length: 0\r\nConnection: close\r\n\r\n")
        assert answer(raw)[0] == status, line


def test_agent_access_log_cannot_be_forged(agent):
    # A decoded path went into the access log as it was: %0a started a
    # line of the attacker's choosing, before auth, and %1b steered the
    # terminal of whoever read the log.
    forged = b"2026-01-01T00:00:00.000Z sandbox-agent[1] info: FORGED"
    raw = exchange(agent.port, b"GET /x%0a" + forged.replace(b" ", b"%20") +
                   b"%1b[2J HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert answer(raw)[0] == 403
    assert agent.get("/healthz").status_code == 200
    log = agent.read_log()
    lines = [line for line in log.splitlines() if "FORGED" in line]
    assert len(lines) == 1, log[-2000:]
    assert not lines[0].startswith("2026-01-01"), lines
    assert "/x\\x0a2026-01-01" in lines[0] and "\\x1b[2J" in lines[0], lines
    assert "\x1b" not in log


# Request smuggling forms (RFC 9112 5.1, 5.2).

def chunked(body):
    return b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)


def test_agent_refuses_space_before_colon(agent, tmp_workspace):
    body = json.dumps({"command": "echo smuggled > smuggled.txt"}).encode()
    for name in (b"Transfer-Encoding : chunked", b"Transfer-Encoding\t: chunked"):
        raw = exchange(agent.port, b"POST /tools/run_shell_command HTTP/1.1\r\n"
                       b"Host: x\r\n" + AUTH + name + b"\r\n\r\n" + chunked(body))
        status, detail = answer(raw)
        assert status == 400, raw
        # (http-parser itself refuses the tab.)
        assert json.loads(detail)["detail"] in (
            "malformed HTTP request: invalid character in a header name",
            "malformed HTTP request: HPE_INVALID_HEADER_TOKEN")
    assert not os.path.exists(os.path.join(tmp_workspace, "smuggled.txt"))


def test_agent_refuses_folded_headers(agent, tmp_workspace):
    body = json.dumps({"command": "echo smuggled > smuggled.txt"}).encode()
    for fold in (b"X-A: a\r\n b", b"X-A: a\r\n\tTransfer-Encoding: chunked",
                 b"Transfer-Encoding: identity\r\n chunked"):
        raw = exchange(agent.port, b"POST /tools/run_shell_command HTTP/1.1\r\n"
                       b"Host: x\r\n" + AUTH + fold + b"\r\n"
                       b"Content-Length: %d\r\n\r\n" % len(body) + body)
        status, detail = answer(raw)
        assert status == 400, raw
        assert json.loads(detail) == {"detail": "malformed HTTP request: a "
                                      "header folded over several lines "
                                      "(obs-fold)"}
    assert not os.path.exists(os.path.join(tmp_workspace, "smuggled.txt"))


# Connections.

def test_agent_connection_limit(start_agent):
    a = start_agent(env={"AGENT_MAX_CONNECTIONS": "10"})
    a.session.close()
    held = [socket.create_connection(("127.0.0.1", a.port)) for _ in range(10)]
    try:
        time.sleep(0.5)
        for _ in range(5):
            raw = exchange(a.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
                           timeout=5)
            assert answer(raw) == (503, b'{"detail":"too many connections; '
                                   b'retry later"}')
    finally:
        for s in held:
            s.close()
    deadline = time.time() + 10
    while True:
        try:
            if requests.get(a.url + "/healthz", headers={
                    "Authorization": "Bearer " + TOKEN}, timeout=2).ok:
                break
        except requests.ConnectionError:
            pass
        assert time.time() < deadline, "not serving after the flood"
        time.sleep(0.1)
    assert a.read_log().count("the limit: refusing") == 1


def test_agent_refusal_is_not_reset(start_agent):
    # Refused at the limit, the agent read what had come and closed: what
    # came after (or a body longer than it read) was unread at the close,
    # so the kernel reset the connection instead of ending it, and the
    # client got "connection reset" after the 503 (under load, with a
    # plain GET that arrived between the read and the close).
    a = start_agent(env={"AGENT_MAX_CONNECTIONS": "2"})
    a.session.close()
    held = [socket.create_connection(("127.0.0.1", a.port)) for _ in range(2)]
    body = b"x" * (1 << 20)
    try:
        time.sleep(0.3)
        with socket.create_connection(("127.0.0.1", a.port), timeout=10) as s:
            s.sendall(b"POST /healthz HTTP/1.1\r\nHost: x\r\n"
                      b"Content-Length: %d\r\n\r\n" % len(body) + body)
            out = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                out += chunk
        assert answer(out) == (503, b'{"detail":"too many connections; '
                               b'retry later"}')
    finally:
        for s in held:
            s.close()


def low_fd_limit():
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))


def test_agent_out_of_descriptors_does_not_spin(start_agent):
    # A limit of connections above what the descriptors allow: accept
    # itself fails with EMFILE.
    a = start_agent(env={"AGENT_MAX_CONNECTIONS": "1000"},
                    preexec_fn=low_fd_limit)
    a.session.close()
    log_before = os.path.getsize(a.log_path)
    held = []
    try:
        for _ in range(150):
            held.append(socket.create_connection(("127.0.0.1", a.port)))
        time.sleep(0.5)
        cpu = cpu_seconds(a.proc.pid)
        time.sleep(3)
        cpu = cpu_seconds(a.proc.pid) - cpu
        grown = os.path.getsize(a.log_path) - log_before
    finally:
        for s in held:
            s.close()
    assert cpu < 0.5, f"the agent used {cpu:.2f} s of CPU in 3 s, holding"
    assert grown < 64 * 1024, f"the log grew by {grown} bytes"
    assert "Too many open files" in a.read_log()
    deadline = time.time() + 15
    while True:
        try:
            if requests.get(a.url + "/healthz", headers={
                    "Authorization": "Bearer " + TOKEN}, timeout=2).ok:
                break
        except requests.RequestException:
            pass
        assert time.time() < deadline, "not serving after the flood"
        time.sleep(0.1)


# Slow clients.

def test_agent_head_deadline_is_total(start_agent):
    a = start_agent(env={"AGENT_HEADER_TIMEOUT": "2"})
    # A byte every half second: never idle, never complete.
    assert trickle(a.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ",
                   b"a"), "a head trickled for 15 s was not cut"
    # Blank lines before a request start no message, but count too.
    assert trickle(a.port, b"\r\n", b"\r\n"), "blank lines held the connection"
    assert a.get("/healthz").status_code == 200


def test_agent_body_minimum_rate(start_agent):
    a = start_agent(env={"AGENT_BODY_MIN_RATE": "1000",
                         "AGENT_BODY_RATE_WINDOW": "1"})
    head = (b"POST /tools/run_shell_command HTTP/1.1\r\nHost: x\r\n" + AUTH +
            b"Content-Length: 100000\r\n\r\n{\"command\": \"")
    with socket.create_connection(("127.0.0.1", a.port), timeout=5) as s:
        s.sendall(head)
        deadline = time.time() + 15
        got = b""
        while time.time() < deadline and not got:
            time.sleep(0.5)
            s.setblocking(False)
            try:
                got = s.recv(65536) or b"closed"
            except BlockingIOError:
                pass
            finally:
                s.setblocking(True)
            if not got:
                s.sendall(b"echo; " * 2)
    assert got.startswith(b"HTTP/1.1 408 "), got
    assert b"request body too slow: under 1000 bytes/s for 1 s" in got


def test_agent_uploads_at_normal_speed_pass_the_rate(start_agent, tmp_workspace):
    a = start_agent(env={"AGENT_BODY_RATE_WINDOW": "1"})
    size = 64 * 1024 * 1024

    def pieces():
        block = b"u" * (1024 * 1024)
        for _ in range(size // len(block)):
            yield block

    r = a.put("/workspace/file", params={"path": "big.bin"}, data=pieces())
    assert r.status_code in (200, 201), r.text
    assert os.path.getsize(os.path.join(tmp_workspace, "big.bin")) == size
    # A large command is a JSON body of 17 MiB: within its route's limit.
    r = a.post("/tools/run_shell_command",
               {"command": "echo ok", "pad": "p" * (17 * 1024 * 1024)})
    assert r.status_code == 200, r.text[:200]
    assert "ok" in r.text


# JSON amplification.

@pytest.mark.memory
def test_agent_json_structure_is_bounded(start_agent):
    a = start_agent()
    pid = a.proc.pid
    hwm = rss_kib(pid, "VmHWM")
    body = (b'{"command": "true", "x": [' + b"[]," * (10 * 1024 * 1024) +
            b"[]]}")
    r = a.post("/tools/run_shell_command", data=body,
               headers={"Content-Type": "application/json"})
    assert r.status_code == 413, r.text[:200]
    assert "JSON body too complex" in r.json()["detail"]
    grown = rss_kib(pid, "VmHWM") - hwm
    assert grown < 256 * 1024, f"peak RSS grew by {grown} KiB"
    assert rss_kib(pid) < hwm + 32 * 1024, "memory kept after the request"
    # Small routes take 1 MiB of JSON.
    r = a.post("/workspace/mkdir", {"path": "d", "pad": "p" * (2 << 20)})
    assert r.status_code == 413, r.text[:200]


@pytest.mark.memory
def test_agent_memory_comes_back_after_a_large_body(start_agent, tmp_workspace):
    a = start_agent("--tools", "filesystem")
    base = rss_kib(a.proc.pid)
    content = "line of text\n" * (20 * 1024 * 1024 // 13)
    r = a.post("/mcp/call_tool", {"tool_name": "write_file", "arguments": {
        "path": "big.txt", "content": content}})
    assert r.status_code == 200, r.text[:300]
    assert os.path.getsize(os.path.join(tmp_workspace, "big.txt")) == len(content)
    time.sleep(0.2)
    assert rss_kib(a.proc.pid) < base + 16 * 1024


# The same findings on sandboxd, which shares the server.

def sandboxd_health_ok(s):
    return requests.get(s.url + "/health", timeout=5).status_code == 200


@pytest.mark.parametrize("name", NAMES)
def test_sandboxd_bad_query_before_auth_is_fixed_text(start_sandboxd, name):
    s = start_sandboxd(token=TOKEN)
    raw = exchange(s.port, b"GET /health?%s=a%%00b HTTP/1.1\r\nHost: x\r\n\r\n"
                   % name.encode())
    assert answer(raw) == (400, b'{"detail":"malformed query string"}')
    assert sandboxd_health_ok(s)


def test_sandboxd_unknown_paths_need_the_token(start_sandboxd):
    s = start_sandboxd(token=TOKEN)
    for line, status in [(b"GET /nope", 404), (b"POST /health", 405),
                         (b"GET /create", 405)]:
        raw = exchange(s.port, line + b" HTTP/1.1\r\nHost: x\r\n"
                       b"Content-Length: 0\r\n\r\n")
        assert answer(raw) == (401, b'{"detail":"Authentication required"}'), \
            line
        raw = exchange(s.port, line + b" HTTP/1.1\r\nHost: x\r\n" + AUTH +
                       b"Content-Length: 0\r\nConnection: close\r\n\r\n")
        assert answer(raw)[0] == status, line
    # The open route stays open.
    assert sandboxd_health_ok(s)


def test_sandboxd_refuses_smuggling_forms(start_sandboxd):
    s = start_sandboxd(token=TOKEN)
    body = b'{"sandbox_type": "minimal"}'
    for extra in (b"Transfer-Encoding : chunked\r\n",
                  b"X-A: a\r\n Transfer-Encoding: chunked\r\n"):
        raw = exchange(s.port, b"POST /list_session_keys HTTP/1.1\r\n"
                       b"Host: x\r\n" + AUTH + extra + b"\r\n" + chunked(body))
        assert answer(raw)[0] == 400, raw
    raw = exchange(s.port, b"GET /health HTTP/1.1\r\nHost: x\r\nX-A: a\r\n"
                   b" b\r\n\r\n")
    assert answer(raw)[0] == 400, raw
    assert s.containers() == {}


def test_sandboxd_connection_limit_and_head_deadline(start_sandboxd):
    s = start_sandboxd(env={"SANDBOXD_MAX_CONNECTIONS": "8",
                            "SANDBOXD_HEADER_TIMEOUT": "2"})
    s.session.close()
    held = [socket.create_connection(("127.0.0.1", s.port)) for _ in range(8)]
    try:
        time.sleep(0.5)
        raw = exchange(s.port, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
                       timeout=5)
        assert answer(raw)[0] == 503
    finally:
        for c in held:
            c.close()
    deadline = time.time() + 10
    while True:
        try:
            if sandboxd_health_ok(s):
                break
        except requests.ConnectionError:
            pass
        assert time.time() < deadline, "not serving after the flood"
        time.sleep(0.1)
    assert trickle(s.port, b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ",
                   b"a"), "a head trickled for 15 s was not cut"


@pytest.mark.memory
def test_sandboxd_json_bodies_are_bounded(start_sandboxd):
    s = start_sandboxd()
    hwm = rss_kib(s.proc.pid, "VmHWM")
    body = b"[" + b"[]," * (10 * 1024 * 1024) + b"[]]"
    r = s.post("/create", data=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 413, r.text[:200]
    grown = rss_kib(s.proc.pid, "VmHWM") - hwm
    assert grown < 128 * 1024, f"peak RSS grew by {grown} KiB"
    assert s.containers() == {}


# The unix socket's mode.

def test_agent_unix_socket_mode_is_not_set_by_name(tmp_path):
    """The socket is made 0666 at bind, not by a chmod of its name
    afterwards: a peer who can write the socket's directory could have
    renamed a symlink to another file over that name by then, and root
    would chmod that file. strace holds bind's return for a second, which
    is the window such a peer would race for."""
    sock_dir = tmp_path / "run"
    sock_dir.mkdir()
    sock = sock_dir / "agent.sock"
    victim = tmp_path / "victim"
    victim.write_text("root only")
    victim.chmod(0o600)
    ws = tmp_path / "ws"
    ws.mkdir()
    port = free_port()
    log = open(tmp_path / "agent.log", "wb")
    # -D: strace runs as a grandchild, so proc is the agent itself.
    proc = subprocess.Popen(
        ["strace", "-D", "-o", "/dev/null", "-e", "trace=bind",
         "-e", "inject=bind:delay_exit=1000000:when=1",
         AGENT_BIN, "--listen", f"unix:{sock}",
         "--listen", f"127.0.0.1:{port}", "--workspace", str(ws)],
        env={**os.environ, "SECRET_TOKEN": TOKEN}, stdout=log,
        stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 10
        while not sock.exists():
            assert time.time() < deadline, "the agent never bound its socket"
            time.sleep(0.005)
        link = sock_dir / "swap"
        link.symlink_to(victim)
        os.rename(link, sock)
        deadline = time.time() + 20
        while True:
            try:
                if requests.get(f"http://127.0.0.1:{port}/healthz", timeout=1,
                                headers={"Authorization": "Bearer " + TOKEN}).ok:
                    break
            except requests.ConnectionError:
                pass
            assert proc.poll() is None, "the agent exited"
            assert time.time() < deadline, "the agent never served"
            time.sleep(0.05)
        assert oct(victim.stat().st_mode & 0o7777) == oct(0o600)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


def test_agent_unix_socket_is_0666(tmp_path):
    """Whoever reaches the socket still needs the token: it is 0666
    whatever the umask the agent was started with."""
    sock = tmp_path / "agent.sock"
    ws = tmp_path / "ws"
    ws.mkdir()
    proc = subprocess.Popen(
        ["sh", "-c", 'umask 077; exec "$@"', "sh", AGENT_BIN,
         "--listen", f"unix:{sock}", "--workspace", str(ws)],
        env={**os.environ, "SECRET_TOKEN": TOKEN},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 10
        while True:
            s = socket.socket(socket.AF_UNIX)
            try:
                s.connect(str(sock))
                break
            except OSError:
                assert time.time() < deadline, "the agent never listened"
                time.sleep(0.05)
            finally:
                s.close()
        assert oct(sock.stat().st_mode & 0o777) == oct(0o666)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
