"""run_shell_command, auth, limits and confinement, against the real agent."""
import concurrent.futures
import json
import os
import socket
import time

import pytest
import requests

from conftest import result_texts
from test_hostile_process import alive


def test_healthz_needs_token(agent):
    assert agent.get("/healthz").text == "OK"
    assert agent.get("/fastapi/healthz").text == "OK"
    r = requests.get(agent.url + "/healthz")
    assert r.status_code == 403 and "detail" in r.json()
    r = requests.get(agent.url + "/healthz",
                     headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 403 and "detail" in r.json()


def test_session_headers_are_ignored(agent):
    """The SDK sends its session headers with every call (spec: accept and
    ignore them): the routes that keep state take them and keep one state
    whatever session they name, one workspace and one IPython kernel, and
    a command's environment has no trace of them."""
    def session(n):
        return {"x-agentscope-runtime-session-id": f"sess-runtime-{n}",
                "x-agentrun-session-id": f"sess-agentrun-{n}"}

    r = agent.post("/fastapi/tools/run_shell_command",
                   {"command": "echo one > mark; env"}, headers=session(1))
    assert r.status_code == 200, r.text
    assert "sess-" not in result_texts(r.json())["stdout"]
    r = agent.post("/tools/run_shell_command", {"command": "cat mark"},
                   headers=session(2))
    assert result_texts(r.json())["stdout"] == "one\n"
    r = agent.post("/fastapi/tools/run_ipython_cell", {"code": "x = 41"},
                   headers=session(1))
    assert r.status_code == 200, r.text
    r = agent.post("/tools/run_ipython_cell", {"code": "print(x + 1)"},
                   headers=session(2))
    assert result_texts(r.json())["stdout"] == "42\n"


def test_refuses_to_start_without_token(tmp_workspace):
    import subprocess
    from conftest import AGENT_BIN
    env = {k: v for k, v in os.environ.items() if k != "SECRET_TOKEN"}
    p = subprocess.run([AGENT_BIN, "--listen", "127.0.0.1:0", "--workspace",
                        tmp_workspace], env=env, capture_output=True, timeout=10)
    assert p.returncode != 0
    assert b"SECRET_TOKEN" in p.stderr


def test_insecure_mode_warns_loudly(start_agent):
    a = start_agent("--insecure-no-token", token=None)
    assert requests.get(a.url + "/healthz").text == "OK"
    assert "WITHOUT a token" in a.read_log()


def test_help_and_version():
    import subprocess
    from conftest import AGENT_BIN
    h = subprocess.run([AGENT_BIN, "--help"], capture_output=True, text=True)
    assert h.returncode == 0 and "--listen" in h.stdout and "--workspace" in h.stdout
    v = subprocess.run([AGENT_BIN, "--version"], capture_output=True, text=True)
    assert v.returncode == 0 and v.stdout.startswith("sandbox-agent ")


def test_shape_of_a_result(agent):
    res = agent.shell("echo hi; echo oops >&2; exit 3")
    assert set(res) == {"meta", "content", "isError"}
    assert res["meta"] is None and res["isError"] is True
    assert [c["description"] for c in res["content"]] == ["stdout", "stderr", "returncode"]
    for c in res["content"]:
        assert c["type"] == "text"
    assert result_texts(res) == {"stdout": "hi\n", "stderr": "oops\n", "returncode": "3"}


def test_no_stderr_item_when_quiet_and_runs_in_workspace(agent):
    res = agent.shell("pwd")
    assert res["isError"] is False
    assert [c["description"] for c in res["content"]] == ["stdout", "returncode"]
    assert result_texts(res)["stdout"].strip() == os.path.realpath(agent.workspace) \
        or result_texts(res)["stdout"].strip() == agent.workspace
    # empty stdout is still there
    res = agent.shell("true")
    assert result_texts(res)["stdout"] == ""


def test_uses_bash_and_stdin_is_devnull(agent):
    res = agent.shell("echo $BASH_VERSION | cut -c1; cat; echo done")
    out = result_texts(res)["stdout"]
    assert out.endswith("done\n") and out[0].isdigit()


def test_token_not_in_command_environment(agent):
    res = agent.shell("env")
    assert "test-token" not in result_texts(res)["stdout"]


def test_non_utf8_output_is_replaced(agent):
    res = agent.shell(r"printf 'a\xffb\xc3'")
    assert result_texts(res)["stdout"] == "a\ufffdb\ufffd"


def test_timeout_kills_group_and_keeps_output(agent):
    t0 = time.time()
    # An odd duration marks this test's sleeps among the machine's others.
    res = agent.shell("echo before; (sleep 61.737; echo child) & sleep 61.737; echo after",
                      timeout=1)
    assert time.time() - t0 < 10
    texts = result_texts(res)
    assert texts["stdout"] == "before\n"
    assert texts["returncode"] == "-9"
    assert "timed out" in texts["stderr"]
    # The background sleep of the group is gone too.
    ps = agent.shell("ps -eo args | grep -c '^sleep 61.737' || true")
    assert result_texts(ps)["stdout"].strip() == "0"


def test_output_cap_adds_note(start_agent):
    a = start_agent("--output-cap", "64K")
    res = a.shell("head -c 1000000 /dev/zero | tr '\\0' x; echo tail >&2")
    texts = result_texts(res)
    assert texts["stdout"].startswith("x" * 65536)
    assert "truncated" in texts["stdout"]
    assert len(texts["stdout"]) < 65536 + 200
    assert texts["stderr"] == "tail\n"
    assert texts["returncode"] == "0"


@pytest.mark.memory
def test_huge_output_does_not_grow_memory(agent):
    from conftest import rss_kib
    res = agent.shell("head -c 200000000 /dev/zero")
    assert "truncated" in result_texts(res)["stdout"]
    assert rss_kib(agent.proc.pid, "VmHWM") < 120 * 1024


def test_bad_input(agent):
    url = "/tools/run_shell_command"
    cases = [
        (b"{", 400), (b"[]", 400), (b'"x"', 400), (b"{}", 400),
        (b'{"command": 5}', 400), (b'{"command": ""}', 400),
        (b'{"command": "   "}', 400), (b'{"command": "true", "timeout": "x"}', 400),
        (b'{"command": "true", "timeout": -1}', 400),
        (b'{"command": "true", "stream": "yes"}', 400),
        (b'{"command": "a\\u0000b"}', 400),
    ]
    for body, status in cases:
        r = agent.post(url, data=body, headers={"Content-Type": "application/json"})
        assert r.status_code == status, (body, r.text)
        assert isinstance(r.json()["detail"], str)


def test_oversized_body_is_413(start_agent):
    a = start_agent("--max-body", "1K")
    r = a.post("/tools/run_shell_command", {"command": "echo " + "x" * 5000})
    assert r.status_code == 413 and "too large" in r.json()["detail"]
    # chunked, without a length up front
    def gen():
        yield b'{"command": "echo '
        for _ in range(10):
            yield b"x" * 500
        yield b'"}'
    r = a.post("/tools/run_shell_command", data=gen())
    assert r.status_code == 413
    assert a.get("/healthz").status_code == 200


def test_unknown_route_and_method(agent):
    r = agent.get("/nope")
    assert r.status_code == 404 and "detail" in r.json()
    r = agent.get("/tools/run_shell_command")
    assert r.status_code == 405 and "detail" in r.json()


def test_stream_events(agent):
    r = agent.post("/tools/run_shell_command",
                   {"command": "echo one; sleep 0.3; echo two >&2; exit 4",
                    "stream": True}, stream=True)
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("application/x-ndjson")
    events = [json.loads(line) for line in r.iter_lines() if line]
    assert events[0]["type"] == "start" and events[0]["pid"] > 0
    kinds = [(e["type"], e.get("data")) for e in events[1:-1] if e["type"] != "keepalive"]
    assert kinds == [("stdout", "one\n"), ("stderr", "two\n")]
    assert events[-1] == {"type": "end", "returncode": 4, "timed_out": False}


def test_stream_keepalive_and_timeout(agent):
    r = agent.post("/tools/run_shell_command",
                   {"command": "sleep 30", "stream": True, "timeout": 6},
                   stream=True)
    events = [json.loads(line) for line in r.iter_lines() if line]
    assert any(e["type"] == "keepalive" for e in events)
    assert events[-1]["type"] == "end" and events[-1]["timed_out"] is True


def _raw_post(port, body):
    s = socket.create_connection(("127.0.0.1", port))
    data = json.dumps(body).encode()
    s.sendall(b"POST /tools/run_shell_command HTTP/1.1\r\nHost: x\r\n"
              b"Authorization: Bearer test-token\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
    return s


@pytest.mark.parametrize("stream", [True, False])
def test_disconnect_kills_the_command(agent, tmp_workspace, stream):
    marker = os.path.join(tmp_workspace, "pid")
    s = _raw_post(agent.port, {"command": f"echo $$ > {marker}; sleep 1000 & echo $! >> {marker}; wait",
                               "stream": stream})
    deadline = time.time() + 5
    while time.time() < deadline and (not os.path.exists(marker)
                                      or len(open(marker).read().split()) < 2):
        time.sleep(0.05)
    pids = [int(p) for p in open(marker).read().split()]
    assert all(alive(p) for p in pids)
    s.close()
    deadline = time.time() + 5
    while time.time() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
    assert not any(alive(p) for p in pids)


def test_fifty_concurrent_commands_and_healthz(agent):
    def run(i):
        s = requests.Session()
        s.headers["Authorization"] = "Bearer test-token"
        r = s.post(agent.url + "/tools/run_shell_command",
                   json={"command": f"sleep 1; echo {i}"})
        return result_texts(r.json())["stdout"]

    with concurrent.futures.ThreadPoolExecutor(60) as ex:
        t0 = time.time()
        futs = [ex.submit(run, i) for i in range(50)]
        health = []
        while not all(f.done() for f in futs):
            h0 = time.time()
            r = agent.get("/healthz", timeout=5)
            health.append((r.status_code, time.time() - h0))
            time.sleep(0.05)
        outs = sorted(int(f.result()) for f in futs)
    assert outs == list(range(50))
    # They ran side by side, not one after another.
    assert time.time() - t0 < 15
    assert health and all(code == 200 for code, _ in health)


@pytest.mark.parametrize("cmd", [
    "unshare -U true",
    "unshare -m true",
    "mount -t tmpfs none /mnt",
    "python3 -c 'import os; os.unshare(0x10000000)'",
])
def test_commands_are_confined(agent, cmd):
    res = agent.shell(cmd + "; echo rc=$?")
    out = result_texts(res)["stdout"]
    assert "rc=0" not in out, res


def test_seccomp_off_for_debugging(start_agent):
    a = start_agent("--seccomp=off")
    res = a.shell("unshare -U true; echo rc=$?")
    assert "rc=0" in result_texts(res)["stdout"]


def test_sigterm_exits_cleanly(start_agent):
    a = start_agent()
    a.proc.send_signal(15)
    assert a.proc.wait(5) == 0


def test_run_as_user_gets_its_own_home(start_agent, tmp_workspace):
    """Commands run as the --run-as user see that user's HOME, USER and
    LOGNAME (from /etc/passwd), not root's."""
    if os.geteuid() != 0:
        pytest.fail("this test needs root, as the agent in a container has")
    a = start_agent("--run-as", "65534:65534", env={"HOME": "/root", "USER": "root"})
    out = result_texts(a.shell("id -u; echo $HOME $USER $LOGNAME"))["stdout"].split()
    assert out == ["65534", "/nonexistent", "nobody", "nobody"]
    # A uid with no passwd entry keeps the agent's HOME, with a warning.
    b = start_agent("--run-as", "54321:54321", env={"HOME": "/tmp"})
    assert result_texts(b.shell("echo $HOME"))["stdout"] == "/tmp\n"
    assert "not in /etc/passwd" in b.read_log()
