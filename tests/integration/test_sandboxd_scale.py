"""Fifty sandboxes asked for at once: every one is created, healthy and
distinct, and all of them go again."""
import os
from concurrent.futures import ThreadPoolExecutor

from sandboxd_fixtures import minimal_tag, start_sandboxd  # noqa: F401

N = 50


def test_fifty_concurrent_creates(start_sandboxd):
    s = start_sandboxd(env={"SANDBOXD_CREATE_TIMEOUT": "300"})

    def create(i):
        return s.post("/create", {"sandbox_type": "minimal",
                                  "meta": {"session_ctx_id": f"c{i % 5}"}},
                      timeout=600)

    with ThreadPoolExecutor(N) as ex:
        answers = list(ex.map(create, range(N)))
    names = [r.json()["data"] for r in answers]
    assert all(r.status_code == 200 for r in answers)
    assert None not in names, [r.json() for r in answers if r.json()["data"] is None]
    assert len(set(names)) == N
    live = s.containers(all_states=False)
    assert set(names) <= set(live)

    with ThreadPoolExecutor(10) as ex:
        health = list(ex.map(
            lambda n: s.rpc("check_health", identity=n), names))
    assert health == [True] * N
    infos = [s.rpc("get_info", identity=n) for n in names]
    assert len({i["runtime_token"] for i in infos}) == N
    assert len({i["mount_dir"] for i in infos}) == N
    for i in range(5):
        assert len(s.rpc("get_session_mapping", session_ctx_id=f"c{i}")) == 10
    m = s.metrics()
    assert m['sandboxd_sandboxes{type="minimal",state="running"}'] == N
    assert m['sandboxd_create_seconds_count{type="minimal"}'] == N

    assert s.post("/cleanup", {}, timeout=600).status_code == 200
    assert s.containers() == {}
    assert os.listdir(os.path.join(s.state_dir, "workspaces")) == []
