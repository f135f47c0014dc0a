"""sandboxd driven the way the AgentScope Runtime SDK's async side drives
its manager service: SandboxManager's remote_wrapper_async methods (a POST
to /<method> of the call's arguments, named after the parameters the
method declares; the answer's "data"), BaseSandboxAsync on top of them, and
SandboxService handing out async sandboxes. The SDK cannot be installed
here (no PyPI), so its request logic is restated below, call for call,
with httpx.AsyncClient as the SDK's (Debian's python3-httpx).

SDK_REMOTE_METHODS is every SandboxManager method marked remote
(remote_wrapper / remote_wrapper_async), with the parameters it declares,
as in agentscope-ai/agentscope-runtime at commit
0237730bf54203351422bcebc30237060232738b,
src/agentscope_runtime/sandbox/manager/sandbox_manager.py (a later version
of that file, with the watcher of released records, declares the same
ones). A method a new SDK version adds goes into that list; the route walk
below then fails until sandboxd serves it.
"""
import asyncio

import httpx
import pytest
import requests

from conftest import result_texts
from sandboxd_fixtures import base_tag, minimal_tag, start_sandboxd  # noqa: F401

# name -> the parameters it declares after self. Most async methods are
# declared (*args, **kwargs), so remote_wrapper_async names the values of
# a positional call "args" and "kwargs": release_async(id) sends
# {"args": id}.
SDK_REMOTE_METHODS = {
    "cleanup": [],
    "cleanup_async": ["args", "kwargs"],
    "create_from_pool": ["sandbox_type", "meta"],
    "create_from_pool_async": ["args", "kwargs"],
    "create": ["sandbox_type", "mount_dir", "storage_path", "environment",
               "meta"],
    "create_async": ["args", "kwargs"],
    "release": ["identity"],
    "release_async": ["args", "kwargs"],
    "start": ["identity"],
    "start_async": ["args", "kwargs"],
    "stop": ["identity"],
    "stop_async": ["args", "kwargs"],
    "get_status": ["identity"],
    "get_status_async": ["args", "kwargs"],
    "get_info": ["identity"],
    "get_info_async": ["args", "kwargs"],
    "check_health": ["identity"],
    "check_health_async": ["identity"],
    "list_tools": ["identity", "tool_type", "kwargs"],
    "list_tools_async": ["identity", "tool_type", "kwargs"],
    "call_tool": ["identity", "tool_name", "arguments"],
    "call_tool_async": ["identity", "tool_name", "arguments"],
    "add_mcp_servers": ["identity", "server_configs", "overwrite"],
    "add_mcp_servers_async": ["identity", "server_configs", "overwrite"],
    "get_session_mapping": ["session_ctx_id"],
    "get_session_mapping_async": ["args", "kwargs"],
    "list_session_keys": [],
    "list_session_keys_async": ["args", "kwargs"],
}
# Every one is remote_wrapper's default, POST; the async ones are the
# names ending in _async.
SDK_TIMEOUT = 180


class RemoteManager:
    """SandboxManager(base_url=..., bearer_token=...): requests for the
    sync methods, httpx.AsyncClient for the async ones."""

    def __init__(self, base_url, bearer_token=None):
        self.base_url = base_url.rstrip("/")
        headers = ({"Authorization": f"Bearer {bearer_token}"}
                   if bearer_token else {})
        self.http_session = requests.Session()
        self.http_session.headers.update(headers)
        self.httpx_client = httpx.AsyncClient(timeout=SDK_TIMEOUT,
                                              headers=headers)
        self.calls = []         # (endpoint, status)

    @staticmethod
    def _error(response, e):
        parts = [f"HTTP {response.status_code} Error: {e}"]
        try:
            parts.append(f"Server Detail: {response.json()['detail']}")
        except (ValueError, KeyError):
            parts.append(f"Server Response: {response.text}")
        return {"data": "Error: " + " | ".join(parts)}

    def _make_request(self, method, endpoint, data):
        url = f"{self.base_url}/{endpoint.lstrip('/')}"
        response = self.http_session.request(method, url, json=data,
                                             timeout=SDK_TIMEOUT)
        self.calls.append((endpoint, response.status_code))
        try:
            response.raise_for_status()
        except requests.exceptions.HTTPError as e:
            return self._error(response, e)
        return response.json()

    async def _make_request_async(self, method, endpoint, data):
        url = f"{self.base_url}/{endpoint.lstrip('/')}"
        response = await self.httpx_client.request(method, url, json=data)
        self.calls.append((endpoint, response.status_code))
        try:
            response.raise_for_status()
        except httpx.HTTPStatusError as e:
            return self._error(response, e)
        return response.json()

    def __getattr__(self, name):
        """The remote method: the caller's positional values named after
        the declared parameters, its keywords as given, POSTed to /name."""
        if name not in SDK_REMOTE_METHODS:
            raise AttributeError(name)
        params = SDK_REMOTE_METHODS[name]

        def data_of(args, kwargs):
            data = dict(zip(params, args))
            data.update(kwargs)
            return data

        if name.endswith("_async"):
            async def remote_async(*args, **kwargs):
                return (await self._make_request_async(
                    "POST", "/" + name, data_of(args, kwargs))).get("data")
            return remote_async

        def remote(*args, **kwargs):
            return self._make_request("POST", "/" + name,
                                      data_of(args, kwargs)).get("data")
        return remote

    async def aclose(self):
        await self.httpx_client.aclose()
        self.http_session.close()


