"""Bridge sandboxes: a host port from PORT_RANGE on 127.0.0.1 only, never
handed out twice even under concurrent creates, given back on release; an
exhausted range is a clear 503 with nothing half-made; the port answers
again after a stop and start and after sandboxd restarted, and not after
the release."""
import signal
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from sandboxd_fixtures import (BACKEND, scratch, minimal_tag,  # noqa: F401
                               start_sandboxd, wait_until, write_types)

LO, HI = 62200, 62202


@pytest.fixture
def bridged(start_sandboxd, scratch):
    types = write_types(scratch(), {"net": {"from": "minimal",
                                            "network": "bridge"}})
    return start_sandboxd(env={"PORT_RANGE": f"{LO},{HI}"},
                          args=["--types", types])


def test_concurrent_creates_get_distinct_ports(bridged):
    s = bridged

    def create(_):
        return s.post("/v1/sandboxes", {"type": "net"})

    with ThreadPoolExecutor(5) as ex:
        answers = list(ex.map(create, range(5)))
    ok = [r.json() for r in answers if r.status_code == 201]
    refused = [r for r in answers if r.status_code != 201]
    assert len(ok) == HI - LO + 1
    for r in refused:
        assert r.status_code == 503
        assert "PORT_RANGE" in r.json()["detail"]
    ports = [m["ports"][0] for m in ok]
    assert len(set(ports)) == len(ports)
    assert all(LO <= p <= HI for p in ports)
    assert len(s.containers()) == len(ok)
    assert s.metrics()["sandboxd_ports_in_use"] == len(ok)

    for m in ok:
        # Published on loopback only.
        if BACKEND == "docker":
            binding = s.inspect(m["container_name"])["HostConfig"][
                "PortBindings"]
            assert binding == {"8000/tcp": [{
                "HostIp": "127.0.0.1", "HostPort": str(m["ports"][0])}]}
        # The url works directly, as the SDK uses it: url + "/fastapi".
        assert m["url"] == f"http://127.0.0.1:{m['ports'][0]}"
        r = requests.post(m["url"] + "/fastapi/tools/run_shell_command",
                          json={"command": "echo direct"},
                          headers={"Authorization": f"Bearer {m['runtime_token']}"})
        assert r.status_code == 200
        assert r.json()["content"][0]["text"] == "direct\n"

    # The spec's route answers null when no port is left.
    r = s.post("/create", {"sandbox_type": "net"})
    assert r.json()["data"] is None and "PORT_RANGE" in r.json()["detail"]

    # A release gives its port back.
    gone = ok[0]
    assert s.delete("/v1/sandboxes/" + gone["container_name"]).status_code == 200
    assert s.metrics()["sandboxd_ports_in_use"] == len(ok) - 1
    r = s.post("/v1/sandboxes", {"type": "net"})
    assert r.status_code == 201
    assert r.json()["ports"] == [gone["ports"][0]]


def test_network_none_publishes_nothing(bridged):
    s = bridged
    name = s.create()
    if BACKEND == "crun":
        # A namespace of its own, no path to one sandboxd made.
        [ns] = [n for n in s.crun_config(name)["linux"]["namespaces"]
                if n["type"] == "network"]
        assert "path" not in ns
    else:
        c = s.inspect(name)
        assert c["HostConfig"]["NetworkMode"] == "none"
        assert not c["HostConfig"]["PortBindings"]
    assert s.metrics()["sandboxd_ports_in_use"] == 0


def direct(m, command):
    """A shell command through the sandbox's url, as the SDK calls it."""
    r = requests.post(m["url"] + "/fastapi/tools/run_shell_command",
                      json={"command": command}, timeout=60,
                      headers={"Authorization": f"Bearer {m['runtime_token']}"})
    assert r.status_code == 200, r.text
    return r.json()["content"][0]["text"]


def test_the_published_port_outlives_a_stop_and_a_restart(start_sandboxd,
                                                          scratch):
    types = write_types(scratch(), {"net": {"from": "minimal",
                                            "network": "bridge"}})
    s = start_sandboxd(env={"PORT_RANGE": f"{LO},{HI}",
                            "AUTO_CLEANUP": "false"},
                       args=["--types", types])
    m = s.post("/v1/sandboxes", {"type": "net"}).json()
    # Large enough to go through more than one read on each side.
    assert len(direct(m, "head -c 300000 /dev/zero | tr '\\0' x")) == 300000
    name = m["container_name"]
    assert s.rpc("stop", identity=name) is True
    assert s.rpc("start", identity=name) is True
    assert direct(m, "echo again") == "again\n"
    s.signal(signal.SIGTERM)
    assert s.wait_exit() == 0
    s.start()
    wait_until(lambda: s.rpc("get_info", identity=name)["state"] == "running",
               60, what="taken back", logs=[s])
    assert direct(m, "echo back") == "back\n"
    assert s.rpc("release", identity=name) is True
    with pytest.raises(requests.ConnectionError):
        requests.get(m["url"] + "/fastapi/healthz", timeout=10)
