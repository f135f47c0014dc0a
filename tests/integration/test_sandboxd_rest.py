"""Our /v1 REST routes, as supervisor/README.md shows them with curl."""
import requests

from sandboxd_fixtures import minimal_tag, start_sandboxd, wait_until  # noqa: F401


def test_sandbox_crud_and_agent_proxy(start_sandboxd):
    s = start_sandboxd(token="rest-token", env={"POOL_SIZE": "1"})
    wait_until(lambda: s.metrics()['sandboxd_pool_ready{type="minimal"}'] == 1,
               60, what="pool")
    r = s.post("/v1/sandboxes", {"type": "minimal",
                                 "session_ctx_id": "rest-1",
                                 "meta": {"who": "me"}})
    assert r.status_code == 201, r.text
    m = r.json()
    name = m["container_name"]
    assert m["state"] == "running"
    assert m["session_ctx_id"] == "rest-1"
    assert m["meta"] == {"who": "me", "session_ctx_id": "rest-1"}

    # pool=false always makes a new one.
    r = s.post("/v1/sandboxes", {"type": "minimal", "pool": False})
    assert r.status_code == 201
    other = r.json()["container_name"]

    listed = s.get("/v1/sandboxes").json()["sandboxes"]
    names = {x["container_name"]: x["state"] for x in listed}
    assert names[name] == "running" and names[other] == "running"
    assert s.get("/v1/sandboxes", params={"session_ctx_id": "rest-1"}).json()[
        "sandboxes"][0]["container_name"] == name
    # The pool made a warm one in place of the one taken: listed alone.
    wait_until(lambda: s.metrics()['sandboxd_pool_ready{type="minimal"}'] == 1,
               60, what="pool refilled")
    warm = s.get("/v1/sandboxes", params={"state": "warm"}).json()
    assert warm["total"] == 1
    assert [x["state"] for x in warm["sandboxes"]] == ["warm"]
    assert warm["sandboxes"][0]["container_name"] not in (name, other)

    r = s.get(f"/v1/sandboxes/{name}")
    assert r.status_code == 200
    assert r.json()["container_name"] == name

    # The agent, through the proxy, with our token or the sandbox's own.
    r = s.post(f"/v1/sandboxes/{name}/agent/tools/run_shell_command",
               {"command": "echo rest"})
    assert r.status_code == 200
    assert r.json()["content"][0]["text"] == "rest\n"
    r = requests.get(f"{s.url}/v1/sandboxes/{name}/agent/healthz",
                     headers={"Authorization": f"Bearer {m['runtime_token']}"})
    assert r.status_code == 200 and r.text == "OK"
    # ... but the sandbox's token opens nothing else.
    r = requests.get(f"{s.url}/v1/sandboxes/{name}",
                     headers={"Authorization": f"Bearer {m['runtime_token']}"})
    assert r.status_code == 401
    r = requests.get(f"{s.url}/v1/sandboxes/{other}/agent/healthz",
                     headers={"Authorization": f"Bearer {m['runtime_token']}"})
    assert r.status_code == 401

    r = s.delete(f"/v1/sandboxes/{name}")
    assert r.status_code == 200
    assert r.json()["state"] == "released"
    assert name not in s.containers()
    assert name not in {x["container_name"] for x in
                        s.get("/v1/sandboxes").json()["sandboxes"]}
    assert name in {x["container_name"] for x in s.get(
        "/v1/sandboxes", params={"all": "true"}).json()["sandboxes"]}


def test_list_filters_and_pages(start_sandboxd):
    s = start_sandboxd(env={"POOL_SIZE": "3"})
    wait_until(lambda: s.metrics()['sandboxd_pool_ready{type="minimal"}'] == 3,
               60, what="pool")
    made = [s.post("/v1/sandboxes", {"type": "minimal", "pool": False}
                   ).json()["container_name"] for _ in range(2)]
    gone = s.post("/v1/sandboxes", {"type": "minimal", "pool": False}
                  ).json()["container_name"]
    assert s.delete(f"/v1/sandboxes/{gone}").status_code == 200

    everything = s.get("/v1/sandboxes").json()
    assert everything["total"] == 5 and len(everything["sandboxes"]) == 5
    assert everything["offset"] == 0 and everything["limit"] is None
    order = [x["container_name"] for x in everything["sandboxes"]]

    running = s.get("/v1/sandboxes", params={"state": "running"}).json()
    assert running["total"] == 2
    assert {x["container_name"] for x in running["sandboxes"]} == set(made)
    assert s.get("/v1/sandboxes", params={"state": "warm", "type": "minimal"}
                 ).json()["total"] == 3
    assert s.get("/v1/sandboxes", params={"type": "base"}).json()["total"] == 0
    released = s.get("/v1/sandboxes", params={"state": "released"}).json()
    assert [x["container_name"] for x in released["sandboxes"]] == [gone]
    assert s.get("/v1/sandboxes", params={"all": "true"}).json()["total"] == 6

    pages = []
    for offset in range(0, 5, 2):
        page = s.get("/v1/sandboxes",
                     params={"offset": offset, "limit": 2}).json()
        assert page["total"] == 5
        assert page["offset"] == offset and page["limit"] == 2
        pages += [x["container_name"] for x in page["sandboxes"]]
    assert pages == order
    assert s.get("/v1/sandboxes", params={"offset": 99}).json()[
        "sandboxes"] == []

    for bad in ({"state": "sleeping"}, {"type": "no-such-type"},
                {"offset": "-1"}, {"offset": "x"}, {"limit": "1001"},
                {"limit": ""}, {"all": "maybe"}):
        r = s.get("/v1/sandboxes", params=bad)
        assert r.status_code == 400, (bad, r.text)
        assert r.headers["Content-Type"].startswith("application/json")
        assert list(bad)[0] in r.json()["detail"]


def test_metrics_text_format(start_sandboxd):
    s = start_sandboxd()
    r = s.get("/metrics")
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/plain")
    text = r.text
    for family in ("sandboxd_sandboxes", "sandboxd_pool_ready",
                   "sandboxd_creates_total", "sandboxd_create_failures_total",
                   "sandboxd_create_seconds", "sandboxd_proxied_requests_total"):
        assert f"# TYPE {family} " in text, family
    assert 'sandboxd_create_seconds_bucket{type="minimal",le="+Inf"} 0' in text