class BaseSandboxAsync:
    """BaseSandboxAsync(base_url=..., bearer_token=...): its type is
    SandboxType.BASE_ASYNC, "base_async"."""

    def __init__(self, sandbox_id=None, base_url=None, bearer_token=None,
                 sandbox_type="base_async"):
        self.sandbox_id = sandbox_id
        self.sandbox_type = sandbox_type
        self.manager_api = RemoteManager(base_url, bearer_token)

    async def __aenter__(self):
        if self.sandbox_id is None:
            self.sandbox_id = await self.manager_api.create_from_pool_async(
                sandbox_type=self.sandbox_type)
            if self.sandbox_id is None:
                raise RuntimeError("No sandbox available.")
        return self

    async def __aexit__(self, exc_type, exc_value, traceback):
        await self.manager_api.release_async(self.sandbox_id)

    async def get_info_async(self):
        return await self.manager_api.get_info_async(self.sandbox_id)

    async def list_tools_async(self, tool_type=None):
        return await self.manager_api.list_tools_async(
            self.sandbox_id, tool_type=tool_type)

    async def call_tool_async(self, name, arguments=None):
        return await self.manager_api.call_tool_async(
            self.sandbox_id, name, arguments or {})

    async def run_ipython_cell(self, code):
        return await self.call_tool_async("run_ipython_cell", {"code": code})

    async def run_shell_command(self, command):
        return await self.call_tool_async("run_shell_command",
                                          {"command": command})


class SandboxService:
    """SandboxService(base_url=..., bearer_token=...): async start and
    stop, connect handing out the registered class of each type asked for
    (BaseSandboxAsync for "base_async")."""

    def __init__(self, base_url, bearer_token):
        self.base_url = base_url
        self.bearer_token = bearer_token
        self.manager_api = None

    async def start(self):
        self.manager_api = RemoteManager(self.base_url, self.bearer_token)

    async def stop(self):
        for ctx in self.manager_api.list_session_keys() or []:
            for env_id in self.manager_api.get_session_mapping(ctx) or []:
                self.manager_api.release(env_id)
        await self.manager_api.aclose()
        self.manager_api = None

    def connect(self, session_id, user_id=None, sandbox_types=None):
        ctx = session_id if user_id is None else f"{session_id}_{user_id}"
        env_ids = self.manager_api.get_session_mapping(ctx)
        if env_ids:
            # The SDK finds each one's type in its image name; the first
            # type value found there wins ("base" for the base image).
            return [(i, "base" if "runtime-sandbox-base" in
                     self.manager_api.get_info(i)["version"] else None)
                    for i in env_ids]
        boxes = []
        for t in sandbox_types:
            box_id = self.manager_api.create_from_pool(
                sandbox_type=t, meta={"session_ctx_id": ctx})
            assert t == "base_async"
            boxes.append(BaseSandboxAsync(sandbox_id=box_id,
                                          base_url=self.base_url,
                                          bearer_token=self.bearer_token))
        return boxes


def stdout(result):
    return result_texts(result)["stdout"]


