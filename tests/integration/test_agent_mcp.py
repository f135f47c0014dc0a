"""The agent's MCP client (/mcp/*), against the real MCP servers from the
npm registry in tests/node_modules: server-everything (stdio and streamable
HTTP) and server-filesystem (stdio)."""
import concurrent.futures
import json
import os
import signal
import subprocess
import time

import pytest
import requests

from conftest import ROOT, SYSTEM_PYTHON, free_port

NODE = "/usr/bin/node"
MODULES = os.path.join(ROOT, "tests", "node_modules", "@modelcontextprotocol")
EVERYTHING = os.path.join(MODULES, "server-everything", "dist", "index.js")
FILESYSTEM = os.path.join(MODULES, "server-filesystem", "dist", "index.js")
PEER = os.path.join(os.path.dirname(__file__), "helpers", "scripted_mcp_peer.py")


def everything(**extra):
    return {"command": NODE, "args": [EVERYTHING, "stdio"], **extra}


def filesystem(root):
    # By name: the agent looks the command up on PATH.
    return {"command": "node", "args": [FILESYSTEM, root]}


def add(agent, servers, overwrite=None):
    payload = {"server_configs": {"mcpServers": servers}}
    if overwrite is not None:
        payload["overwrite"] = overwrite
    return agent.post("/mcp/add_servers", payload)


def call(agent, tool, arguments=None, **extra):
    payload = {"tool_name": tool, **extra}
    if arguments is not None:
        payload["arguments"] = arguments
    return agent.post("/mcp/call_tool", payload)


def text_of(result):
    return "".join(c["text"] for c in result["content"] if c["type"] == "text")


def server_env(agent, tool="get-env"):
    r = call(agent, tool, {})
    assert r.status_code == 200, r.text
    return json.loads(text_of(r.json()))


