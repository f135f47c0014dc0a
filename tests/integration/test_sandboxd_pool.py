"""Warm pools: filled at start, a take answers from the pool, the pool
refills in the background; one pool per type of DEFAULT_SANDBOX_TYPE."""
import json
import os
import signal
import time

from sandboxd_fixtures import (BACKEND, docker_only, scratch,  # noqa: F401
                               minimal_tag, start_sandboxd, wait_until,
                               write_types)


def pool_ready(s, type_name="minimal"):
    return s.metrics()[f'sandboxd_pool_ready{{type="{type_name}"}}']


def test_pool_fills_takes_and_refills(start_sandboxd):
    s = start_sandboxd(env={"POOL_SIZE": "2"})
    wait_until(lambda: pool_ready(s) == 2, 60, what="pool of 2")
    warm = {n for n, st in s.containers().items() if st == "running"}
    assert len(warm) == 2
    for n in warm:
        assert s.rpc("get_info", identity=n)["state"] == "warm"

    name = s.rpc("create_from_pool", sandbox_type="minimal",
                 meta={"session_ctx_id": "p1"})
    # The take is one of the warm ones, not a new container.
    assert name in warm
    info = s.rpc("get_info", identity=name)
    assert info["state"] == "running"
    assert info["session_ctx_id"] == "p1"
    assert s.shell(name, "echo ok")["stdout"] == "ok\n"
    m = s.metrics()
    assert m['sandboxd_pool_takes_total{type="minimal"}'] == 1
    # Gauges /metrics reads from the pools' configuration and the sessions.
    assert m['sandboxd_pool_target{type="minimal"}'] == 2
    assert m["sandboxd_sessions"] == 1

    # Refilled in the background back to 2 warm ones.
    wait_until(lambda: pool_ready(s) == 2, 60, what="refill")
    assert len(s.containers()) == 3

    # Releasing the taken one does not shrink the pool.
    s.rpc("release", identity=name)
    assert pool_ready(s) == 2


def test_pool_empty_falls_back_to_create(start_sandboxd):
    s = start_sandboxd(env={"POOL_SIZE": "1", "SANDBOXD_POOL_PARALLEL": "1"})
    wait_until(lambda: pool_ready(s) == 1, 60, what="pool of 1")
    a = s.rpc("create_from_pool", sandbox_type="minimal")
    b = s.rpc("create_from_pool", sandbox_type="minimal")
    assert a and b and a != b
    assert s.rpc("get_info", identity=b)["state"] == "running"
    assert s.metrics()['sandboxd_pool_misses_total{type="minimal"}'] >= 1


def test_one_pool_per_type(start_sandboxd, scratch):
    d = scratch("sbxd-types-")
    types = write_types(d, {"tiny": {"from": "minimal", "memory": "64M"}})
    s = start_sandboxd(env={"POOL_SIZE": "1",
                            "DEFAULT_SANDBOX_TYPE": "minimal,tiny"},
                       args=["--types", types])
    wait_until(lambda: pool_ready(s, "minimal") == 1 and
               pool_ready(s, "tiny") == 1, 60, what="two pools")
    name = s.rpc("create_from_pool", sandbox_type="tiny")
    info = s.rpc("get_info", identity=name)
    assert info["sandbox_type"] == "tiny"
    if BACKEND == "crun":
        memory = s.crun_config(name)["linux"]["resources"]["memory"]["limit"]
    else:
        memory = s.inspect(name)["HostConfig"]["Memory"]
    assert memory == 64 * 1024 * 1024
    # A type without a pool is created on demand.
    base_like = s.rpc("create_from_pool", sandbox_type="minimal")
    assert s.rpc("get_info", identity=base_like)["sandbox_type"] == "minimal"


def test_pool_respects_the_instance_limit(start_sandboxd):
    s = start_sandboxd(env={"POOL_SIZE": "3", "MAX_SANDBOX_INSTANCES": "2"})
    wait_until(lambda: pool_ready(s) == 2, 60, what="pool capped at 2")
    assert len(s.containers()) == 2
    # Taking one leaves room for nothing new: the pool stays at 1.
    s.rpc("create_from_pool", sandbox_type="minimal")
    r = s.post("/create", {"sandbox_type": "minimal"})
    assert r.status_code == 200
    assert r.json()["data"] is None
    assert "MAX_SANDBOX_INSTANCES" in r.json()["detail"]
    assert len(s.containers()) == 2


@docker_only
def test_sandboxes_run_without_dockers_healthcheck(start_sandboxd):
    # The images keep a HEALTHCHECK for a plain `docker run`; sandboxd
    # probes its agents itself, so its containers turn Docker's off (an
    # exec in every container every 15 s, for nothing).
    s = start_sandboxd(env={"POOL_SIZE": "1"})
    wait_until(lambda: pool_ready(s) == 1, 60, what="pool of 1")
    name = s.rpc("create_from_pool", sandbox_type="minimal")
    c = s.inspect(name)
    assert c["Config"]["Healthcheck"]["Test"] == ["NONE"]
    assert "Health" not in c["State"]


def test_pool_sandbox_saved_while_creating_comes_back_warm(start_sandboxd):
    """sandboxd killed within the state file's write delay of a pool
    sandbox becoming ready (its record still says "creating"): restarted,
    it takes the sandbox back into the pool, not as a running sandbox
    nobody holds, and makes no extra one."""
    s = start_sandboxd(env={"POOL_SIZE": "1"})
    wait_until(lambda: pool_ready(s) == 1, 60, what="pool of 1")
    [name] = s.containers()
    s.signal(signal.SIGKILL)
    s.wait_exit(10)
    path = os.path.join(s.state_dir, "state.json")
    with open(path) as f:
        state = json.load(f)
    [rec] = [r for r in state["sandboxes"] if r["name"] == name]
    # Killed this soon, the file may well still say "creating"; make sure.
    assert rec["for_pool"] is True, rec
    assert rec["state"] in ("creating", "warm"), rec
    rec["state"] = "creating"
    with open(path, "w") as f:
        json.dump(state, f)
    s.start()
    wait_until(lambda: pool_ready(s) == 1, 60, what="pool of 1 again")
    assert s.rpc("get_info", identity=name)["state"] == "warm"
    time.sleep(1)
    assert list(s.containers()) == [name], s.read_log()
