"""sandboxd's own /mcp (streamable HTTP) driven by the official MCP SDK
client from npm (StreamableHTTPClientTransport, sandboxd_mcp_client.mjs),
and by plain HTTP for what the SDK never sends: one sandbox per MCP
session, released with DELETE, sessions required and checked, the bearer
token as on every route, and JSON-RPC errors for bad messages.
"""
import concurrent.futures
import json
import os
import subprocess
import time

import requests

from sandboxd_fixtures import (base_tag, filesystem_tag,  # noqa: F401
                               minimal_tag, start_sandboxd, wait_until)

NODE = "/usr/bin/node"
CLIENT = os.path.join(os.path.dirname(__file__), "helpers", "sandboxd_mcp_client.mjs")
ACCEPT = "application/json, text/event-stream"


def run_client(url, token, steps, timeout=300):
    """The outcome of each step, in order (initialize first)."""
    p = subprocess.run([NODE, CLIENT, url, token or "", json.dumps(steps)],
                       capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"client failed: {p.stderr}\n{p.stdout}"
    lines = [json.loads(line) for line in p.stdout.splitlines()
             if line.strip()]
    if "error" not in lines[0]:
        assert lines[-1] == {"op": "closed"}, p.stdout
        lines = lines[:-1]
    return lines


def texts(result):
    return [c["text"] for c in result["content"] if c["type"] == "text"]


def post(s, body, session=None, token="tok", raw=False, **kw):
    headers = {"Accept": ACCEPT, "Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if session:
        headers["Mcp-Session-Id"] = session
    data = body if raw else json.dumps(body)
    return requests.post(s.url + "/mcp", data=data, headers=headers,
                         timeout=120, **kw)


def initialize(s, query="", headers=None):
    r = requests.post(
        s.url + "/mcp" + query, timeout=120,
        headers={"Accept": ACCEPT, "Authorization": "Bearer tok",
                 **(headers or {})},
        json={"jsonrpc": "2.0", "id": 0, "method": "initialize",
              "params": {"protocolVersion": "2025-03-26", "capabilities": {},
                         "clientInfo": {"name": "t", "version": "1"}}})
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"].startswith("application/json")
    return r.headers["Mcp-Session-Id"], r.json()


def test_tools_listed_and_called_then_deleted(start_sandboxd):
    """initialize gives a session, tools/list the sandbox's tools under
    their own names, a shell command runs, and DELETE /mcp releases the
    sandbox."""
    s = start_sandboxd(token="tok")
    steps = [{"op": "ping"}, {"op": "list"},
             {"op": "call", "name": "run_shell_command",
              "arguments": {"command": "echo hi; echo oops >&2"}},
             {"op": "terminate"}]
    init, ping, listed, called, ended = run_client(s.url + "/mcp", "tok",
                                                   steps)
    assert init["version"] == {"name": "sandboxd", "version": "0.1.0"}
    assert init["session"], init
    assert "'minimal'" in init["instructions"]
    assert ping["result"] == {}
    tools = {t["name"]: t for t in listed["result"]["tools"]}
    assert {"run_shell_command", "run_ipython_cell"} <= set(tools), tools
    schema = tools["run_shell_command"]["inputSchema"]
    assert schema["required"] == ["command"], schema
    result = called["result"]
    assert texts(result) == ["hi\n", "oops\n", "0"], result
    assert result["isError"] is True  # stderr non-empty, as the reference
    assert "error" not in ended, ended
    # DELETE answered once the container was gone.
    assert not s.containers()


def test_ipython_state_per_session(start_sandboxd, base_tag):
    """?type= picks the type; a session keeps its IPython state, another
    session has a sandbox (and a kernel) of its own."""
    s = start_sandboxd(tag=base_tag, token="tok")
    url = s.url + "/mcp?type=base"
    steps = [{"op": "call", "name": "run_ipython_cell",
              "arguments": {"code": "x = 41"}},
             {"op": "call", "name": "run_ipython_cell",
              "arguments": {"code": "print(x + 1)"}},
             {"op": "terminate"}]
    init, first, second, _ = run_client(url, "tok", steps)
    assert "'base'" in init["instructions"]
    assert first["result"]["isError"] is False, first
    assert texts(second["result"])[0] == "42\n", second
    steps = [{"op": "call", "name": "run_ipython_cell",
              "arguments": {"code": "print(x)"}}, {"op": "terminate"}]
    _, other, _ = run_client(url, "tok", steps)
    assert other["result"]["isError"] is True
    assert "NameError" in texts(other["result"])[1]
    assert not s.containers()


def test_filesystem_type(start_sandboxd, filesystem_tag):
    """X-Sandbox-Type picks the filesystem type: its MCP tools under the
    SDK's names write and read a file."""
    s = start_sandboxd(tag=filesystem_tag, token="tok")
    sid, init = initialize(s, headers={"X-Sandbox-Type": "filesystem"})
    assert "'filesystem'" in init["result"]["instructions"]
    listed = post(s, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                  session=sid).json()["result"]
    names = {t["name"] for t in listed["tools"]}
    assert {"read_file", "write_file", "edit_file", "list_directory",
            "directory_tree", "search_files", "run_shell_command"} <= names
    steps = [("write_file", {"path": "/workspace/a.md", "content": "a\n"}),
             ("read_file", {"path": "/workspace/a.md"})]
    results = [post(s, {"jsonrpc": "2.0", "id": i, "method": "tools/call",
                        "params": {"name": n, "arguments": a}},
                    session=sid).json()["result"]
               for i, (n, a) in enumerate(steps, 2)]
    assert results[0]["isError"] is False, results
    assert texts(results[1]) == ["a\n"], results
    requests.delete(s.url + "/mcp", timeout=120,
                    headers={"Authorization": "Bearer tok",
                             "Mcp-Session-Id": sid})
    assert not s.containers()


def test_sessions_required_and_checked(start_sandboxd):
    s = start_sandboxd(token="tok")
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    r = post(s, ping)
    assert r.status_code == 400, r.text
    assert "Mcp-Session-Id" in r.json()["error"]["message"]
    r = post(s, ping, session="0" * 32)
    assert r.status_code == 404, r.text
    sid, init = initialize(s)
    assert init["result"]["protocolVersion"] == "2025-03-26"
    r = post(s, ping, session=sid)
    assert r.status_code == 200 and r.json()["result"] == {}, r.text
    # A notification is accepted with nothing to answer.
    r = post(s, {"jsonrpc": "2.0", "method": "notifications/initialized"},
             session=sid)
    assert r.status_code == 202, r.text
    # No server-to-client stream.
    r = requests.get(s.url + "/mcp", timeout=60,
                     headers={"Authorization": "Bearer tok",
                              "Accept": "text/event-stream",
                              "Mcp-Session-Id": sid})
    assert r.status_code == 405, r.text
    r = requests.delete(s.url + "/mcp", timeout=60,
                        headers={"Authorization": "Bearer tok",
                                 "Mcp-Session-Id": sid})
    assert r.status_code == 204, r.text
    # Ended: unknown from now on.
    assert post(s, ping, session=sid).status_code == 404
    r = requests.delete(s.url + "/mcp", timeout=60,
                        headers={"Authorization": "Bearer tok",
                                 "Mcp-Session-Id": sid})
    assert r.status_code == 404, r.text
    # A session left open, its sandbox made: sandboxd's shutdown ends it
    # cleanly (the fixture checks the exit status, under ASan too).
    left, _ = initialize(s)
    r = post(s, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
             session=left)
    assert r.status_code == 200 and r.json()["result"]["tools"], r.text
    assert len(s.containers()) == 1


def test_sessions_without_a_sandbox_lock_no_one_out(start_sandboxd):
    """One client opens sessions and never uses them, more than the 256
    without a sandbox that are kept (HEARTBEAT_TIMEOUT 0: nothing else
    ends them): each new one ends the least recently used of those, whose
    client then gets 404; a session with a sandbox is never taken, and
    another client (the SDK) always gets in and works."""
    s = start_sandboxd(token="tok", env={"HEARTBEAT_TIMEOUT": "0"})
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    echo = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "run_shell_command",
                       "arguments": {"command": "echo kept"}}}
    kept, _ = initialize(s)
    r = post(s, echo, session=kept)
    assert r.status_code == 200 and texts(r.json()["result"]) == \
        ["kept\n", "0"], r.text
    flood = [initialize(s)[0] for _ in range(300)]
    assert [post(s, ping, session=sid).status_code
            for sid in (flood[0], flood[43], flood[44], flood[-1])] == \
        [404, 404, 200, 200]
    init, listed, called = run_client(s.url + "/mcp", "tok", [
        {"op": "list"}, {"op": "call", "name": "run_shell_command",
                         "arguments": {"command": "echo other"}}])
    assert init["session"], init
    assert listed["result"]["tools"], listed
    assert texts(called["result"]) == ["other\n", "0"], called
    r = post(s, echo, session=kept)
    assert r.status_code == 200 and texts(r.json()["result"]) == \
        ["kept\n", "0"], r.text
    assert len(s.containers()) == 2


