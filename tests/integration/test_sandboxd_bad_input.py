"""Bad input gets a clear error with the right status, and nothing is left
half-made: no container, no workspace, no port."""
import os

import requests

from sandboxd_fixtures import minimal_tag, sandboxd, start_sandboxd  # noqa: F401


def workspaces(s):
    d = os.path.join(s.state_dir, "workspaces")
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def test_unknown_type(sandboxd):
    s = sandboxd
    for route in ("/create", "/create_from_pool"):
        r = s.post(route, {"sandbox_type": "no-such-type"})
        assert r.status_code == 400
        assert r.json()["detail"] == (f"Error in {route[1:]}: unknown sandbox "
                                      "type 'no-such-type'")
    r = s.post("/v1/sandboxes", {"type": "no-such-type"})
    assert r.status_code == 400
    assert "no-such-type" in r.json()["detail"]
    assert s.containers() == {}
    assert workspaces(s) == []


def test_malformed_json(sandboxd):
    s = sandboxd
    for route in ("/create", "/get_info", "/v1/sandboxes",
                  "/v1/sessions/connect"):
        r = s.post(route, data=b"{not json",
                   headers={"Content-Type": "application/json"})
        assert r.status_code == 400, route
        assert "JSON" in r.json()["detail"]
    r = s.post("/create", data=b"[1, 2]")
    assert r.status_code == 400
    r = s.post("/create", {"sandbox_type": 7})
    assert r.status_code == 400
    assert "sandbox_type" in r.json()["detail"]
    r = s.post("/create", {"sandbox_type": "minimal", "meta": "nope"})
    assert r.status_code == 400
    r = s.post("/create", {"sandbox_type": "minimal",
                           "environment": {"SECRET_TOKEN": "mine"}})
    assert r.status_code == 400
    r = s.post("/create", {"sandbox_type": "minimal",
                           "environment": {"A": {"nested": 1}}})
    assert r.status_code == 400
    r = s.post("/get_info", {})
    assert r.status_code == 400 and "identity" in r.json()["detail"]
    assert s.containers() == {}
    assert workspaces(s) == []


def test_mount_dir_outside(sandboxd):
    s = sandboxd
    r = s.post("/create", {"sandbox_type": "minimal", "mount_dir": "/etc"})
    assert r.status_code == 400
    assert r.json()["detail"].startswith("Error in create: mount_dir '/etc' "
                                         "is outside")
    r = s.post("/v1/sandboxes", {"type": "minimal", "mount_dir": "/"})
    assert r.status_code == 400
    assert s.containers() == {}


def test_instance_limit(start_sandboxd):
    s = start_sandboxd(env={"MAX_SANDBOX_INSTANCES": "2"})
    a = s.create()
    s.create()
    r = s.post("/v1/sandboxes", {"type": "minimal"})
    assert r.status_code == 503
    assert "MAX_SANDBOX_INSTANCES=2" in r.json()["detail"]
    r = s.post("/create_from_pool", {"sandbox_type": "minimal"})
    assert r.status_code == 200
    assert r.json()["data"] is None
    assert "MAX_SANDBOX_INSTANCES" in r.json()["detail"]
    assert len(s.containers()) == 2
    assert len(workspaces(s)) == 2
    s.rpc("release", identity=a)
    assert s.create()


def test_environment_reaches_the_sandbox(sandboxd):
    s = sandboxd
    name = s.create(environment={"GREETING": "hi there", "N": 3})
    out = s.shell(name, 'echo "$GREETING/$N"; env | grep -c SECRET_TOKEN')
    assert out["stdout"] == "hi there/3\n0\n"


def test_unknown_routes_and_methods(sandboxd):
    s = sandboxd
    assert s.get("/no-such-route").status_code == 404
    assert s.get("/create").status_code == 405
    assert s.get("/v1/sandboxes/sandboxd-nope").status_code == 404
    assert s.delete("/v1/sandboxes/sandboxd-nope").status_code == 404
    r = requests.put(s.url + "/v1/sandboxes/x/y")
    assert r.status_code == 404
