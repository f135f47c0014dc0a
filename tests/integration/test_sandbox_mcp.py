"""sandbox-mcp (mcp/) driven by the official MCP SDK client from npm
(tests/node_modules/@modelcontextprotocol/sdk, sandbox_mcp_client.mjs) over
stdio, in front of a real sandboxd and real containers: the tools the
sandbox lists, calls relayed, errors that leave the server running, and
the sandbox released however the session ends.
"""
import json
import os
import signal
import subprocess
import time

import pytest

from conftest import ROOT
from sandboxd_fixtures import (base_tag, filesystem_tag,  # noqa: F401
                               minimal_tag, start_sandboxd, wait_until)

NODE = "/usr/bin/node"
CLIENT = os.path.join(os.path.dirname(__file__), "helpers", "sandbox_mcp_client.mjs")
# SANDBOX_MCP_BIN: another build (the ASan one).
MCP_BIN = os.environ.get("SANDBOX_MCP_BIN") or os.path.join(
    ROOT, "sandbox-mcp", "sandbox-mcp")


def mcp_env():
    e = {k: v for k, v in os.environ.items()
         if k in ("PATH", "HOME", "LANG", "ASAN_OPTIONS", "UBSAN_OPTIONS")}
    e["SANDBOX_MCP_LOG_LEVEL"] = "info"
    return e


