"""Sessions: activity through sandboxd keeps a session alive, an idle one
has its sandboxes released; SandboxService's connect / release on /v1."""
import time

from sandboxd_fixtures import scratch, minimal_tag, start_sandboxd, wait_until  # noqa: F401


def test_idle_session_is_reaped(start_sandboxd):
    s = start_sandboxd(env={"HEARTBEAT_TIMEOUT": "3"})
    unbound = s.create()
    idle = s.rpc("create", sandbox_type="minimal",
                 meta={"session_ctx_id": "idle"})
    busy = s.rpc("create", sandbox_type="minimal",
                 meta={"session_ctx_id": "busy"})
    # Keep "busy" active through calls of several kinds for longer than
    # the timeout, while "idle" gets nothing.
    deadline = time.time() + 6
    calls = [lambda: s.shell(busy, "true"),
             lambda: s.rpc("get_info", identity=busy),
             lambda: s.get(f"/proxy/{busy}/healthz")]
    i = 0
    while time.time() < deadline:
        calls[i % len(calls)]()
        i += 1
        time.sleep(0.5)
    wait_until(lambda: s.rpc("get_info", identity=idle)["state"] == "released",
               30, what="idle session reaped")
    assert idle not in s.containers()
    assert s.rpc("get_info", identity=busy)["state"] == "running"
    # Sandboxes without a session are never reaped.
    assert s.rpc("get_info", identity=unbound)["state"] == "running"
    assert s.rpc("list_session_keys") == ["busy"]


def test_connect_reuses_and_creates(start_sandboxd):
    s = start_sandboxd(env={"POOL_SIZE": "1"})
    r = s.post("/v1/sessions/connect", {"session_id": "chat1",
                                        "user_id": "u1",
                                        "sandbox_types": ["minimal"]})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["session_ctx_id"] == "chat1_u1"
    assert len(body["sandboxes"]) == 1
    first = body["sandboxes"][0]["container_name"]
    assert body["sandboxes"][0]["session_ctx_id"] == "chat1_u1"
    # Connecting again reuses it.
    r = s.post("/v1/sessions/connect", {"session_id": "chat1",
                                        "user_id": "u1",
                                        "sandbox_types": ["minimal"]})
    assert [b["container_name"] for b in r.json()["sandboxes"]] == [first]
    # The spec's route sees the same session.
    assert s.rpc("get_session_mapping", session_ctx_id="chat1_u1") == [first]
    # A tool name picks its type; base is not built here, so an unknown
    # tool and a type without an image are errors with nothing left over.
    r = s.post("/v1/sessions/connect", {"session_id": "chat1",
                                        "user_id": "u1",
                                        "tools": ["no_such_tool"]})
    assert r.status_code == 400
    assert "no_such_tool" in r.json()["detail"]
    before = set(s.containers())
    r = s.post("/v1/sessions/release", {"session_id": "chat1",
                                        "user_id": "u1"})
    assert r.status_code == 200
    assert r.json() == {"session_ctx_id": "chat1_u1", "released": [first]}
    assert first not in s.containers()
    assert set(s.containers()) <= before
    assert s.rpc("get_session_mapping", session_ctx_id="chat1_u1") == []


def test_connect_is_all_or_nothing(start_sandboxd, scratch):
    from sandboxd_fixtures import write_types
    d = scratch("sbxd-types-")
    types = write_types(d, {"broken": {"image": "sandboxd-test/no-such-image:x"}})
    s = start_sandboxd(args=["--types", types])
    r = s.post("/v1/sessions/connect", {"session_id": "x",
                                        "sandbox_types": ["minimal", "broken"]})
    assert r.status_code == 500
    assert "no-such-image" in r.json()["detail"]
    assert "tools/build-image broken" in r.json()["detail"]
    wait_until(lambda: s.containers() == {}, 30, what="rollback")
    assert s.rpc("get_session_mapping", session_ctx_id="x") == []