def test_every_remote_method_of_the_sdk_has_a_route(start_sandboxd):
    """Each remote method called as its users call it (positionally where
    they do): every one answers 200 {"data": ...}, none 404."""
    s = start_sandboxd(token="walk", env={"POOL_SIZE": "1"})
    mgr = RemoteManager(s.url, bearer_token="walk")
    meta = {"session_ctx_id": "walk"}

    async def walk():
        a = mgr.create("minimal", meta=meta)
        b = await mgr.create_async(sandbox_type="minimal", meta=meta)
        c = mgr.create_from_pool("minimal", meta)
        d = await mgr.create_from_pool_async("minimal", meta)
        names = [a, b, c, d]
        assert all(isinstance(n, str) and n.startswith("sandboxd-")
                   for n in names), names
        assert len(set(names)) == 4
        assert mgr.get_info(a)["container_name"] == a
        assert (await mgr.get_info_async(b))["container_name"] == b
        assert mgr.get_status(a) == "running"
        assert await mgr.get_status_async(c) == "running"
        assert mgr.check_health(a) is True
        assert await mgr.check_health_async(d) is True
        assert "run_shell_command" in mgr.list_tools(a)["generic"]
        assert list(await mgr.list_tools_async(b, tool_type="generic")) \
            == ["generic"]
        res = mgr.call_tool(a, "run_shell_command", {"command": "echo s"})
        assert stdout(res) == "s\n"
        res = await mgr.call_tool_async(b, "run_shell_command",
                                        {"command": "echo a"})
        assert stdout(res) == "a\n"
        assert mgr.add_mcp_servers(a, {"mcpServers": {}}) == "OK"
        assert await mgr.add_mcp_servers_async(b, {"mcpServers": {}},
                                               True) == "OK"
        assert sorted(mgr.get_session_mapping("walk")) == sorted(names)
        assert sorted(await mgr.get_session_mapping_async("walk")) == \
            sorted(names)
        assert mgr.list_session_keys() == ["walk"]
        assert await mgr.list_session_keys_async() == ["walk"]
        assert mgr.stop(a) is True
        assert await mgr.stop_async(a) is True
        assert mgr.start(a) is True
        assert await mgr.start_async(a) is True
        assert mgr.release(b) is True
        assert await mgr.release_async(c) is True
        assert await mgr.cleanup_async() is None
        assert mgr.cleanup() is None
        await mgr.aclose()
        return names

    names = asyncio.run(walk())
    assert {endpoint[1:] for endpoint, _ in mgr.calls} == \
        set(SDK_REMOTE_METHODS)
    assert all(status == 200 for _, status in mgr.calls), mgr.calls
    assert not set(names) & set(s.containers())
    # Only a method's own names are routes.
    for path in ("/health_async", "/proxy_async/x", "/call_tool_async_async",
                 "/_async", "/create_from_pool_asyn", "/release_sync"):
        assert s.post(path, {}).status_code == 404, path


def test_base_sandbox_async_through_sandboxd(start_sandboxd, base_tag):
    """async with BaseSandboxAsync(base_url=...): IPython keeps its state
    between calls, commands run, the tools list, and leaving the block
    releases the sandbox: no container is left."""
    s = start_sandboxd(tag=base_tag, token="tok")

    async def use():
        async with BaseSandboxAsync(base_url=s.url, bearer_token="tok") as box:
            name = box.sandbox_id
            assert isinstance(name, str) and name.startswith("sandboxd-"), \
                name
            assert name in s.containers()
            info = await box.get_info_async()
            assert info["container_name"] == name
            assert info["sandbox_type"] == "base"
            assert "runtime-sandbox-base" in info["version"]
            first = await box.run_ipython_cell("x = 41\nimport os")
            assert first["isError"] is False, first
            res = await box.run_ipython_cell("print(x + 1, os.getcwd())")
            assert stdout(res) == "42 /workspace\n", res
            res = await box.run_shell_command("echo hi; id -u")
            assert stdout(res) == "hi\n1000\n", res
            tools = await box.list_tools_async()
            assert set(tools["generic"]) == {"run_ipython_cell",
                                             "run_shell_command"}
        await box.manager_api.aclose()
        return name, box.manager_api.calls

    name, calls = asyncio.run(use())
    assert name not in s.containers()
    assert s.rpc("get_info", identity=name)["state"] == "released"
    assert [c for c, _ in calls] == [
        "/create_from_pool_async", "/get_info_async", "/call_tool_async",
        "/call_tool_async", "/call_tool_async", "/list_tools_async",
        "/release_async"]
    assert all(status == 200 for _, status in calls), calls


def test_sandbox_service_with_async_sandboxes(start_sandboxd, base_tag):
    """SandboxService.start / connect / stop handing out BaseSandboxAsync:
    a session's sandbox is found again by a second connect, keeps its
    IPython state, and stop releases every one."""
    s = start_sandboxd(tag=base_tag, token="svc")

    async def serve():
        service = SandboxService(s.url, "svc")
        await service.start()
        [box] = service.connect("chat", "ann", sandbox_types=["base_async"])
        res = await box.run_ipython_cell("counter = 1")
        assert res["isError"] is False, res
        again = service.connect("chat", "ann", sandbox_types=["base_async"])
        assert again == [(box.sandbox_id, "base")]
        res = await box.run_ipython_cell("counter += 1\nprint(counter)")
        assert stdout(res) == "2\n", res
        res = await box.run_shell_command("echo from-service")
        assert stdout(res) == "from-service\n"
        assert box.sandbox_id in s.containers()
        await box.manager_api.aclose()
        await service.stop()
        return box.sandbox_id

    name = asyncio.run(serve())
    assert name not in s.containers()
    assert s.rpc("list_session_keys") == []


@pytest.mark.parametrize("body", [{"args": "x", "identity": "x"},
                                  {"args": "x", "kwargs": "y",
                                   "identity": "x"}])
def test_a_value_given_twice_is_refused(start_sandboxd, body):
    s = start_sandboxd()
    r = s.post("/release_async", body)
    assert r.status_code == 400
    assert r.json() == {"detail": "Error in release_async: identity given "
                        "twice, by name and as \"args\""}