def test_token_required(start_sandboxd):
    """The same auth as every other route: the SDK client is refused, and
    so is a plain POST without or with a wrong token."""
    s = start_sandboxd(token="tok")
    [init] = run_client(s.url + "/mcp", "", [{"op": "ping"}])
    assert init["code"] == 401, init
    assert "Authentication required" in init["error"]
    init_msg = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                "params": {}}
    other = requests.post(s.url + "/list_session_keys", json={}, timeout=60)
    for token in ("", "wrong"):
        r = post(s, init_msg, token=token)
        assert r.status_code == other.status_code == 401, r.text
        assert "Mcp-Session-Id" not in r.headers


def test_bad_messages(start_sandboxd):
    """Bad JSON, batches, unknown methods and tools, bad arguments: MCP
    errors, and the session keeps working."""
    s = start_sandboxd(token="tok")
    sid, _ = initialize(s)
    r = post(s, '{"jsonrpc": "2.0", "id": 1, "method": ', session=sid,
             raw=True)
    assert r.status_code == 400
    assert r.json()["error"]["code"] == -32700, r.text
    r = post(s, [{"jsonrpc": "2.0", "id": 1, "method": "ping"}], session=sid)
    assert r.json()["error"]["code"] == -32600, r.text
    r = post(s, {"jsonrpc": "2.0", "id": 2, "method": "no/such"},
             session=sid)
    assert r.json()["error"]["code"] == -32601, r.text
    r = post(s, {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                 "params": {"arguments": {}}}, session=sid)
    assert r.json()["error"]["code"] == -32602, r.text
    r = post(s, {"jsonrpc": "2.0", "id": 4, "method": "tools/list"},
             session=sid)
    assert r.status_code == 200 and r.json()["result"]["tools"], r.text
    r = post(s, {"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                 "params": {"name": "no_such_tool", "arguments": {}}},
             session=sid)
    assert r.json()["error"]["code"] == -32602, r.text
    r = post(s, {"jsonrpc": "2.0", "id": 6, "method": "tools/call",
                 "params": {"name": "run_shell_command",
                            "arguments": {"command": 5}}}, session=sid)
    assert r.json()["result"]["isError"] is True, r.text
    r = post(s, {"jsonrpc": "2.0", "id": 7, "method": "initialize",
                 "params": {}}, raw=False, session=None,
             params={"type": "no-such-type"})
    assert r.json()["error"]["code"] == -32602, r.text
    assert "no-such-type" in r.json()["error"]["message"]
    r = post(s, {"jsonrpc": "2.0", "id": 8, "method": "ping"}, session=sid)
    assert r.json()["result"] == {}, r.text
    requests.delete(s.url + "/mcp", timeout=120,
                    headers={"Authorization": "Bearer tok",
                             "Mcp-Session-Id": sid})
    assert not s.containers()


def test_sandbox_released_elsewhere_is_replaced(start_sandboxd):
    """sandboxd ends the session's sandbox (its heartbeat reaper, another
    client): the call says so, and the next one runs in a new sandbox."""
    s = start_sandboxd(token="tok")
    sid, _ = initialize(s)

    def shell(i, command):
        r = post(s, {"jsonrpc": "2.0", "id": i, "method": "tools/call",
                     "params": {"name": "run_shell_command",
                                "arguments": {"command": command}}},
                 session=sid)
        assert r.status_code == 200, r.text
        return r.json()["result"]

    assert texts(shell(1, "echo one")) == ["one\n", "0"]
    [first] = s.containers()
    # Bound to a sandboxd session of its own, as the reaper needs.
    assert s.rpc("get_info", identity=first)["meta"]["session_ctx_id"]
    assert s.rpc("release", identity=first) is True
    gone = shell(2, "echo two")
    assert gone["isError"] is True
    assert "is gone" in gone["content"][0]["text"], gone
    again = shell(3, "echo three")
    assert texts(again) == ["three\n", "0"], again
    [second] = s.containers()
    assert second != first
    requests.delete(s.url + "/mcp", timeout=120,
                    headers={"Authorization": "Bearer tok",
                             "Mcp-Session-Id": sid})
    assert not s.containers()


def test_idle_session_sandbox_reaped(start_sandboxd):
    """The MCP session's sandbox belongs to a sandboxd session: calls keep
    it alive, HEARTBEAT_TIMEOUT without calls reaps it, and the MCP
    session then says so and goes on with a new sandbox."""
    # Sandboxes from the warm pool: a create on this loaded machine may
    # itself take longer than the 3 s.
    s = start_sandboxd(token="tok", env={"HEARTBEAT_TIMEOUT": "3",
                                         "POOL_SIZE": "1"})
    sid, _ = initialize(s)

    def warm():
        return any(m["state"] == "warm" for m in (
            s.rpc("get_info", identity=n) for n in s.containers(False)))

    def shell(i, command):
        r = post(s, {"jsonrpc": "2.0", "id": i, "method": "tools/call",
                     "params": {"name": "run_shell_command",
                                "arguments": {"command": command}}},
                 session=sid)
        assert r.status_code == 200, r.text
        return r.json()["result"]

    wait_until(warm, 60, what="a warm sandbox")
    assert texts(shell(1, "echo one")) == ["one\n", "0"]
    [first] = [n for n in s.containers(False)
               if s.rpc("get_info", identity=n)["state"] == "running"]
    deadline = time.time() + 5
    while time.time() < deadline:  # busy for longer than the timeout
        assert shell(2, "true")["isError"] is False
        time.sleep(0.5)
    assert s.rpc("get_info", identity=first)["state"] == "running"
    # Watched through Docker: get_info would count as activity.
    wait_until(lambda: first not in s.containers(), 30,
               what="the idle sandbox reaped")
    gone = shell(3, "echo two")
    assert gone["isError"] is True
    assert "is gone" in gone["content"][0]["text"], gone
    wait_until(warm, 60, what="a warm sandbox")
    assert texts(shell(4, "echo three")) == ["three\n", "0"]
    requests.delete(s.url + "/mcp", timeout=120,
                    headers={"Authorization": "Bearer tok",
                             "Mcp-Session-Id": sid})
    assert all(s.rpc("get_info", identity=n)["state"] == "warm"
               for n in s.containers(False))


PROBE = ("cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' | "
         "grep -c 'sleep 123[.]456' || true")


def test_sdk_cancel_stops_the_command(start_sandboxd):
    """The SDK aborts a call (AbortController): it sends
    notifications/cancelled and drops its request; the command's
    processes are gone and the session goes on."""
    s = start_sandboxd(token="tok")
    steps = [{"op": "cancel", "name": "run_shell_command",
              "arguments": {"command": "sleep 123.456"}, "after_ms": 1500}]
    steps += [{"op": "call", "name": "run_shell_command",
               "arguments": {"command": "sleep 0.3; " + PROBE}}] * 10
    steps += [{"op": "terminate"}]
    _, cancel, *probes, ended = run_client(s.url + "/mcp", "tok", steps)
    assert "test cancels" in cancel["error"], cancel
    counts = [texts(p["result"])[0].strip() for p in probes]
    assert "0" in counts, counts
    assert "error" not in ended, ended
    assert not s.containers()


def test_cancelled_notification_stops_the_command(start_sandboxd):
    """notifications/cancelled alone, the call's request still open:
    that request is answered with an error, the command is killed."""
    s = start_sandboxd(token="tok")
    sid, _ = initialize(s)

    def shell(i, command):
        return post(s, {"jsonrpc": "2.0", "id": i, "method": "tools/call",
                        "params": {"name": "run_shell_command",
                                   "arguments": {"command": command}}},
                    session=sid)

    assert shell(1, "true").status_code == 200
    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        pending = ex.submit(shell, "long", "sleep 123.456")
        wait_until(lambda: texts(shell(2, PROBE).json()["result"])[0]
                   .strip() == "1", 30, what="the command running")
        r = post(s, {"jsonrpc": "2.0", "method": "notifications/cancelled",
                     "params": {"requestId": "long",
                                "reason": "user\nhit stop"}}, session=sid)
        assert r.status_code == 202, r.text
        answer = pending.result(timeout=30)
    err = answer.json()["error"]
    assert answer.json()["id"] == "long"
    assert "request cancelled" in err["message"], err
    assert "hit stop" in err["message"], err
    wait_until(lambda: texts(shell(3, PROBE).json()["result"])[0]
               .strip() == "0", 30, what="the command killed")
    # An unknown or finished request id is ignored.
    r = post(s, {"jsonrpc": "2.0", "method": "notifications/cancelled",
                 "params": {"requestId": 1}}, session=sid)
    assert r.status_code == 202, r.text
    assert texts(shell(4, "echo on").json()["result"]) == ["on\n", "0"]
    requests.delete(s.url + "/mcp", timeout=120,
                    headers={"Authorization": "Bearer tok",
                             "Mcp-Session-Id": sid})
    assert not s.containers()
