"""sandboxd's AgentScope manager routes (spec section 2), one by one, against
real containers of the minimal image."""
import os

import pytest

from sandboxd_fixtures import (BACKEND, minimal_tag, sandboxd,  # noqa: F401
                               scratch, start_sandboxd, wait_until)

MODEL_KEYS = {"session_id", "container_id", "container_name", "url", "ports",
              "mount_dir", "storage_path", "runtime_token", "version", "meta",
              "timeout", "sandbox_type", "session_ctx_id", "state",
              "updated_at"}


def test_health_needs_no_token_and_names_the_version(start_sandboxd):
    s = start_sandboxd(token="sekret")
    import requests
    r = requests.get(s.url + "/health")
    assert r.status_code == 200
    assert r.json()["status"] == "healthy"
    assert isinstance(r.json()["version"], str)


def test_bearer_token_is_required_elsewhere(start_sandboxd):
    import requests
    s = start_sandboxd(token="sekret")
    r = requests.post(s.url + "/list_session_keys", json={})
    assert r.status_code == 401
    assert r.json() == {"detail": "Authentication required"}
    r = requests.post(s.url + "/list_session_keys", json={},
                      headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401
    assert "detail" in r.json()
    r = requests.get(s.url + "/metrics")
    assert r.status_code == 401
    assert s.post("/list_session_keys", {}).json() == {"data": []}


def test_create_info_status_health_release(sandboxd):
    s = sandboxd
    name = s.create(meta={"owner": "test"})
    assert name.startswith("sandboxd-")
    info = s.rpc("get_info", identity=name)
    assert MODEL_KEYS <= set(info)
    assert info["container_name"] == name
    assert info["sandbox_type"] == "minimal"
    assert info["state"] == "running"
    assert info["meta"] == {"owner": "test"}
    assert info["version"].startswith("agentscope/runtime-sandbox-minimal:")
    assert len(info["runtime_token"]) == 32
    assert info["ports"] == []
    assert os.path.isdir(info["mount_dir"])
    # The container is as the issue says: ours, confined, no network.
    if BACKEND == "crun":
        c = s.crun_config(name)
        assert [n for n in c["linux"]["namespaces"]
                if n["type"] == "network"] == [{"type": "network"}]
        caps = c["process"]["capabilities"]
        assert caps["bounding"] == caps["effective"] == caps["permitted"]
        assert "CAP_SYS_ADMIN" not in caps["bounding"]
        assert c["process"]["noNewPrivileges"] is True
        limits = c["linux"]["resources"]
        assert limits["memory"]["limit"] > 0 and \
            limits["cpu"]["quota"] > 0 and limits["pids"]["limit"] > 0
        assert f"SECRET_TOKEN={info['runtime_token']}" in \
            c["process"]["env"]
        assert {"destination": "/workspace", "type": "bind",
                "source": info["mount_dir"],
                "options": ["rbind", "rprivate"]} in c["mounts"]
        # Its id is its name: nothing abbreviates it.
        assert info["container_id"] == name
    else:
        c = s.inspect(name)
        labels = c["Config"]["Labels"]
        assert labels["io.agentscope.sandboxd.instance"] == s.instance
        assert labels["io.agentscope.sandboxd.type"] == "minimal"
        host = c["HostConfig"]
        assert host["NetworkMode"] == "none"
        assert host["CapDrop"] == ["ALL"]
        assert "no-new-privileges" in host["SecurityOpt"]
        assert host["Memory"] > 0 and host["NanoCpus"] > 0 and \
            host["PidsLimit"] > 0
        assert f"SECRET_TOKEN={info['runtime_token']}" in c["Config"]["Env"]
        binds = host["Binds"]
        assert f"{info['mount_dir']}:/workspace:rw" in binds
        # Lookup by a unique prefix of the container id.
        assert s.rpc("get_info", identity=info["container_id"][:12])[
            "container_name"] == name
    assert s.rpc("get_info", identity=info["container_id"])["container_name"] == name
    assert s.rpc("get_status", identity=name) == "running"
    assert s.rpc("check_health", identity=name) is True

    assert s.rpc("release", identity=name) is True
    assert name not in s.containers()
    assert not os.path.exists(info["mount_dir"])
    # The record stays, as released.
    assert s.rpc("get_info", identity=name)["state"] == "released"
    assert s.rpc("get_status", identity=name) == "released"
    assert s.rpc("check_health", identity=name) is False
    assert s.rpc("release", identity=name) is True


def test_call_tool_shell_and_workspace(sandboxd):
    s = sandboxd
    name = s.create()
    out = s.shell(name, "echo hello > /workspace/f; cat /workspace/f; pwd")
    assert out["stdout"] == "hello\n/workspace\n"
    assert out["returncode"] == "0"
    info = s.rpc("get_info", identity=name)
    with open(os.path.join(info["mount_dir"], "f")) as f:
        assert f.read() == "hello\n"
    result = s.rpc("call_tool", identity=name, tool_name="run_shell_command",
                   arguments={"command": "echo err >&2; exit 3"})
    texts = {c["description"]: c["text"] for c in result["content"]}
    assert result["isError"] is True
    assert texts["stderr"] == "err\n"
    assert texts["returncode"] == "3"
    # No network in a minimal sandbox.
    out = s.shell(name, "ls /sys/class/net")
    assert out["stdout"].split() == ["lo"]


def test_call_tool_errors(sandboxd):
    s = sandboxd
    name = s.create()
    # The agent's own 400 (empty command) comes back as ours.
    r = s.post("/call_tool", {"identity": name, "tool_name":
                              "run_shell_command", "arguments": {"command": ""}})
    assert r.status_code == 400
    assert r.json()["detail"].startswith("Error in call_tool: ")
    r = s.post("/call_tool", {"identity": name})
    assert r.status_code == 400
    assert "tool_name" in r.json()["detail"]


def test_list_tools(sandboxd):
    s = sandboxd
    name = s.create()
    tools = s.rpc("list_tools", identity=name)
    generic = tools["generic"]
    assert set(generic) == {"run_ipython_cell", "run_shell_command"}
    fn = generic["run_shell_command"]["json_schema"]["function"]
    assert fn["name"] == "run_shell_command"
    assert fn["parameters"]["required"] == ["command"]
    assert s.rpc("list_tools", identity=name, tool_type="generic") == {
        "generic": generic}
    assert s.rpc("list_tools", identity=name, tool_type="browser") == {
        "browser": {}}
    # The SDK sends tool_type null when it has none.
    assert "generic" in s.rpc("list_tools", identity=name, tool_type=None)


def test_add_mcp_servers_is_relayed(sandboxd):
    s = sandboxd
    name = s.create()
    assert s.rpc("add_mcp_servers", identity=name,
                 server_configs={"mcpServers": {}}, overwrite=False) == "OK"
    # A server that cannot start: the agent's 500, named, as our 502.
    r = s.post("/add_mcp_servers", {"identity": name, "server_configs": {
        "mcpServers": {"broken": {"command": "/bin/false"}}}})
    assert r.status_code == 502
    detail = r.json()["detail"]
    assert detail.startswith("Error in add_mcp_servers: ")
    assert "broken" in detail
    r = s.post("/add_mcp_servers", {"identity": name})
    assert r.status_code == 400
    assert "server_configs" in r.json()["detail"]
    # An unknown MCP tool: the agent's 404 comes back as ours.
    r = s.post("/call_tool", {"identity": name, "tool_name": "nope",
                              "arguments": {}})
    assert r.status_code == 404
    assert "nope" in r.json()["detail"]


def test_stop_and_start(sandboxd):
    s = sandboxd
    name = s.create()
    s.shell(name, "echo kept > /workspace/k")
    assert s.rpc("stop", identity=name) is True
    assert s.rpc("get_status", identity=name) == "exited"
    assert s.rpc("get_info", identity=name)["state"] == "stopped"
    assert s.rpc("check_health", identity=name) is False
    r = s.post("/call_tool", {"identity": name, "tool_name":
                              "run_shell_command", "arguments": {"command": "true"}})
    assert r.status_code == 409
    assert s.rpc("start", identity=name) is True
    assert s.rpc("get_status", identity=name) == "running"
    assert s.shell(name, "cat /workspace/k")["stdout"] == "kept\n"


def test_start_a_running_one_and_stop_a_stopped_one(sandboxd):
    """Docker says 304 (nothing to do) to both: the sandbox is as asked."""
    s = sandboxd
    name = s.create()
    for method in ("start", "start_async"):
        assert s.post("/" + method, {"identity": name}).json() == {"data": True}
    assert s.rpc("get_info", identity=name)["state"] == "running"
    assert s.shell(name, "echo still")["stdout"] == "still\n"
    assert s.rpc("stop", identity=name) is True
    for method in ("stop", "stop_async"):
        assert s.post("/" + method, {"identity": name}).json() == {"data": True}
    assert s.rpc("get_info", identity=name)["state"] == "stopped"
    # A warm one stays in its pool.
    p = s.rpc("create_from_pool", sandbox_type="minimal")
    assert s.rpc("start", identity=p) is True


def test_a_stopped_sandbox_answers_alike_everywhere(start_sandboxd):
    s = start_sandboxd(token="tok")
    name = s.create()
    assert s.rpc("stop", identity=name) is True
    want = f"sandbox {name} is stopped; start it to use it again"
    calls = {
        "call_tool": {"tool_name": "run_shell_command",
                      "arguments": {"command": "true"}},
        "list_tools": {},
        "add_mcp_servers": {"server_configs": {"mcpServers": {}}},
    }
    for method, extra in calls.items():
        for route in (method, method + "_async"):
            r = s.post("/" + route, {"identity": name, **extra})
            assert r.status_code == 409, (route, r.text)
            assert r.json() == {"detail": f"Error in {route}: {want}"}
    for path in (f"/proxy/{name}/tools/run_shell_command",
                 f"/v1/sandboxes/{name}/agent/tools/run_shell_command"):
        r = s.post(path, {"command": "true"})
        assert r.status_code == 409, (path, r.text)
        assert r.json() == {"detail": want}
    # What still works: its record, its status, starting, releasing.
    assert s.rpc("get_info", identity=name)["state"] == "stopped"
    assert s.rpc("get_status", identity=name) == "exited"
    assert s.rpc("check_health", identity=name) is False
    assert s.rpc("start", identity=name) is True
    assert s.shell(name, "echo back")["stdout"] == "back\n"
    assert s.rpc("release", identity=name) is True
    r = s.post("/list_tools", {"identity": name})
    assert r.status_code == 409
    assert r.json() == {"detail": f"Error in list_tools: sandbox {name} "
                        "is released"}


def test_no_host_paths_in_what_clients_read(start_sandboxd, scratch):
    """A sandbox whose agent went away under sandboxd (its container
    stopped behind its back): the answers say so without the socket's
    path, nor any other directory of the host."""
    s = start_sandboxd(env={"SANDBOXD_HEALTH_INTERVAL": "3600"})
    name = s.create()
    info = s.rpc("get_info", identity=name)
    s.remove_container(info["container_id"])
    answers = [
        s.post("/list_tools", {"identity": name}),
        s.post("/call_tool", {"identity": name,
                              "tool_name": "run_shell_command",
                              "arguments": {"command": "true"}}),
        s.post(f"/proxy/{name}/tools/run_shell_command", {"command": "true"}),
        s.post("/start", {"identity": name}),
        # mount_dir outside what may be mounted names the setting.
        s.post("/create", {"sandbox_type": "minimal",
                           "mount_dir": scratch("sbxd-outside-")}),
    ]
    for r in answers[:3]:
        assert r.status_code == 502, r.text
        assert "the agent's socket" in r.json()["detail"], r.text
    assert answers[3].json()["data"] is False
    assert answers[4].status_code == 400
    for r in answers:
        assert s.state_dir not in r.text, r.text
        assert s.dir not in r.text, r.text
        assert "docker.sock" not in r.text, r.text
    assert "$DEFAULT_MOUNT_DIR" in answers[-1].json()["detail"]


def test_a_call_may_take_as_long_as_its_own_timeout(start_sandboxd):
    """A plain command says nothing until it ends: the relay waits as long
    as the call's "timeout" asks (plus a margin), however short
    SANDBOXD_PROXY_TIMEOUT is; calls without one get that."""
    s = start_sandboxd(env={"SANDBOXD_PROXY_TIMEOUT": "1"})
    name = s.create()
    slow = {"command": "sleep 3; echo done", "timeout": 30}
    res = s.rpc("call_tool_async", identity=name,
                tool_name="run_shell_command", arguments=slow)
    assert res["content"][0]["text"] == "done\n", res
    for path in (f"/proxy/{name}/tools/run_shell_command",
                 f"/proxy/{name}/fastapi/tools/run_shell_command",
                 f"/v1/sandboxes/{name}/agent/tools/run_shell_command"):
        r = s.post(path, slow)
        assert r.status_code == 200, (path, r.text)
        assert r.json()["content"][0]["text"] == "done\n"
    # Without its own timeout: SANDBOXD_PROXY_TIMEOUT.
    r = s.post("/call_tool", {"identity": name,
                              "tool_name": "run_shell_command",
                              "arguments": {"command": "sleep 3"}})
    assert r.status_code == 504, r.text
    assert "no progress" in r.json()["detail"]
    r = s.post(f"/proxy/{name}/tools/run_shell_command",
               {"command": "sleep 3"})
    assert r.status_code == 504, r.text
    # A body that is no JSON goes on as it came, for the agent to refuse.
    r = s.post(f"/proxy/{name}/tools/run_shell_command", data=b"{not json",
               headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text


def test_sessions_mapping_and_keys(sandboxd):
    s = sandboxd
    a = s.rpc("create_from_pool", sandbox_type="minimal",
              meta={"session_ctx_id": "sess-a"})
    b = s.rpc("create", sandbox_type="minimal",
              meta={"session_ctx_id": "sess-a"})
    c = s.rpc("create", sandbox_type="minimal",
              meta={"session_ctx_id": "sess-b"})
    assert sorted(s.rpc("get_session_mapping", session_ctx_id="sess-a")) == \
        sorted([a, b])
    assert s.rpc("get_session_mapping", session_ctx_id="sess-b") == [c]
    assert s.rpc("get_session_mapping", session_ctx_id="nobody") == []
    assert sorted(s.rpc("list_session_keys")) == ["sess-a", "sess-b"]
    info = s.rpc("get_info", identity=a)
    assert info["session_ctx_id"] == "sess-a"
    assert info["meta"]["session_ctx_id"] == "sess-a"
    s.rpc("release", identity=c)
    assert s.rpc("list_session_keys") == ["sess-a"]


def test_cleanup_removes_everything(sandboxd):
    s = sandboxd
    names = [s.create() for _ in range(3)]
    assert set(names) <= set(s.containers())
    r = s.post("/cleanup", {})
    assert r.status_code == 200
    assert r.json() == {"data": None}
    assert s.containers() == {}
    for n in names:
        assert s.rpc("get_info", identity=n)["state"] == "released"


def test_get_routes_take_query_parameters(sandboxd):
    s = sandboxd
    name = s.create()
    r = s.get("/get_info", params={"identity": name})
    assert r.status_code == 200
    assert r.json()["data"]["container_name"] == name
    r = s.get("/check_health", params={"identity": name})
    assert r.json() == {"data": True}


def test_proxy_to_agent(start_sandboxd):
    import requests
    s = start_sandboxd(token="mgr-token")
    name = s.create()
    info = s.rpc("get_info", identity=name)
    # With the manager's token.
    r = s.post(f"/proxy/{name}/tools/run_shell_command",
               {"command": "echo via-proxy"},
               headers={"x-agentscope-runtime-session-id": "s1"})
    assert r.status_code == 200
    assert r.json()["content"][0]["text"] == "via-proxy\n"
    r = s.get(f"/proxy/{name}/healthz")
    assert r.status_code == 200 and r.text == "OK"
    # With the sandbox's own token, through its url (network none).
    assert info["url"] == f"{s.url}/proxy/{name}/"
    r = requests.get(info["url"] + "fastapi/healthz",
                     headers={"Authorization": f"Bearer {info['runtime_token']}"})
    assert r.status_code == 200 and r.text == "OK"
    # Without a token, or with another sandbox's, no.
    other = s.create()
    other_token = s.rpc("get_info", identity=other)["runtime_token"]
    r = requests.get(info["url"] + "healthz")
    assert r.status_code == 401
    r = requests.get(info["url"] + "healthz",
                     headers={"Authorization": f"Bearer {other_token}"})
    assert r.status_code == 401
    # Unknown identity: 404 (for the manager's token).
    r = s.get("/proxy/sandboxd-nope/healthz")
    assert r.status_code == 404
    # The agent's own answers pass through, status and all.
    r = s.post(f"/proxy/{name}/tools/run_shell_command", {"command": ""})
    assert r.status_code == 400
    r = s.get(f"/proxy/{name}/no/such/route")
    assert r.status_code == 404
    s.rpc("release", identity=name)
    r = s.get(f"/proxy/{name}/healthz")
    assert r.status_code == 409


@pytest.mark.parametrize("method", ["get_info", "release", "check_health",
                                    "get_status", "start", "stop",
                                    "list_tools", "call_tool"])
def test_unknown_identity_is_404(sandboxd, method):
    r = sandboxd.post("/" + method, {"identity": "sandboxd-nosuch",
                                     "tool_name": "run_shell_command"})
    assert r.status_code == 404
    assert r.json()["detail"] == f"Error in {method}: no sandbox sandboxd-nosuch"


def test_metrics(sandboxd):
    s = sandboxd
    name = s.create()
    s.shell(name, "true")
    s.post(f"/proxy/{name}/healthz")
    m = s.metrics()
    assert m['sandboxd_sandboxes{type="minimal",state="running"}'] == 1
    assert m['sandboxd_creates_total{type="minimal"}'] >= 1
    assert m['sandboxd_create_seconds_count{type="minimal"}'] >= 1
    assert m['sandboxd_create_seconds_bucket{type="minimal",le="+Inf"}'] >= 1
    assert m['sandboxd_proxied_requests_total{type="minimal"}'] >= 1
    assert 'sandboxd_pool_ready{type="minimal"}' in m
    s.rpc("release", identity=name)
    m = s.metrics()
    assert m['sandboxd_sandboxes{type="minimal",state="running"}'] == 0
    assert m['sandboxd_releases_total{type="minimal"}'] == 1
