"""sandboxd driven exactly the way the AgentScope Runtime SDK drives its
manager service: SandboxManager in remote mode (every method a POST of its
keyword arguments, the answer's "data"), SandboxHttpClient talking to the
sandbox directly at urljoin(url, "fastapi") with the runtime_token, and
SandboxService's connect / release built on them. The SDK itself is not
installable here (no PyPI), so its request logic is restated below, call
for call; only requests is used, as in the SDK.
"""
from urllib.parse import urljoin

import pytest
import requests

from sandboxd_fixtures import (scratch, minimal_tag, start_sandboxd,  # noqa: F401
                               wait_until, write_types)


class RemoteManager:
    """SandboxManager(base_url=..., bearer_token=...)."""

    def __init__(self, base_url, bearer_token=None):
        self.base_url = base_url.rstrip("/")
        self.http_session = requests.Session()
        if bearer_token:
            self.http_session.headers.update(
                {"Authorization": f"Bearer {bearer_token}"})
        self.calls = []

    def _make_request(self, method, endpoint, data):
        url = f"{self.base_url}/{endpoint.lstrip('/')}"
        self.calls.append(endpoint)
        if method.upper() == "GET":
            response = self.http_session.get(url, params=data)
        else:
            response = self.http_session.request(method, url, json=data)
        try:
            response.raise_for_status()
        except requests.exceptions.HTTPError as e:
            return {"data": f"Error: {e}"}
        return response.json()

    def _remote(self, method, **data):
        """The SDK's remote_wrapper: the arguments the caller passed, by
        parameter name, POSTed to /<method>; the answer's "data"."""
        return self._make_request("POST", "/" + method, data).get("data")

    # The manager's remote methods, called as Sandbox / SandboxService do.
    def create_from_pool(self, sandbox_type=None, meta=None):
        return self._remote("create_from_pool", sandbox_type=sandbox_type,
                            meta=meta)

    def release(self, identity):
        return self._remote("release", identity=identity)

    def get_info(self, identity):
        return self._remote("get_info", identity=identity)

    def check_health(self, identity):
        return self._remote("check_health", identity=identity)

    def list_tools(self, identity, tool_type=None):
        return self._remote("list_tools", identity=identity,
                            tool_type=tool_type)

    def call_tool(self, identity, tool_name=None, arguments=None):
        return self._remote("call_tool", identity=identity,
                            tool_name=tool_name, arguments=arguments)

    def get_session_mapping(self, session_ctx_id):
        return self._remote("get_session_mapping",
                            session_ctx_id=session_ctx_id)

    def list_session_keys(self):
        return self._remote("list_session_keys")

    def cleanup(self):
        return self._remote("cleanup")


class DirectClient:
    """SandboxHttpClient(model): straight to the sandbox."""

    def __init__(self, model):
        self.base_url = urljoin(model["url"], "fastapi")
        self.session = requests.Session()
        self.session.headers.update({
            "Content-Type": "application/json",
            "x-agentrun-session-id": "s" + model["session_id"],
            "x-agentscope-runtime-session-id": "s" + model["session_id"],
            "Authorization": f"Bearer {model['runtime_token']}",
        })
        self.timeout = model["timeout"] or 60

    def check_health(self):
        return self.session.get(f"{self.base_url}/healthz").status_code == 200

    def run_shell_command(self, command):
        r = self.session.post(f"{self.base_url}/tools/run_shell_command",
                              json={"command": command}, timeout=self.timeout)
        r.raise_for_status()
        return r.json()


def stdout(result):
    return [c["text"] for c in result["content"]
            if c.get("description") == "stdout"][0]