def start_client(args, steps, env=None):
    return subprocess.Popen(
        [NODE, CLIENT, MCP_BIN, json.dumps(args), json.dumps(env or mcp_env()),
         json.dumps(steps)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)


def run_client(args, steps, env=None, timeout=300):
    """The outcome of each step, in order (initialize first)."""
    p = start_client(args, steps, env)
    out, err = p.communicate(timeout=timeout)
    assert p.returncode == 0, f"client failed ({p.returncode}): {err}\n{out}"
    lines = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert lines[-1] == {"op": "closed"}, out
    # sandbox-mcp's stderr comes through the client: under ASan, a
    # memory error or leak at its exit shows there.
    assert "Sanitizer" not in err, err
    return lines[:-1], err


def texts(result):
    """The text items: stdout, then stderr when there is some, then (for
    commands) the return code. The SDK drops the reference's
    "description" key of each item (not an MCP field), so by order."""
    return [c["text"] for c in result["content"] if c["type"] == "text"]


def sandbox_args(s, sandbox_type="minimal"):
    return [f"--type={sandbox_type}", f"--base_url={s.url}",
            f"--bearer_token={s.token}"]


def no_sandbox_left(s):
    return not s.containers()


def test_tools_listed_and_called(start_sandboxd):
    """initialize negotiates the SDK's version down to ours, tools/list
    gives the sandbox's tools under their own names with their schemas,
    a shell command runs, and closing the client releases the sandbox."""
    s = start_sandboxd(token="tok")
    steps = [{"op": "ping"}, {"op": "list"},
             {"op": "call", "name": "run_shell_command",
              "arguments": {"command": "echo hi; echo oops >&2"}}]
    (init, ping, listed, called), log = run_client(sandbox_args(s), steps)
    assert init["version"] == {"name": "sandbox-mcp", "version": "0.1.0"}
    assert "'minimal'" in init["instructions"]
    assert ping["result"] == {}
    tools = {t["name"]: t for t in listed["result"]["tools"]}
    assert {"run_shell_command", "run_ipython_cell"} <= set(tools), tools
    schema = tools["run_shell_command"]["inputSchema"]
    assert schema["type"] == "object"
    assert "command" in schema["properties"], schema
    assert schema["required"] == ["command"]
    result = called["result"]
    assert texts(result) == ["hi\n", "oops\n", "0"], result
    assert result["isError"] is True  # stderr non-empty, as the reference
    # Closing the client closes sandbox-mcp's stdin: it releases.
    assert "released" in log, log
    wait_until(lambda: no_sandbox_left(s), what="the sandbox released")


def test_ipython_state_kept_in_one_session(start_sandboxd, base_tag):
    s = start_sandboxd(tag=base_tag, token="tok")
    steps = [{"op": "call", "name": "run_ipython_cell",
              "arguments": {"code": "x = 41"}},
             {"op": "call", "name": "run_ipython_cell",
              "arguments": {"code": "print(x + 1)"}}]
    (_, first, second), _ = run_client(sandbox_args(s, "base"), steps)
    assert first["result"]["isError"] is False, first
    assert texts(second["result"])[0] == "42\n", second
    # A second session has a sandbox of its own.
    steps = [{"op": "call", "name": "run_ipython_cell",
              "arguments": {"code": "print(x)"}}]
    (_, other), _ = run_client(sandbox_args(s, "base"), steps)
    assert other["result"]["isError"] is True
    assert "NameError" in texts(other["result"])[1]
    wait_until(lambda: no_sandbox_left(s), what="the sandboxes released")


def test_filesystem_type(start_sandboxd, filesystem_tag):
    """The filesystem type's MCP tools, under the names the SDK's
    list_tools shows, write and read a file."""
    s = start_sandboxd(tag=filesystem_tag, token="tok")
    steps = [{"op": "list"},
             {"op": "call", "name": "write_file",
              "arguments": {"path": "/workspace/a.md", "content": "alpha\n"}},
             {"op": "call", "name": "read_file",
              "arguments": {"path": "/workspace/a.md"}}]
    (_, listed, wrote, read), _ = run_client(
        sandbox_args(s, "filesystem"), steps)
    names = {t["name"] for t in listed["result"]["tools"]}
    assert {"read_file", "write_file", "edit_file", "list_directory",
            "directory_tree", "search_files", "run_shell_command"} <= names
    assert wrote["result"]["isError"] is False, wrote
    assert texts(read["result"]) == ["alpha\n"], read
    wait_until(lambda: no_sandbox_left(s), what="the sandbox released")


def test_errors_leave_the_server_running(start_sandboxd):
    """An unknown tool is a JSON-RPC error, wrong arguments a tool error
    with the reason; the session goes on after each."""
    s = start_sandboxd(token="tok")
    steps = [{"op": "list"},
             {"op": "call", "name": "no_such_tool", "arguments": {}},
             {"op": "call", "name": "run_shell_command", "arguments": {}},
             {"op": "call", "name": "run_shell_command",
              "arguments": {"command": 42}},
             {"op": "call", "name": "run_shell_command",
              "arguments": {"command": "echo still here"}}]
    (_, _, unknown, empty, wrong, ok), _ = run_client(sandbox_args(s), steps)
    assert unknown["code"] == -32602, unknown
    assert "no_such_tool" in unknown["error"]
    for bad in (empty, wrong):
        assert bad["result"]["isError"] is True, bad
        assert "command" in bad["result"]["content"][0]["text"], bad
    assert texts(ok["result"])[0] == "still here\n"
    wait_until(lambda: no_sandbox_left(s), what="the sandbox released")


def test_cancel_stops_the_command(start_sandboxd):
    s = start_sandboxd(token="tok")
    probe = ("cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' | "
             "grep -c 'sleep 123[.]456' || true")
    steps = [{"op": "cancel", "name": "run_shell_command",
              "arguments": {"command": "sleep 123.456"}, "after_ms": 1500}]
    steps += [{"op": "call", "name": "run_shell_command",
               "arguments": {"command": "sleep 0.3; " + probe}}] * 10
    (_, cancel, *probes), log = run_client(sandbox_args(s), steps)
    assert "test cancels" in cancel["error"], cancel
    counts = [texts(p["result"])[0].strip() for p in probes]
    assert "0" in counts, (counts, log)
    wait_until(lambda: no_sandbox_left(s), what="the sandbox released")


def wait_gone(pid, timeout=60):
    def gone():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False
    wait_until(gone, timeout=timeout, what=f"process {pid} to exit")


def test_client_killed_mid_command_releases(start_sandboxd):
    """The MCP host dies (SIGKILL) while a command runs: sandbox-mcp sees
    stdin close, drops the call, releases the sandbox and exits."""
    s = start_sandboxd(token="tok")
    p = start_client(sandbox_args(s), [
        {"op": "hang", "name": "run_shell_command",
         "arguments": {"command": "sleep 300"}}])
    try:
        init = json.loads(p.stdout.readline())
        assert init["op"] == "initialize"
        pid = json.loads(p.stdout.readline())["pid"]
        wait_until(lambda: s.containers(), what="the sandbox")
        time.sleep(1)
    finally:
        p.kill()
        p.communicate()
    wait_gone(pid)
    wait_until(lambda: no_sandbox_left(s), what="the sandbox released")
    names = [n for n in s.rpc("list_session_keys")]
    assert all(s.rpc("get_session_mapping", session_ctx_id=k) == []
               for k in names), names


def run_raw(args, lines, wait=0.0, timeout=60, env=None):
    """sandbox-mcp fed raw lines (bytes) on stdin; its answers, stderr
    and exit status."""
    p = subprocess.Popen([MCP_BIN, *args], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=env or mcp_env())
    for line in lines:
        p.stdin.write(line)
        p.stdin.flush()
    time.sleep(wait)
    out, err = p.communicate(timeout=timeout)
    answers = [json.loads(x) for x in out.splitlines() if x.strip()]
    return answers, err.decode(errors="replace"), p.returncode


def req(i, method, params=None):
    m = {"jsonrpc": "2.0", "id": i, "method": method}
    if params is not None:
        m["params"] = params
    return (json.dumps(m) + "\n").encode()


def test_bad_json_rpc_and_huge_lines():
    """No sandboxd needed: parse errors, unknown methods, an overlong line
    (dropped as it comes, never held) each get an error and the next
    request is still answered."""
    huge = b'{"jsonrpc": "2.0", "id": 9, "method": "ping", "x": "' + \
        b"a" * (3 << 20) + b'"}\n'
    answers, err, rc = run_raw(
        ["--max_message=1M", "--base_url=http://127.0.0.1:1"],
        [req(1, "initialize", {"protocolVersion": "2024-11-05"}),
         b"{not json\n", req(2, "resources/list"), b"[1, 2]\n", huge,
         req(3, "ping"), b"\n",
         req(4, "initialize", {"protocolVersion": "1999-01-01"})])
    assert rc == 0, err
    by_id = {a["id"]: a for a in answers if a["id"] is not None}
    nulls = [a["error"]["code"] for a in answers if a["id"] is None]
    assert by_id[1]["result"]["protocolVersion"] == "2024-11-05"
    assert by_id[4]["result"]["protocolVersion"] == "2025-06-18"
    assert by_id[2]["error"]["code"] == -32601
    assert by_id[3]["result"] == {}
    assert 9 not in by_id
    assert nulls == [-32700, -32600, -32600], answers


def test_sandboxd_unreachable_or_type_unknown(start_sandboxd):
    """A clear error as the tool result, at once, never a hang."""
    answers, err, rc = run_raw(
        ["--base_url=http://127.0.0.1:1"],
        [req(1, "tools/call", {"name": "run_shell_command",
                               "arguments": {"command": "true"}})],
        wait=2)
    assert rc == 0, err
    [a] = answers
    assert a["result"]["isError"] is True
    assert "Connection refused" in a["result"]["content"][0]["text"]
    s = start_sandboxd(token="tok")
    answers, err, rc = run_raw(
        sandbox_args(s, "nosuchtype"),
        [req(1, "tools/list"),
         req(2, "tools/call", {"name": "x", "arguments": {}})], wait=3)
    by_id = {a["id"]: a for a in answers}
    assert "nosuchtype" in by_id[1]["error"]["message"], answers
    assert "nosuchtype" in by_id[2]["result"]["content"][0]["text"]
    answers, err, rc = run_raw(
        [f"--base_url={s.url}", "--bearer_token=wrong"],
        [req(1, "tools/list")], wait=2)
    assert "bearer token" in answers[0]["error"]["message"], answers


def test_sandbox_released_elsewhere_is_replaced(start_sandboxd):
    """sandboxd ends the sandbox behind our back (its idle reaper, another
    client): the call says so, and the next one runs in a new sandbox."""
    s = start_sandboxd(token="tok")
    p = subprocess.Popen([MCP_BIN, *sandbox_args(s)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=mcp_env())

    def shell(i, command):
        p.stdin.write(req(i, "tools/call", {"name": "run_shell_command",
                                            "arguments": {"command": command}}))
        p.stdin.flush()
        return json.loads(p.stdout.readline())["result"]

    assert texts(shell(1, "echo one > /workspace/f; cat /workspace/f")) \
        == ["one\n", "0"]
    [first] = s.containers()
    assert s.rpc("release", identity=first) is True
    gone = shell(2, "cat /workspace/f")
    assert gone["isError"] is True
    assert "is gone" in gone["content"][0]["text"], gone
    again = shell(3, "ls /workspace; echo new")
    assert texts(again) == ["new\n", "0"], again
    [second] = s.containers()
    assert second != first
    p.stdin.close()
    assert p.wait(60) == 0, p.stderr.read()
    assert not s.containers()


@pytest.mark.parametrize("how", ["sigterm", "eager-stdin-closed"])
def test_released_on_signal_and_stdin_close(start_sandboxd, how):
    s = start_sandboxd(token="tok")
    p = subprocess.Popen([MCP_BIN, *sandbox_args(s)] + (
        ["--eager"] if how.startswith("eager") else []),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, env=mcp_env())
    if not how.startswith("eager"):
        p.stdin.write(req(1, "tools/list"))
        p.stdin.flush()
        line = p.stdout.readline()
        assert "run_shell_command" in line.decode(), line
    wait_until(lambda: s.containers(), what="the sandbox")
    if how == "sigterm":
        p.send_signal(signal.SIGTERM)
    else:
        p.stdin.close()
    p.wait(60)
    assert p.returncode == 0, p.stderr.read()
    assert not s.containers()


def test_our_agent_as_mcp_client(start_sandboxd, agent):
    """The project's own agent takes sandbox-mcp as a stdio MCP server
    (/mcp/add_servers): its tools listed under their names, a command
    run in the sandbox behind it."""
    s = start_sandboxd(token="tok")
    r = agent.post("/mcp/add_servers", {"server_configs": {"mcpServers": {
        "sandbox": {"command": MCP_BIN, "args": sandbox_args(s),
                    "env": {k: v for k, v in mcp_env().items()
                            if k.endswith("SAN_OPTIONS")}}}}})
    assert r.status_code == 200, r.text
    tools = agent.get("/mcp/list_tools").json()["sandbox"]
    assert {"run_shell_command", "run_ipython_cell"} <= set(tools), tools
    schema = tools["run_shell_command"]["json_schema"]["function"]
    assert "command" in schema["parameters"]["properties"]
    r = agent.post("/mcp/call_tool", {"tool_name": "run_shell_command",
                                      "arguments": {"command": "echo in $PWD"}})
    assert r.status_code == 200, r.text
    assert texts(r.json())[0] == "in /workspace\n", r.text
    assert len(s.containers()) == 1
    # The agent stopping releases the sandbox: its children get SIGTERM
    # and a grace to exit before the MCP servers' groups are killed (it
    # used to kill them at once, and sandbox-mcp's release lost the race).
    agent.proc.send_signal(signal.SIGTERM)
    assert agent.proc.wait(10) == 0, agent.read_log()[-2000:]
    wait_until(lambda: not s.containers(), 30, what="the sandbox released")
