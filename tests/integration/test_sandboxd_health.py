"""Health: a dead pool sandbox is replaced, a dead sandbox in use is
reported unhealthy and left in place, also one whose container was
removed; a sandbox whose agent never answers is not created."""

from sandboxd_fixtures import (scratch, minimal_tag, start_sandboxd,  # noqa: F401
                               wait_until, write_types)


def test_killed_pool_sandbox_is_replaced(start_sandboxd):
    s = start_sandboxd(env={"POOL_SIZE": "1"})
    wait_until(lambda: s.metrics()['sandboxd_pool_ready{type="minimal"}'] == 1,
               60, what="pool")
    (victim,) = s.containers()
    s.kill_container(victim)
    wait_until(lambda: s.rpc("get_info", identity=victim)["state"] == "released",
               30, what="dead pool sandbox released")
    wait_until(lambda: s.metrics()['sandboxd_pool_ready{type="minimal"}'] == 1,
               60, what="replacement")
    live = s.containers()
    assert victim not in live
    assert list(live.values()) == ["running"]
    assert s.metrics()['sandboxd_health_failures_total{type="minimal"}'] >= 1


def test_killed_session_sandbox_is_reported_not_swapped(start_sandboxd):
    s = start_sandboxd()
    name = s.rpc("create", sandbox_type="minimal",
                 meta={"session_ctx_id": "h1"})
    s.kill_container(name)
    wait_until(lambda: s.rpc("get_info", identity=name)["state"] == "unhealthy",
               30, what="unhealthy")
    info = s.rpc("get_info", identity=name)
    assert "exited" in info.get("error", "")
    assert s.rpc("check_health", identity=name) is False
    # Still the session's one sandbox: nothing was swapped in.
    assert s.rpc("get_session_mapping", session_ctx_id="h1") == [name]
    assert s.rpc("get_status", identity=name) == "exited"
    # start brings it back.
    assert s.rpc("start", identity=name) is True
    assert s.rpc("get_info", identity=name)["state"] == "running"
    assert s.rpc("check_health", identity=name) is True


def test_removed_session_sandbox_is_reported(start_sandboxd):
    # Most rounds ask Docker only for our stopped containers: a removed
    # one is in no such list, and must still be noticed (its probes fail,
    # and the next full list does not have it).
    s = start_sandboxd()
    name = s.rpc("create", sandbox_type="minimal",
                 meta={"session_ctx_id": "h2"})
    s.remove_container(name)
    wait_until(lambda: s.rpc("get_info", identity=name)["state"] == "unhealthy",
               30, what="unhealthy")
    assert s.rpc("check_health", identity=name) is False
    assert s.rpc("get_session_mapping", session_ctx_id="h2") == [name]


def test_agent_that_never_answers_is_not_created(start_sandboxd, scratch):
    d = scratch("sbxd-types-")
    # An agent option it does not know: the agent exits at once.
    types = write_types(d, {"badargs": {"from": "minimal",
                                        "agent_args": ["--no-such-flag"]}})
    s = start_sandboxd(args=["--types", types])
    r = s.post("/v1/sandboxes", {"type": "badargs"})
    assert r.status_code == 502, r.text
    detail = r.json()["detail"]
    assert "exit" in detail and "--no-such-flag" in detail
    assert s.containers() == {}
    # The same through the spec's route: null, with the reason.
    r = s.post("/create", {"sandbox_type": "badargs"})
    assert r.json()["data"] is None and "exit" in r.json()["detail"]
    assert s.containers() == {}
    assert s.metrics()['sandboxd_create_failures_total{type="badargs"}'] == 2


def test_create_deadline(start_sandboxd, scratch):
    d = scratch("sbxd-types-")
    # Something that runs but never answers.
    types = write_types(d, {"deaf": {"from": "minimal",
                                     "entrypoint": ["/bin/sh", "-c", "exec sleep 600",
                                                    "deaf"]}})
    s = start_sandboxd(args=["--types", types],
                       env={"SANDBOXD_CREATE_TIMEOUT": "3"})
    r = s.post("/v1/sandboxes", {"type": "deaf"})
    assert r.status_code == 504, r.text
    assert "its agent was not healthy within 3 s" in r.json()["detail"]
    assert s.containers() == {}