def sdk_flow(s, token, sandbox_type):
    mgr = RemoteManager(s.url, bearer_token=token)
    sid = mgr.create_from_pool(sandbox_type=sandbox_type,
                               meta={"session_ctx_id": "sdk-session"})
    assert isinstance(sid, str) and sid
    info = mgr.get_info(sid)
    assert info["container_name"] == sid
    assert info["session_ctx_id"] == "sdk-session"
    assert info["sandbox_type"] == sandbox_type
    assert "runtime-sandbox-minimal" in info["version"]
    assert mgr.check_health(sid) is True
    tools = mgr.list_tools(sid)
    assert "run_shell_command" in tools["generic"]
    result = mgr.call_tool(sid, "run_shell_command", {"command": "echo mgr"})
    assert stdout(result) == "mgr\n" and result["isError"] is False
    direct = DirectClient(info)
    assert direct.check_health()
    result = direct.run_shell_command("echo direct; pwd")
    assert stdout(result) == "direct\n/workspace\n"
    assert mgr.get_session_mapping("sdk-session") == [sid]
    assert mgr.list_session_keys() == ["sdk-session"]
    assert mgr.release(sid) is True
    assert mgr.get_session_mapping("sdk-session") == []
    # An unknown identity, as the SDK sees it: not data but "Error: ...".
    assert mgr.get_info(sid + "x").startswith("Error: 404")
    assert mgr.cleanup() is None
    # Every sandbox went; a pool may already be filling again.
    assert sid not in s.containers()
    assert all(st["state"] in ("creating", "warm") for st in
               s.get("/v1/sandboxes").json()["sandboxes"])
    assert mgr.calls == ["/create_from_pool", "/get_info", "/check_health",
                         "/list_tools", "/call_tool", "/get_session_mapping",
                         "/list_session_keys", "/release",
                         "/get_session_mapping", "/get_info", "/cleanup"]
    return info


def test_sdk_with_network_none(start_sandboxd):
    s = start_sandboxd(token="sdk-token", env={"POOL_SIZE": "1"})
    wait_until(lambda: s.metrics()['sandboxd_pool_ready{type="minimal"}'] == 1,
               60, what="pool")
    info = sdk_flow(s, "sdk-token", "minimal")
    # No network, so the url is sandboxd's proxy for that sandbox.
    assert info["url"] == f"{s.url}/proxy/{info['container_name']}/"
    assert info["ports"] == []


def test_sdk_with_a_bridge_type(start_sandboxd, scratch):
    d = scratch("sbxd-types-")
    types = write_types(d, {"minimal-net": {"from": "minimal",
                                            "network": "bridge"}})
    s = start_sandboxd(token="sdk-token", args=["--types", types],
                       env={"PORT_RANGE": "62300,62320"})
    info = sdk_flow(s, "sdk-token", "minimal-net")
    # Bridge: the url is the sandbox's own published port.
    assert info["url"] == f"http://127.0.0.1:{info['ports'][0]}"


def test_sandbox_service_connect_and_release(start_sandboxd):
    """SandboxService.connect / release over the manager routes."""
    s = start_sandboxd(token="svc", env={"POOL_SIZE": "1"})
    mgr = RemoteManager(s.url, bearer_token="svc")

    def connect(session_id, user_id, sandbox_types):
        ctx = session_id if user_id is None else f"{session_id}_{user_id}"
        env_ids = mgr.get_session_mapping(ctx)
        if env_ids:
            return [(i, mgr.get_info(i)["version"]) for i in env_ids]
        return [(mgr.create_from_pool(sandbox_type=t,
                                      meta={"session_ctx_id": ctx}), None)
                for t in sandbox_types]

    def release(session_id, user_id):
        ctx = session_id if user_id is None else f"{session_id}_{user_id}"
        for i in mgr.get_session_mapping(ctx) or []:
            mgr.release(i)
        return True

    first = connect("s1", "u1", ["minimal"])
    assert len(first) == 1
    again = connect("s1", "u1", ["minimal"])
    assert again[0][0] == first[0][0]
    assert "minimal" in again[0][1]
    assert release("s1", "u1")
    assert first[0][0] not in s.containers()
    # SandboxService.stop: every session's sandboxes released.
    connect("s2", None, ["minimal"])
    for ctx in mgr.list_session_keys():
        for i in mgr.get_session_mapping(ctx):
            mgr.release(i)
    assert mgr.list_session_keys() == []


@pytest.mark.parametrize("token", ["sdk-token"])
def test_sdk_sees_auth_failures_as_errors(start_sandboxd, token):
    s = start_sandboxd(token=token)
    mgr = RemoteManager(s.url, bearer_token="not-" + token)
    assert mgr.list_session_keys().startswith("Error: 401")