def wait_for(predicate, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError("condition not met in time")


def server_pid(agent, name):
    """The pid the agent logged for the latest start of server name."""
    marker = f"MCP server '{name}' started as pid "
    lines = [l for l in agent.read_log().splitlines() if marker in l]
    assert lines, agent.read_log()
    return int(lines[-1].split(marker)[1].split()[0])


@pytest.fixture
def mcp_agent(agent):
    r = add(agent, {"everything": everything()})
    assert r.status_code == 200, r.text
    assert r.text == "OK"
    return agent


def test_list_tools_shape(mcp_agent):
    r = mcp_agent.get("/mcp/list_tools")
    assert r.status_code == 200
    tools = r.json()
    assert list(tools) == ["everything"]
    echo = tools["everything"]["echo"]
    assert echo == {
        "name": "echo",
        "json_schema": {
            "type": "function",
            "function": {
                "name": "echo",
                "description": "Echoes back the input string",
                "parameters": {
                    "type": "object",
                    "properties": {"message": {"type": "string",
                                               "description": "Message to echo"}},
                    "required": ["message"],
                },
            },
        },
    }
    params = tools["everything"]["get-sum"]["json_schema"]["function"]["parameters"]
    assert set(params["properties"]) == {"a", "b"} and sorted(params["required"]) == ["a", "b"]
    # A tool without required arguments still gets an empty list.
    env = tools["everything"]["get-env"]["json_schema"]["function"]["parameters"]
    assert env == {"type": "object", "properties": {}, "required": []}
    assert mcp_agent.get("/fastapi/mcp/list_tools").json() == tools


def test_call_tool_results(mcp_agent):
    r = call(mcp_agent, "echo", {"message": "héllo wörld"})
    assert r.status_code == 200
    assert r.json() == {"meta": None, "isError": False,
                        "content": [{"type": "text", "text": "Echo: héllo wörld"}]}
    r = call(mcp_agent, "get-sum", {"a": 2, "b": 40.5})
    assert r.status_code == 200
    assert text_of(r.json()) == "The sum of 2 and 40.5 is 42.5."
    # Content other than text comes through as the server sent it.
    r = call(mcp_agent, "get-tiny-image", {})
    kinds = [c["type"] for c in r.json()["content"]]
    assert "image" in kinds
    image = next(c for c in r.json()["content"] if c["type"] == "image")
    assert image["mimeType"] == "image/png" and len(image["data"]) > 100


def test_filesystem_server_reads_the_workspace(agent, tmp_workspace):
    r = add(agent, {"fs": filesystem(tmp_workspace)})
    assert r.status_code == 200, r.text
    tools = agent.get("/mcp/list_tools").json()["fs"]
    for name in ("read_file", "read_text_file", "write_file", "list_directory",
                 "directory_tree", "search_files", "get_file_info"):
        assert tools[name]["json_schema"]["function"]["name"] == name
    assert tools["read_text_file"]["json_schema"]["function"]["parameters"]["required"] == ["path"]
    agent.shell("mkdir -p notes && printf 'line one\\nline two\\n' > notes/a.txt")
    path = os.path.join(tmp_workspace, "notes", "a.txt")
    r = call(agent, "read_text_file", {"path": path})
    assert r.status_code == 200
    assert r.json()["isError"] is False
    assert text_of(r.json()) == "line one\nline two\n"
    r = call(agent, "write_file", {"path": os.path.join(tmp_workspace, "b.txt"),
                                   "content": "from mcp"})
    assert r.json()["isError"] is False
    with open(os.path.join(tmp_workspace, "b.txt")) as f:
        assert f.read() == "from mcp"
    # Outside the allowed directory: the server's own refusal, passed on.
    r = call(agent, "read_text_file", {"path": "/etc/hostname"})
    assert r.status_code == 200 and r.json()["isError"] is True
    assert "denied" in text_of(r.json()).lower()


def test_two_servers_listed_and_routed(agent, tmp_workspace):
    r = add(agent, {"everything": everything(), "fs": filesystem(tmp_workspace)})
    assert r.status_code == 200, r.text
    tools = agent.get("/mcp/list_tools").json()
    assert set(tools) == {"everything", "fs"}
    assert "echo" in tools["everything"] and "read_file" in tools["fs"]
    assert "echo" not in tools["fs"]
    assert text_of(call(agent, "echo", {"message": "x"}).json()) == "Echo: x"
    r = call(agent, "list_allowed_directories", {})
    assert os.path.realpath(tmp_workspace) in text_of(r.json())


def test_existing_name_is_skipped_unless_overwrite(agent):
    assert add(agent, {"ev": everything(env={"MARK": "one"})}).status_code == 200
    assert server_env(agent)["MARK"] == "one"
    r = add(agent, {"ev": everything(env={"MARK": "two"})})
    assert r.status_code == 200 and r.text == "OK"
    assert server_env(agent)["MARK"] == "one"
    r = add(agent, {"ev": everything(env={"MARK": "two"})}, overwrite=False)
    assert server_env(agent)["MARK"] == "one"
    first = server_pid(agent, "ev")
    r = add(agent, {"ev": everything(env={"MARK": "three"})}, overwrite=True)
    assert r.status_code == 200 and r.text == "OK"
    assert server_env(agent)["MARK"] == "three"
    assert list(agent.get("/mcp/list_tools").json()) == ["ev"]
    # The replaced server is gone, not left running.
    wait_for(lambda: not os.path.exists(f"/proc/{first}"))


def test_server_environment(agent):
    r = add(agent, {"ev": everything(env={"MARK": "x", "HOME": "/nowhere"})})
    assert r.status_code == 200
    env = server_env(agent)
    assert env["MARK"] == "x" and env["HOME"] == "/nowhere"
    assert "PATH" in env                    # the agent's own, merged under
    assert "SECRET_TOKEN" not in env        # never handed to servers
    # It runs in the workspace.
    assert os.path.realpath(env["PWD"]) == os.path.realpath(agent.workspace)


def test_failing_servers_are_named_and_the_rest_kept(agent, tmp_workspace):
    r = add(agent, {
        "good": everything(),
        "missing": {"command": "no-such-mcp-server-here", "args": []},
        "crashes": {"command": NODE, "args": ["-e", "console.error('bad config'); process.exit(3)"]},
    })
    assert r.status_code == 500
    detail = r.json()["detail"]
    assert "'missing'" in detail and "'crashes'" in detail and "'good'" not in detail.split("(")[0]
    assert "no-such-mcp-server-here" in detail and "not found" in detail
    assert "status 3" in detail and "bad config" in detail
    assert agent.get("/healthz").text == "OK"
    assert list(agent.get("/mcp/list_tools").json()) == ["good"]
    assert text_of(call(agent, "echo", {"message": "still"}).json()) == "Echo: still"
    # A program that is not an MCP server at all: it never answers.
    r = add(agent, {"silent": {"command": "sleep", "args": ["600"], "timeout": 1}})
    assert r.status_code == 500
    assert "'silent'" in r.json()["detail"] and "initialize" in r.json()["detail"]
    # An absolute path that does not exist.
    r = add(agent, {"nopath": {"command": "/nonexistent/server"}})
    assert r.status_code == 500 and "'nopath'" in r.json()["detail"]
    assert agent.shell("echo alive")["content"][0]["text"] == "alive\n"


@pytest.mark.parametrize("payload,words", [
    ({}, "server_configs"),
    ({"server_configs": {}}, "mcpServers"),
    ({"server_configs": {"mcpServers": []}}, "mcpServers"),
    ({"server_configs": {"mcpServers": {"x": 5}}}, "must be an object"),
    ({"server_configs": {"mcpServers": {"x": {}}}}, "command"),
    ({"server_configs": {"mcpServers": {"x": {"command": 7}}}}, "command"),
    ({"server_configs": {"mcpServers": {"x": {"command": "node", "args": "a"}}}}, "args"),
    ({"server_configs": {"mcpServers": {"x": {"command": "node", "args": [1]}}}}, "args"),
    ({"server_configs": {"mcpServers": {"x": {"command": "node", "env": {"A": 1}}}}}, "env"),
    ({"server_configs": {"mcpServers": {"": {"command": "node"}}}}, "empty"),
    ({"server_configs": {"mcpServers": {"x": {"url": "http://127.0.0.1:1/mcp", "type": "carrier-pigeon"}}}}, "type"),
    ({"server_configs": {"mcpServers": {"x": {"command": "node"}}}, "overwrite": "yes"}, "overwrite"),
])
def test_add_servers_bad_input(agent, payload, words):
    r = agent.post("/mcp/add_servers", payload)
    assert r.status_code == 400, r.text
    assert words in r.json()["detail"]
    # Nothing was started.
    assert agent.get("/mcp/list_tools").json() == {}


@pytest.mark.parametrize("payload,status,words", [
    ({}, 400, "tool_name"),
    ({"tool_name": ""}, 400, "tool_name"),
    ({"tool_name": 3}, 400, "tool_name"),
    ({"tool_name": "echo", "arguments": [1]}, 400, "arguments"),
    ({"tool_name": "echo", "arguments": {"message": "x"}, "timeout": -1}, 400, "timeout"),
    ({"tool_name": "no-such-tool", "arguments": {}}, 404, "no-such-tool"),
])
def test_call_tool_bad_input(mcp_agent, payload, status, words):
    r = mcp_agent.post("/mcp/call_tool", payload)
    assert r.status_code == status, r.text
    assert words in r.json()["detail"]


def test_wrong_arguments_get_the_servers_answer(mcp_agent):
    r = call(mcp_agent, "get-sum", {"a": 1, "b": "two"})
    assert r.status_code == 200
    res = r.json()
    assert res["isError"] is True
    assert "Invalid arguments for tool get-sum" in text_of(res)
    r = call(mcp_agent, "echo", {})
    assert r.json()["isError"] is True and "message" in text_of(r.json())
    # arguments absent counts as {}
    r = call(mcp_agent, "echo")
    assert r.json()["isError"] is True
    assert text_of(call(mcp_agent, "echo", {"message": "ok"}).json()) == "Echo: ok"


def test_concurrent_calls(agent, tmp_workspace):
    assert add(agent, {"a": everything(), "b": everything(),
                       "fs": filesystem(tmp_workspace)}).status_code == 200
    with concurrent.futures.ThreadPoolExecutor(24) as ex:
        slow = ex.submit(call, agent, "trigger-long-running-operation",
                         {"duration": 4, "steps": 2})
        # Everything else runs while the slow call holds its server.
        echoes = [ex.submit(call, agent, "echo", {"message": f"m{i}"}) for i in range(40)]
        sums = [ex.submit(call, agent, "get-sum", {"a": i, "b": 1}) for i in range(20)]
        dirs = [ex.submit(call, agent, "list_allowed_directories", {}) for _ in range(5)]
        health = [ex.submit(agent.get, "/healthz") for _ in range(10)]
        shell = ex.submit(agent.shell, "echo shell")
        for i, f in enumerate(echoes):
            assert text_of(f.result().json()) == f"Echo: m{i}"
        for i, f in enumerate(sums):
            assert text_of(f.result().json()) == f"The sum of {i} and 1 is {i + 1}."
        for f in dirs:
            assert f.result().json()["isError"] is False
        assert all(h.result().text == "OK" for h in health)
        assert shell.result()["content"][0]["text"] == "shell\n"
        assert not slow.done()
        assert "completed" in text_of(slow.result().json())


def test_call_timeout_is_504_and_the_server_lives_on(mcp_agent):
    r = call(mcp_agent, "trigger-long-running-operation",
             {"duration": 30, "steps": 30}, timeout=1)
    assert r.status_code == 504
    assert "tools/call" in r.json()["detail"] and "1 seconds" in r.json()["detail"]
    assert text_of(call(mcp_agent, "echo", {"message": "after"}).json()) == "Echo: after"


def test_notifications_in_between_are_ignored(start_agent):
    a = start_agent("--log-level", "debug")
    assert add(a, {"everything": everything()}).status_code == 200
    r = call(a, "toggle-simulated-logging", {})
    assert r.status_code == 200 and r.json()["isError"] is False
    assert text_of(call(a, "echo", {"message": "between"}).json()) == "Echo: between"
    wait_for(lambda: "MCP server 'everything' logs:" in a.read_log())
    assert text_of(call(a, "echo", {"message": "again"}).json()) == "Echo: again"


def test_killed_server_is_reported_and_overwrite_restarts_it(mcp_agent):
    pid = server_pid(mcp_agent, "everything")
    os.kill(pid, signal.SIGKILL)
    # A Response is falsy when it is an error, so wrap it.
    r = wait_for(lambda: (lambda r: [r] if r.status_code != 200 else None)(
        call(mcp_agent, "echo", {"message": "x"})))[0]
    assert r.status_code == 502
    detail = r.json()["detail"]
    assert "'everything'" in detail and "not running" in detail and "signal 9" in detail
    # It stays listed (and failing) until replaced; skip does not restart it.
    assert "echo" in mcp_agent.get("/mcp/list_tools").json()["everything"]
    assert add(mcp_agent, {"everything": everything()}).status_code == 200
    assert call(mcp_agent, "echo", {"message": "x"}).status_code == 502
    assert add(mcp_agent, {"everything": everything()}, overwrite=True).status_code == 200
    assert text_of(call(mcp_agent, "echo", {"message": "back"}).json()) == "Echo: back"
    assert server_pid(mcp_agent, "everything") != pid


def test_pending_call_fails_when_the_server_dies(mcp_agent):
    pid = server_pid(mcp_agent, "everything")
    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        slow = ex.submit(call, mcp_agent, "trigger-long-running-operation",
                         {"duration": 60, "steps": 60})
        # Most likely the call is under way by then; if not, it meets a
        # dead server instead, and the answer is the same.
        time.sleep(0.5)
        os.kill(pid, signal.SIGKILL)
        r = slow.result(timeout=30)
    assert r.status_code == 502 and "signal 9" in r.json()["detail"]


def test_server_stderr_goes_to_the_agent_log(mcp_agent):
    wait_for(lambda: "MCP server 'everything' stderr: Starting default (STDIO) server..."
             in mcp_agent.read_log())


def test_mcp_config_at_start(start_agent, tmp_workspace):
    cfg = os.path.join(os.path.dirname(tmp_workspace), "mcp.json")
    with open(cfg, "w") as f:
        json.dump({"mcpServers": {
            "broken": 5,
            "everything": everything(),
            "missing": {"command": "no-such-mcp-server-here"},
            "fs": filesystem(tmp_workspace),
        }}, f)
    a = start_agent("--mcp-config", cfg)
    # The agent serves at once; the servers come up in the background,
    # and the MCP routes wait for them rather than answer without them.
    assert a.get("/healthz").text == "OK"
    assert text_of(call(a, "echo", {"message": "cfg"}).json()) == "Echo: cfg"
    assert list(a.get("/mcp/list_tools").json()) == ["everything", "fs"]
    log = a.read_log()
    assert "'broken'" in log and "must be an object" in log
    assert "no-such-mcp-server-here" in log


def test_mcp_routes_wait_for_the_config_servers_from_the_start(
        start_agent, tmp_workspace):
    cfg = os.path.join(os.path.dirname(tmp_workspace), "mcp.json")
    with open(cfg, "w") as f:
        json.dump({"mcpServers": {"everything": everything()}}, f)
    a = start_agent("--mcp-config", cfg)
    # Several at once, one of them given up by its client while waiting.
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        lists = [pool.submit(a.get, "/mcp/list_tools") for _ in range(2)]
        echo = pool.submit(call, a, "echo", {"message": "early"})
        try:
            a.get("/mcp/list_tools", timeout=(5, 0.001))
        except requests.exceptions.ReadTimeout:
            pass
        assert all("echo" in f.result(timeout=60).json()["everything"]
                   for f in lists)
        assert text_of(echo.result(timeout=60).json()) == "Echo: early"
    assert a.get("/healthz").text == "OK"


def test_unreadable_mcp_config_is_logged(start_agent, tmp_workspace):
    cfg = os.path.join(os.path.dirname(tmp_workspace), "mcp.json")
    with open(cfg, "w") as f:
        f.write("{not json")
    a = start_agent("--mcp-config", cfg)
    assert a.get("/healthz").text == "OK"
    assert "--mcp-config" in a.read_log()
    assert a.get("/mcp/list_tools").json() == {}


def test_servers_are_stopped_with_the_agent(start_agent):
    a = start_agent()
    assert add(a, {"everything": everything()}).status_code == 200
    pid = server_pid(a, "everything")
    assert os.path.exists(f"/proc/{pid}")
    a.stop()
    assert a.proc.returncode == 0
    wait_for(lambda: not os.path.exists(f"/proc/{pid}") or
             open(f"/proc/{pid}/stat").read().split()[2] == "Z")


def test_unknown_tool_group_is_a_start_error(tmp_workspace):
    from conftest import AGENT_BIN
    env = dict(os.environ, SECRET_TOKEN="t")
    p = subprocess.run([AGENT_BIN, "--listen", "127.0.0.1:0", "--workspace",
                        tmp_workspace, "--tools", "no-such-group"],
                       env=env, capture_output=True, text=True, timeout=10)
    assert p.returncode == 2
    assert "unknown tool group 'no-such-group'" in p.stderr


# ---- HTTP transports ---------------------------------------------------

class HttpServer:
    """server-everything in one of its HTTP modes on a loopback port."""

    def __init__(self, mode, tmpdir):
        self.port = free_port()
        self.log_path = os.path.join(tmpdir, f"everything-{mode}.log")
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([NODE, EVERYTHING, mode],
                                     env=dict(os.environ, PORT=str(self.port)),
                                     stdout=self.log, stderr=subprocess.STDOUT)
        wait_for(lambda: f"{self.port}" in self.read_log() or self.proc.poll() is not None)
        assert self.proc.poll() is None, self.read_log()

    def read_log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@pytest.fixture
def http_server(tmp_path):
    started = []

    def start(mode):
        s = HttpServer(mode, str(tmp_path))
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


@pytest.mark.parametrize("kind", ["streamable_http", "streamableHttp"])
def test_streamable_http_server(agent, http_server, kind):
    srv = http_server("streamableHttp")
    url = f"http://127.0.0.1:{srv.port}/mcp"
    r = add(agent, {"remote": {"type": kind, "url": url}})
    assert r.status_code == 200, r.text
    tools = agent.get("/mcp/list_tools").json()
    assert tools["remote"]["echo"]["json_schema"]["function"]["parameters"]["required"] == ["message"]
    r = call(agent, "echo", {"message": "over http"})
    assert r.json() == {"meta": None, "isError": False,
                        "content": [{"type": "text", "text": "Echo: over http"}]}
    assert text_of(call(agent, "get-sum", {"a": 20, "b": 22}).json()) == \
        "The sum of 20 and 22 is 42."
    r = call(agent, "get-sum", {"a": "x", "b": 1})
    assert r.status_code == 200 and r.json()["isError"] is True
    # One session, kept across calls (the server logs each one it opens).
    assert srv.read_log().count("Session initialized with ID") == 1
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        fs = [ex.submit(call, agent, "echo", {"message": f"c{i}"}) for i in range(24)]
        for i, f in enumerate(fs):
            assert text_of(f.result().json()) == f"Echo: c{i}"
    r = call(agent, "trigger-long-running-operation", {"duration": 20, "steps": 20},
             timeout=1)
    assert r.status_code == 504
    # Replacing it ends its session on the server.
    assert add(agent, {"remote": {"type": kind, "url": url}}, overwrite=True).status_code == 200
    wait_for(lambda: "session termination request" in srv.read_log())
    assert text_of(call(agent, "echo", {"message": "again"}).json()) == "Echo: again"


def test_legacy_sse_server(agent, http_server):
    srv = http_server("sse")
    r = add(agent, {"old": {"type": "sse", "url": f"http://localhost:{srv.port}/sse"}})
    assert r.status_code == 200, r.text
    assert "echo" in agent.get("/mcp/list_tools").json()["old"]
    assert text_of(call(agent, "echo", {"message": "sse"}).json()) == "Echo: sse"
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        fs = [ex.submit(call, agent, "get-sum", {"a": i, "b": i}) for i in range(16)]
        for i, f in enumerate(fs):
            assert text_of(f.result().json()) == f"The sum of {i} and {i} is {2 * i}."
    srv.stop()
    r = wait_for(lambda: (lambda r: [r] if r.status_code != 200 else None)(
        call(agent, "echo", {"message": "x"})))[0]
    assert r.status_code == 502 and "'old'" in r.json()["detail"]


@pytest.mark.parametrize("mode,path", [("streamableHttp", "/mcp"), ("sse", "/sse")])
def test_remote_server_without_type(agent, http_server, mode, path):
    # No "type": streamable HTTP first, HTTP+SSE when the server refuses it.
    srv = http_server(mode)
    url = f"http://127.0.0.1:{srv.port}{path}"
    r = add(agent, {"remote": {"url": url}, "nulltype": {"type": None, "url": url}})
    assert r.status_code == 200, r.text
    tools = agent.get("/mcp/list_tools").json()
    assert "echo" in tools["remote"] and "echo" in tools["nulltype"]
    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        fs = [ex.submit(call, agent, "get-sum", {"a": i, "b": 1}) for i in range(8)]
        for i, f in enumerate(fs):
            assert text_of(f.result().json()) == f"The sum of {i} and 1 is {i + 1}."
    if mode == "streamableHttp":
        # It spoke streamable HTTP at once: one session per server.
        assert srv.read_log().count("Session initialized with ID") == 2
        assert "trying HTTP+SSE" not in agent.read_log()
    else:
        assert "answered HTTP 404 to streamable HTTP: trying HTTP+SSE" in agent.read_log()
    # The legacy stream ending, or the session going, is noticed as before.
    srv.stop()
    r = wait_for(lambda: (lambda r: [r] if r.status_code != 200 else None)(
        call(agent, "echo", {"message": "x"})))[0]
    assert r.status_code == 502 and "'remote'" in r.json()["detail"]


def test_explicit_type_is_not_second_guessed(agent, http_server):
    srv = http_server("sse")
    r = add(agent, {"typed": {"type": "streamable_http",
                              "url": f"http://127.0.0.1:{srv.port}/sse"}})
    assert r.status_code == 500 and "HTTP 404" in r.json()["detail"], r.text
    assert "trying HTTP+SSE" not in agent.read_log()


def test_remote_server_without_type_that_speaks_neither(agent, http_server):
    srv = http_server("streamableHttp")
    r = add(agent, {"lost": {"url": f"http://127.0.0.1:{srv.port}/nothing"}})
    assert r.status_code == 500, r.text
    detail = r.json()["detail"]
    assert "'lost'" in detail and "HTTP 404 to a streamable HTTP POST" in detail
    assert "GET http://127.0.0.1:%d/nothing answered HTTP 404" % srv.port in detail
    r = add(agent, {"away": {"url": f"http://127.0.0.1:{free_port()}/mcp"}})
    assert r.status_code == 500 and "connect" in r.json()["detail"]
    assert agent.get("/healthz").text == "OK"


def test_http_server_that_is_not_there(agent):
    r = add(agent, {"away": {"type": "streamable_http",
                             "url": f"http://127.0.0.1:{free_port()}/mcp"}})
    assert r.status_code == 500
    assert "'away'" in r.json()["detail"] and "connect" in r.json()["detail"]
    r = add(agent, {"away": {"type": "sse", "url": f"http://127.0.0.1:{free_port()}/sse"}})
    assert r.status_code == 500 and "'away'" in r.json()["detail"]
    assert agent.get("/healthz").text == "OK"


def test_http_server_that_is_not_mcp(agent):
    # The agent itself speaks HTTP but not MCP (and wants a token).
    r = add(agent, {"notmcp": {"type": "streamable_http", "url": agent.url + "/healthz"}})
    assert r.status_code == 500
    assert "'notmcp'" in r.json()["detail"] and "HTTP 40" in r.json()["detail"]


@pytest.mark.parametrize("url,words", [
    ("https://127.0.0.1:1/mcp", "https"),
    ("ftp://127.0.0.1/mcp", "http://"),
    ("http://example.com/mcp", "IP address"),
    ("http://127.0.0.1:99999/mcp", "port"),
    ("http://user:pw@127.0.0.1:1/mcp", "headers"),
    ("http://127.0.0.1:1/a b", "percent-encoded"),
    ("http:///mcp", "http://"),
])
def test_http_bad_urls(agent, url, words):
    r = add(agent, {"x": {"type": "streamable_http", "url": url}})
    assert r.status_code == 400, r.text
    assert words in r.json()["detail"] and "'x'" in r.json()["detail"]


def test_http_bad_headers(agent):
    for headers in ([1], {"A": 1}, {"Bad:Name": "v"}, {"A": "line\nbreak"}):
        r = add(agent, {"x": {"type": "streamable_http", "url": "http://127.0.0.1:1/mcp",
                              "headers": headers}})
        assert r.status_code == 400 and "headers" in r.json()["detail"], r.text


# ---- protocol corners the npm servers never show (a scripted peer) -------

def test_protocol_corners_with_a_scripted_peer(agent):
    r = add(agent, {"peer": {"command": SYSTEM_PYTHON, "args": [PEER]}})
    assert r.status_code == 200, r.text
    # Its version (2025-03-26) was not the one offered, and is accepted.
    assert "protocol 2025-03-26" in agent.read_log()
    # Two pages of tools/list, followed by nextCursor.
    assert sorted(agent.get("/mcp/list_tools").json()["peer"]) == \
        ["add_more", "fast", "flood", "hang", "seen", "slow"]
    # Its own requests were answered: ping with {}, the rest refused.
    seen = json.loads(text_of(call(agent, "seen", {}).json()))
    assert {"jsonrpc": "2.0", "id": "ping-1", "result": {}} in seen
    refusal = next(m for m in seen if m.get("id") == "ask-1")
    assert refusal["error"]["code"] == -32601
    assert any(m.get("method") == "notifications/initialized" for m in seen)

    # A slow call is answered after later fast ones (out of order, the
    # fast ones in a batch with a notification).
    with concurrent.futures.ThreadPoolExecutor(2) as ex:
        slow = ex.submit(call, agent, "slow", {"n": 1})
        k = 0
        while not slow.done():
            k += 1
            assert text_of(call(agent, "fast", {"n": k}).json()) == f"fast {k}"
        assert text_of(slow.result().json()) == "slow 1"

    # The list changes while it runs.
    assert text_of(call(agent, "add_more", {}).json()) == "added"
    assert text_of(call(agent, "late", {}).json()) == "late one"
    assert "late" in agent.get("/mcp/list_tools").json()["peer"]

    # A call that never ends: 504, and the server is told it was cancelled.
    r = call(agent, "hang", {}, timeout=0.5)
    assert r.status_code == 504
    seen = json.loads(text_of(call(agent, "seen", {}).json()))
    cancels = [m for m in seen if m.get("method") == "notifications/cancelled"]
    assert len(cancels) == 1 and isinstance(cancels[0]["params"]["requestId"], int)

    # A line past the 64 MiB cap: the server is dropped, the agent lives.
    r = call(agent, "flood", {})
    assert r.status_code == 502 and "longer than" in r.json()["detail"]
    assert agent.get("/healthz").text == "OK"
    r = call(agent, "fast", {"n": 0})
    assert r.status_code == 502 and "not running" in r.json()["detail"]


# ---- native tool groups next to MCP servers ------------------------------

def test_native_group_comes_first(start_agent, tmp_workspace):
    a = start_agent("--tools", " filesystem,filesystem ")
    other = os.path.join(os.path.dirname(tmp_workspace), "other")
    os.mkdir(other)
    with open(os.path.join(other, "o.txt"), "w") as f:
        f.write("outside the workspace")
    with open(os.path.join(tmp_workspace, "w.txt"), "w") as f:
        f.write("inside")
    # The MCP filesystem server may read "other"; the native group may not.
    r = add(a, {"everything": everything(), "fs": filesystem(other)})
    assert r.status_code == 200, r.text
    tools = a.get("/mcp/list_tools").json()
    assert list(tools) == ["filesystem", "everything", "fs"]
    assert tools["filesystem"]["read_text_file"]["json_schema"]["function"]["name"] == \
        "read_text_file"
    assert set(tools["filesystem"]) == set(tools["fs"])
    # Native first: the name both offer reaches the native tool.
    r = call(a, "read_text_file", {"path": "w.txt"})
    assert r.status_code == 200
    res = r.json()
    assert res["meta"] is None and res["isError"] is False
    assert res["content"] == [{"type": "text", "text": "inside"}]
    r = call(a, "read_text_file", {"path": os.path.join(other, "o.txt")})
    assert r.status_code == 200 and r.json()["isError"] is True
    assert "outside the workspace" not in text_of(r.json())
    # Names only a server offers still reach it.
    assert text_of(call(a, "echo", {"message": "m"}).json()) == "Echo: m"
    # A group's name is not free for a server.
    r = add(a, {"filesystem": everything()})
    assert r.status_code == 409 and "native tool group" in r.json()["detail"]
    # --tools filesystem without servers: only the group.
    b = start_agent("--tools", "filesystem", workspace=tmp_workspace)
    assert list(b.get("/mcp/list_tools").json()) == ["filesystem"]
