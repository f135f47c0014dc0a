"""E2B's SDKs (npm e2b 2.51 and @e2b/code-interpreter 2.8), unmodified,
against sandboxd and a real dockerd: E2B_API_URL at sandboxd's /e2b,
E2B_SANDBOX_URL at sandboxd itself, E2B_API_KEY its BEARER_TOKEN. The
SDK side is e2b_client.mjs, driven step by step from here; what the SDKs
never send (other SDK releases' routes, hostile requests) goes by plain
HTTP. One sandboxd with a warm pool serves most tests, to keep the run
short; the ones that need settings of their own start their own.
"""
import http.client
import json
import os
import shutil
import signal
import subprocess
import time

import pytest
import requests

from sandboxd_fixtures import (Sandboxd, base_tag, docker,  # noqa: F401
                               minimal_tag, start_sandboxd, wait_until)
from test_sandboxd_redis import redis, redis_env  # noqa: F401

NODE = "/usr/bin/node"
CLIENT = os.path.join(os.path.dirname(__file__), "helpers", "e2b_client.mjs")
KEY = "e2b_" + "0123456789abcdef0123456789abcdef01234567"
ENVD = "49983"
CI = "49999"


def run(s, steps, key=KEY, timeout=300):
    """Each step's outcome, in order: {"ok": ...} or {"error": ...}."""
    env = {**os.environ, "E2B_API_URL": s.url + "/e2b",
           "E2B_SANDBOX_URL": s.url, "E2B_API_KEY": key}
    p = subprocess.run([NODE, CLIENT, json.dumps(steps)], env=env,
                       capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"client failed: {p.stderr}\n{p.stdout}"
    lines = [json.loads(line) for line in p.stdout.splitlines() if line]
    assert len(lines) == len(steps), p.stdout + p.stderr
    return lines


def ok(line):
    assert "ok" in line, line
    return line["ok"]


def err(line):
    assert "error" in line, line
    return line["error"]


def api(s, method, path, body=None, key=KEY):
    return requests.request(method, s.url + "/e2b" + path, json=body,
                            headers={"X-API-Key": key}, timeout=120)


def routed(s, sandbox, port, path, method="GET", token=None, **kw):
    headers = {"E2b-Sandbox-Id": sandbox, "E2b-Sandbox-Port": port,
               **kw.pop("headers", {})}
    if token:
        headers["X-Access-Token"] = token
    return requests.request(method, s.url + path, headers=headers,
                            timeout=120, **kw)


@pytest.fixture(scope="session")
def ci_tag(base_tag):
    """The code-interpreter image of this tree's agent, under the base
    image's tag (its layers cached after the first build)."""
    subprocess.run([os.path.join(os.path.dirname(__file__), "..", "..",
                                 "tools", "build-image"), "--tag", base_tag,
                    "code-interpreter"], check=True, timeout=1800)
    return base_tag


@pytest.fixture(scope="module")
def e2b(ci_tag):
    """One sandboxd for the module: base and code interpreter sandboxes,
    two of each warm."""
    s = Sandboxd(ci_tag, token=KEY, env={
        "DEFAULT_SANDBOX_TYPE": "base,code-interpreter", "POOL_SIZE": "2"})
    yield s
    status = s.stop()
    s.remove_leftovers()
    shutil.rmtree(s.dir, ignore_errors=True)
    assert status == 0, s.read_log()[-4000:]


def test_create_info_list_timeout_kill(e2b):
    """The lifecycle of the SDK's Sandbox: create with metadata and a
    timeout, getInfo, list by metadata, setTimeout moving the end, kill,
    and not found afterwards."""
    tag = f"t{time.time_ns()}"
    a, info, metrics, statfs, listed, other, st, info2, killed, again, \
        gone = run(e2b, [
        {"op": "create", "opts": {"metadata": {"suite": tag, "k": "a b&c"},
                                  "timeoutMs": 120000}},
        {"op": "info"},
        {"op": "metrics"},
        {"op": "run", "cmd": "stat -f -c '%b %S' /"},
        {"op": "list", "query": {"metadata": {"suite": tag,
                                              "k": "a b&c"}}},
        {"op": "list", "query": {"metadata": {"suite": tag, "k": "x"}}},
        {"op": "set_timeout", "ms": 600000},
        {"op": "info"},
        {"op": "kill"},
        {"op": "kill"},
        {"op": "info"},
    ])
    sid = ok(a)["sandboxId"]
    assert ok(a)["secure"] is True  # v2 creates are always secure
    i = ok(info)
    assert i["sandboxId"] == sid and i["templateId"] == "base"
    assert i["metadata"] == {"suite": tag, "k": "a b&c"}
    assert i["state"] == "running" and i["envdVersion"] == "0.6.4"
    assert i["cpuCount"] == 1 and i["memoryMB"] == 1024
    assert i["lifecycle"] == {"onTimeout": "kill", "autoResume": False}

    def span(x):
        return (time.mktime(time.strptime(x["endAt"][:19],
                                          "%Y-%m-%dT%H:%M:%S")) -
                time.mktime(time.strptime(x["startedAt"][:19],
                                          "%Y-%m-%dT%H:%M:%S")))
    assert 118 <= span(i) <= 122, i
    [m] = ok(metrics)
    assert m["cpuCount"] == 1 and m["memTotal"] == 1024 << 20, m
    assert 0 < m["memUsed"] <= m["memTotal"]
    # The disk: its root file system, as statfs inside it has it.
    blocks, size = map(int, ok(statfs)["stdout"].split())
    assert m["diskTotal"] == blocks * size, (m, ok(statfs))
    assert 0 < m["diskUsed"] <= m["diskTotal"], m
    assert ok(listed) == [[sid]]
    assert ok(other) == [[]]
    assert ok(st) is None
    assert 598 <= span(ok(info2)) <= 605, ok(info2)
    assert ok(killed) is True and ok(again) is False
    assert err(gone)["name"] == "SandboxNotFoundError", gone
    assert sid not in e2b.containers()


def test_list_pages_order_and_filters(e2b):
    """Sandbox.list pages with X-Next-Token, newest first (or oldest with
    order=asc), filtered by state and template; the v1 list and a bad
    query are answered as E2B does."""
    tag = f"t{time.time_ns()}"
    steps = [{"op": "create", "as": f"s{i}",
              "opts": {"metadata": {"suite": tag}}} for i in range(3)]
    steps += [{"op": "list", "query": {"metadata": {"suite": tag}},
               "limit": 2},
              {"op": "pause", "sb": "s1"},
              {"op": "list", "query": {"metadata": {"suite": tag},
                                       "state": ["paused"]}},
              {"op": "list", "query": {"metadata": {"suite": tag},
                                       "state": ["running"]}},
              {"op": "list", "query": {"metadata": {"suite": tag},
                                       "template": "minimal"}}]
    lines = run(e2b, steps)
    ids = [ok(x)["sandboxId"] for x in lines[:3]]
    assert ok(lines[3]) == [[ids[2], ids[1]], [ids[0]]]
    assert ok(lines[4]) is True
    assert ok(lines[5]) == [[ids[1]]]
    assert ok(lines[6]) == [[ids[2], ids[0]]]
    assert ok(lines[7]) == [[]]
    q = "metadata=" + requests.utils.quote(f"suite={tag}")
    r = api(e2b, "GET", f"/v2/sandboxes?{q}&order=asc&limit=2")
    assert [x["sandboxID"] for x in r.json()] == ids[:2]
    r = api(e2b, "GET", f"/v2/sandboxes?{q}&order=asc&limit=2&nextToken="
            + requests.utils.quote(r.headers["X-Next-Token"]))
    assert [x["sandboxID"] for x in r.json()] == ids[2:]
    assert "X-Next-Token" not in r.headers
    # v1: running ones only, no pages.
    r = api(e2b, "GET", f"/sandboxes?{q}")
    assert sorted(x["sandboxID"] for x in r.json()) == sorted(
        [ids[0], ids[2]]), r.text
    for bad in ("limit=0", "limit=101", "state=gone", "order=up",
                "startedAfter=yesterday", "nextToken=x"):
        r = api(e2b, "GET", f"/v2/sandboxes?{bad}")
        assert r.status_code == 400 and r.json()["code"] == 400, (bad, r.text)
    for sid in ids:
        assert api(e2b, "DELETE", f"/sandboxes/{sid}").status_code == 204


def test_timeout_ends_a_sandbox(e2b):
    """A sandbox ends when its timeout passes, no heartbeat needed."""
    a, gone = run(e2b, [{"op": "create", "opts": {"timeoutMs": 1000}},
                        {"op": "wait_gone"}])
    assert ok(gone)["name"] == "SandboxNotFoundError", gone
    wait_until(lambda: ok(a)["sandboxId"] not in e2b.containers(), 60,
               what="the container to go")


def test_pause_connect_and_auto_pause(e2b):
    """pause freezes it (paused in getInfo and list, its envd 502 through
    the router, so isRunning is false), a second pause is false, connect
    resumes it; a sandbox created with onTimeout pause pauses at its
    timeout instead of ending."""
    lines = run(e2b, [
        {"op": "create"}, {"op": "metrics"},
        {"op": "pause"}, {"op": "pause"}, {"op": "info"},
        {"op": "is_running"}, {"op": "metrics"},
        {"op": "create", "as": "auto",
         "opts": {"timeoutMs": 1000, "lifecycle": {"onTimeout": "pause"}}},
    ])
    sid = ok(lines[0])["sandboxId"]
    assert ok(lines[2]) is True and ok(lines[3]) is False
    assert ok(lines[4])["state"] == "paused"
    assert e2b.containers()[sid] == "paused"
    assert ok(lines[5]) is False
    # Paused, its agent cannot answer: the disk as last seen.
    [before], [paused] = ok(lines[1]), ok(lines[6])
    assert paused["diskTotal"] == before["diskTotal"] > 0
    assert paused["diskUsed"] == before["diskUsed"] > 0
    connected, info = run(e2b, [
        {"op": "connect", "id": sid, "opts": {"timeoutMs": 60000}},
        {"op": "info", "id": sid}])
    assert ok(connected)["sandboxId"] == sid
    assert ok(info)["state"] == "running"
    assert e2b.containers()[sid] == "running"
    auto = ok(lines[7])["sandboxId"]
    wait_until(lambda: api(e2b, "GET", f"/sandboxes/{auto}").json()
               ["state"] == "paused", 60, what="the pause at the timeout")
    info = api(e2b, "GET", f"/sandboxes/{auto}").json()
    assert info["lifecycle"]["onTimeout"] == "pause"
    # The v1 routes: resume answers the sandbox (409 when running).
    r = api(e2b, "POST", f"/sandboxes/{auto}/resume", {"timeout": 60})
    assert r.status_code == 201 and r.json()["sandboxID"] == auto, r.text
    r = api(e2b, "POST", f"/sandboxes/{auto}/resume", {})
    assert r.status_code == 409 and r.json()["code"] == 409
    for x in (sid, auto):
        assert api(e2b, "DELETE", f"/sandboxes/{x}").status_code == 204


def test_clock_stands_still_however_paused(e2b):
    """Paused and resumed through sandboxd's own REST routes, an E2B
    sandbox's timeout stands still meanwhile and runs again after, from
    its last timeout: not ended at once for the time it spent paused."""
    sid = ok(run(e2b, [{"op": "create",
                        "opts": {"timeoutMs": 3000}}])[0])["sandboxId"]
    r = e2b.post(f"/v1/sandboxes/{sid}/pause")
    assert r.status_code == 200, r.text
    wait_until(lambda: api(e2b, "GET", f"/sandboxes/{sid}").json()
               ["state"] == "paused", 30, what="paused")
    time.sleep(4)       # past its end, were its clock running
    assert e2b.post(f"/v1/sandboxes/{sid}/resume").status_code == 200

    def restarted():
        r = api(e2b, "GET", f"/sandboxes/{sid}")
        assert r.status_code == 200, "ended at once: " + r.text
        end = time.mktime(time.strptime(r.json()["endAt"][:19],
                                        "%Y-%m-%dT%H:%M:%S")) - time.timezone
        return end > time.time()
    wait_until(restarted, 30, what="its clock to run again")
    gone = run(e2b, [{"op": "wait_gone", "id": sid}])[0]
    assert ok(gone)["name"] == "SandboxNotFoundError"


def test_errors_are_e2bs(e2b):
    """Each failure reaches the SDK as the class E2B's service gives:
    a wrong key, an unknown template, an unknown sandbox, and features
    sandboxd does not have (loudly, never a fake success)."""
    bad_key = run(e2b, [{"op": "create"}], key="e2b_" + "f" * 40)[0]
    assert err(bad_key)["name"] == "AuthenticationError", bad_key
    lines = run(e2b, [
        {"op": "create", "template": "no-such-template"},
        {"op": "info", "id": "sandboxd-0000000000000000"},
        {"op": "kill", "id": "sandboxd-0000000000000000"},
        {"op": "create", "opts": {"network": {"denyOut": ["0.0.0.0/0"]}}},
        {"op": "create", "opts": {"mcp": {"x": {}}}},
        {"op": "create", "opts": {"timeoutMs": 10 ** 9}},
    ])
    e = err(lines[0])
    assert e["statusCode"] == 404 and "no-such-template" in e["message"], e
    assert err(lines[1])["name"] == "SandboxNotFoundError"
    assert ok(lines[2]) is False
    # base has no network: nothing to deny or allow (the egress tests
    # have a type with one).
    e = err(lines[3])
    assert e["statusCode"] == 400 and "network" in e["message"], e
    assert "sandbox type 'base', which has no network" in e["message"], e
    e = err(lines[4])
    assert e["name"] == "SandboxError" and "mcp" in e["message"], e
    e = err(lines[5])
    assert e["statusCode"] == 400 and "timeout" in e["message"], e
    # envd's errors: a directory read as a file, a missing file; and a
    # sandbox killed under its SDK object: gone, as E2B's proxy says.
    lines = run(e2b, [
        {"op": "create"},
        {"op": "read", "path": "/home"},
        {"op": "read", "path": "/no/such/file"},
        {"op": "kill"},
        {"op": "run", "cmd": "true"},
        {"op": "read", "path": "/etc/hostname"},
        {"op": "is_running"},
    ])
    assert err(lines[1])["name"] == "InvalidArgumentError", lines[1]
    assert err(lines[2])["name"] == "FileNotFoundError", lines[2]
    assert err(lines[4])["name"] in ("SandboxNotFoundError",
                                     "TimeoutError"), lines[4]
    assert err(lines[5])["name"] == "TimeoutError", lines[5]
    assert ok(lines[6]) is False
    sid = ok(run(e2b, [{"op": "create"}])[0])["sandboxId"]
    for method, path, what in (
            ("POST", f"/sandboxes/{sid}/fork", "fork"),
            ("POST", f"/sandboxes/{sid}/snapshots", "snapshots"),
            ("GET", "/snapshots", "snapshots"),
            ("DELETE", "/templates/x", "templates"),
            ("GET", f"/v2/sandboxes/{sid}/logs", "logs")):
        r = api(e2b, method, path, {})
        assert r.status_code == 501, (path, r.text)
        assert r.json()["code"] == 501 and what in r.json()["message"]
    r = api(e2b, "PUT", f"/sandboxes/{sid}/network", {"allowOut": ["a.b"]})
    assert r.status_code == 400, r.text
    assert "'base', which has no network" in r.json()["message"], r.text
    r = api(e2b, "POST", f"/sandboxes/{sid}/pause", {"memory": False})
    assert r.status_code == 400 and "memory" in r.json()["message"]
    # A path that spells the prefix only once decoded names no route.
    c = http.client.HTTPConnection("127.0.0.1", e2b.port, timeout=60)
    c.request("GET", "/%65%32b/sandboxes", headers={"X-API-Key": KEY})
    r = c.getresponse()
    assert r.status == 404 and json.loads(r.read())["code"] == 404
    c.close()
    # The key is checked before anything else, with a fixed answer.
    for path in ("/sandboxes", "/no/such/route", f"/sandboxes/{sid}"):
        r = api(e2b, "GET", path, key="wrong")
        assert r.status_code == 401
        assert r.json() == {"code": 401, "message": "Invalid API key"}
    assert api(e2b, "DELETE", f"/sandboxes/{sid}").status_code == 204


def test_rate_limit_when_full(start_sandboxd):
    """MAX_SANDBOX_INSTANCES reached: E2B's rate limit error."""
    s = start_sandboxd(token=KEY, env={"MAX_SANDBOX_INSTANCES": "1"})
    first, second = run(s, [{"op": "create", "template": "minimal"},
                            {"op": "create", "template": "minimal",
                             "as": "b"}])
    ok(first)
    assert err(second)["name"] == "RateLimitError", second


def test_v1_forms(e2b):
    """The routes of other SDK releases (2.45, Python): POST /sandboxes
    with secure false gives no token and its traffic is open; connect
    and metrics in their v1 form."""
    r = api(e2b, "POST", "/sandboxes", {"templateID": "base", "timeout": 60,
                                        "secure": False,
                                        "allow_internet_access": True})
    assert r.status_code == 201, r.text
    sb = r.json()
    # A sandboxd with a BEARER_TOKEN never has an open sandbox.
    assert sb["envdAccessToken"] and sb["trafficAccessToken"]
    assert sb["envdVersion"] == "0.6.4" and sb["domain"] is None
    sid = sb["sandboxID"]
    r = api(e2b, "POST", f"/sandboxes/{sid}/connect", {"timeout": 300})
    assert r.status_code == 200 and r.json()["sandboxID"] == sid, r.text
    r = api(e2b, "GET", f"/sandboxes/{sid}/metrics")
    assert r.status_code == 200, r.text
    [m] = r.json()
    assert m["cpuCount"] == 1 and m["memTotal"] > 0 and m["memUsed"] > 0
    assert m["timestamp"].endswith("Z") and m["timestampUnix"] > 0
    r = api(e2b, "POST", f"/sandboxes/{sid}/refreshes", {"duration": 30})
    assert r.status_code == 204, r.text
    r = api(e2b, "POST", f"/sandboxes/{sid}/timeout", {})
    assert r.status_code == 400 and r.json()["code"] == 400
    assert api(e2b, "DELETE", f"/sandboxes/{sid}").status_code == 204


def test_router_hostile_requests(e2b):
    """The router before requests the SDK never sends: an unknown
    sandbox is E2B's 502, a sandbox's traffic needs its own token (not
    another sandbox's, not its traffic token on envd's port), a port
    other than envd's and the code interpreter's is closed, dot segments
    and credentials other than a user are refused, and no header of the
    client's names a user for it."""
    a, b = (api(e2b, "POST", "/v2/sandboxes", {"templateID": "base"}).json()
            for _ in range(2))
    r = routed(e2b, "sandboxd-0000000000000000", ENVD, "/health")
    assert r.status_code == 502
    assert r.json() == {"code": 502,
                        "message": "sandbox sandboxd-0000000000000000 not "
                                   "found"}
    r = routed(e2b, "<script>" + "x" * 500, ENVD, "/health")
    assert r.json() == {"code": 502, "message": "sandbox not found"}
    for token in (None, b["envdAccessToken"], a["trafficAccessToken"],
                  a["envdAccessToken"] + "0", KEY):
        r = routed(e2b, a["sandboxID"], ENVD, "/files?path=/etc/hostname",
                   token=token)
        assert r.status_code == 401 and r.json()["code"] == 401, token
        r = routed(e2b, a["sandboxID"], ENVD,
                   "/process.Process/List", method="POST", json={},
                   token=token)
        assert r.status_code == 401, token
    r = routed(e2b, a["sandboxID"], CI, "/contexts",
               headers={"E2B-Traffic-Access-Token": b["trafficAccessToken"]})
    assert r.status_code == 401
    r = routed(e2b, a["sandboxID"], "22", "/", token=a["envdAccessToken"])
    assert r.status_code == 502 and "port 22" in r.json()["message"]
    # Sent as is (requests would resolve the dots itself).
    c = http.client.HTTPConnection("127.0.0.1", e2b.port, timeout=60)
    c.request("GET", "/x/../../healthz", headers={
        "E2b-Sandbox-Id": a["sandboxID"], "E2b-Sandbox-Port": ENVD,
        "X-Access-Token": a["envdAccessToken"]})
    assert c.getresponse().status == 400
    c.close()
    r = routed(e2b, a["sandboxID"], ENVD, "/health",
               token=a["envdAccessToken"],
               headers={"Authorization": f"Bearer {KEY}"})
    assert r.status_code == 401 and "Basic" in r.json()["message"]
    for x in (a, b):
        api(e2b, "DELETE", f"/sandboxes/{x['sandboxID']}")
    r = routed(e2b, a["sandboxID"], ENVD, "/health",
               token=a["envdAccessToken"])
    assert r.status_code == 502, r.text


def test_state_survives_a_restart(start_sandboxd):
    """Metadata, the end and the paused state live in the state file: a
    restarted sandboxd shows them, and the timeout still ends it."""
    s = start_sandboxd(token=KEY, env={"AUTO_CLEANUP": "false"})
    a, b, info, _ = run(s, [
        {"op": "create", "template": "minimal",
         "opts": {"metadata": {"m": "1"}, "timeoutMs": 15000}},
        {"op": "create", "template": "minimal", "as": "p"},
        {"op": "info"}, {"op": "pause", "sb": "p"}])
    before = ok(info)
    s.signal(signal.SIGTERM)
    assert s.wait_exit() == 0
    s.start()
    after = ok(run(s, [{"op": "info", "id": ok(a)["sandboxId"]}])[0])
    assert after["metadata"] == {"m": "1"}
    assert after["endAt"] == before["endAt"]
    assert after["startedAt"] == before["startedAt"]
    p = api(s, "GET", f"/sandboxes/{ok(b)['sandboxId']}").json()
    assert p["state"] == "paused"
    gone = run(s, [{"op": "wait_gone", "id": ok(a)["sandboxId"]}],
               timeout=120)[0]
    assert ok(gone)["name"] == "SandboxNotFoundError"
    assert api(s, "DELETE", f"/sandboxes/{ok(b)['sandboxId']}"
               ).status_code == 204


def test_through_another_instance_on_redis(start_sandboxd, redis):
    """Two sandboxd on one Redis: a create through B takes A's warm
    sandbox; both list it and show its metadata, A (its owner) ends it at
    its timeout, and what only the owner can do says so through B."""
    env = {"POOL_SIZE": "1"}
    a = start_sandboxd(token=KEY, env=redis_env(redis, "rea-", **env))
    wait_until(lambda: "warm" in [x["state"] for x in a.get(
        "/v1/sandboxes").json()["sandboxes"]], 60, what="A's warm one")
    b = start_sandboxd(token=KEY, env=redis_env(redis, "reb-", **env))
    made, info_b = run(b, [
        {"op": "create", "template": "minimal",
         "opts": {"metadata": {"who": "b"}, "timeoutMs": 60000}},
        {"op": "info"}])
    sid = ok(made)["sandboxId"]
    assert sid.startswith("rea-"), sid     # A's, taken through B
    assert ok(info_b)["metadata"] == {"who": "b"}
    info_a, listed_a = run(a, [
        {"op": "info", "id": sid},
        {"op": "list", "query": {"metadata": {"who": "b"}}}])
    assert ok(info_a)["metadata"] == {"who": "b"}
    assert ok(info_a)["endAt"] == ok(info_b)["endAt"]
    assert ok(listed_a) == [[sid]]
    r = api(b, "POST", f"/sandboxes/{sid}/timeout", {"timeout": 1})
    assert r.status_code == 421 and "through that instance" in \
        r.json()["message"], r.text
    # The owner ends it at its timeout, whoever made it.
    assert api(a, "POST", f"/sandboxes/{sid}/timeout",
               {"timeout": 1}).status_code == 204
    gone = run(b, [{"op": "wait_gone", "id": sid}])[0]
    assert ok(gone)["name"] == "SandboxNotFoundError"
    wait_until(lambda: sid not in a.containers(), 60, what="A removes it")
    # And a kill through the other instance.
    other = ok(run(a, [{"op": "create", "template": "minimal"}])[0])
    assert ok(run(b, [{"op": "kill", "id": other["sandboxId"]}])[0]) is True
    wait_until(lambda: other["sandboxId"] not in a.containers(), 60,
               what="the kill through B")


# envd through the router: commands, files, PTY, watch.

def test_commands(e2b):
    """commands.run in the foreground with envs from the create and the
    call, cwd and exit codes; output streamed while the command runs; a
    background process listed, then killed; stdin sent and closed."""
    lines = run(e2b, [
        {"op": "create", "opts": {"envs": {"FROM_CREATE": "c1"}}},
        {"op": "run", "cmd": "echo $FROM_CREATE $FROM_CALL $(whoami); pwd",
         "opts": {"envs": {"FROM_CALL": "c2"}, "cwd": "/tmp"}},
        {"op": "run", "cmd": "echo out; echo err >&2; exit 3"},
        {"op": "run_streamed"},
        {"op": "background", "cmd": "sleep 600"},
        {"op": "ps"},
        {"op": "kill_pid"},
        {"op": "ps"},
        {"op": "stdin", "text": "hello\nworld\n"},
        {"op": "kill"},
    ])
    r = ok(lines[1])
    assert r["stdout"] == "c1 c2 user\n/tmp\n" and r["exitCode"] == 0, r
    r = ok(lines[2])
    assert r["thrown"] == "CommandExitError" and r["exitCode"] == 3, r
    assert r["stdout"] == "out\n" and r["stderr"] == "err\n"
    r = ok(lines[3])
    assert r["stdout"] == "first\nsecond\n", r
    assert r["seen"][0] == "first\n", r
    pid = ok(lines[4])["pid"]
    assert pid in ok(lines[5])
    k = ok(lines[6])
    assert k["killed"] is True and k["end"]["name"] == "CommandExitError", k
    assert pid not in ok(lines[7])
    assert ok(lines[8])["stdout"] == "hello\nworld\n"


def test_pty_with_resize(e2b):
    """A PTY session: a real terminal of 80x24, resized to 100x30."""
    _, p, _ = run(e2b, [{"op": "create"}, {"op": "pty"}, {"op": "kill"}])
    assert ok(p) == {"before": True, "after": True, "exitCode": 0,
                     "tty": True}, p


def test_files_watch_and_isolation(e2b):
    """Files byte-exact both ways (every byte value, 3 MiB), text, list and
    exists; a watch sees a write; two sandboxes see nothing of each
    other's files or processes."""
    lines = run(e2b, [
        {"op": "create", "as": "a"}, {"op": "create", "as": "b"},
        {"op": "write_bytes", "sb": "a", "path": "/home/user/blob",
         "size": 3 * 1024 * 1024 + 7, "seed": 7},
        {"op": "read_sha", "sb": "a", "path": "/home/user/blob"},
        {"op": "write", "sb": "a", "path": "d/e/t.txt", "text": "héllo\n"},
        {"op": "read", "sb": "a", "path": "/home/user/d/e/t.txt"},
        {"op": "list_dir", "sb": "a", "path": "/home/user/d/e"},
        {"op": "exists", "sb": "b", "path": "/home/user/blob"},
        {"op": "read", "sb": "b", "path": "/home/user/d/e/t.txt"},
        {"op": "watch", "sb": "a", "dir": "/home/user/w", "file": "new"},
        {"op": "background", "sb": "a", "cmd": "sleep 600"},
        {"op": "ps", "sb": "b"},
        {"op": "kill", "sb": "a"}, {"op": "kill", "sb": "b"},
    ])
    written = ok(lines[2])
    assert ok(lines[3]) == {"sha": written, "size": 3 * 1024 * 1024 + 7}
    assert ok(lines[5]) == "héllo\n"
    assert ok(lines[6]) == ["t.txt"]
    assert ok(lines[7]) is False
    assert err(lines[8])["name"] == "FileNotFoundError", lines[8]
    events = ok(lines[9])
    assert any(e["name"] == "new" for e in events), events
    assert ok(lines[10])["pid"] not in ok(lines[11])


def test_pause_keeps_a_running_process(e2b):
    """A paused sandbox's processes are frozen, not ended (Docker's
    freezer, test_pause_connect_and_auto_pause): after connect the same
    process goes on counting."""
    count = ("sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/n.tmp; "
             "mv /tmp/n.tmp /tmp/n; sleep 0.05; done'")
    lines = run(e2b, [
        {"op": "create"},
        {"op": "background", "cmd": count, "opts": {"timeoutMs": 0}},
        {"op": "run", "cmd": "sleep 0.5; cat /tmp/n"},
        {"op": "pause"},
    ])
    sid = ok(lines[0])["sandboxId"]
    pid = ok(lines[1])["pid"]
    before = int(ok(lines[2])["stdout"])
    lines = run(e2b, [
        {"op": "connect", "id": sid},
        {"op": "run", "cmd": "cat /tmp/n"},
        {"op": "run", "cmd": "sleep 0.5; cat /tmp/n"},
        {"op": "ps"},
        {"op": "kill"},
    ])
    thawed, later = (int(ok(x)["stdout"]) for x in lines[1:3])
    # Not started again (it would count from 1): the same process goes on.
    assert before <= thawed < later, (before, thawed, later)
    assert pid in ok(lines[3])


def test_signed_file_urls(e2b):
    """uploadUrl() and downloadUrl() of a secure sandbox are plain URLs
    (E2B_SANDBOX_URL/files, no sandbox header) that sandboxd routes by
    their signature; a changed signature is refused."""
    _, urls, _ = run(e2b, [
        {"op": "create"},
        {"op": "signed_urls", "path": "/home/user/up.txt", "text": "via url"},
        {"op": "kill"}])
    u = ok(urls)
    assert u["urls"] == ["/files", "/files"]
    assert u["upload"] == 200 and u["download"] == 200, u
    assert u["text"] == "via url"
    assert u["tampered"] == 401


def test_hostile_sandbox_traffic(e2b):
    """What a hostile user could try through the router: the agent's
    secrets through the files API (its environment, its memory) as the
    default user and as root, and envelopes the SDK never sends, each a
    clear error and nothing else."""
    made, env, mem, as_root = run(e2b, [
        {"op": "create"},
        {"op": "read", "path": "/proc/1/environ"},
        {"op": "read", "path": "/proc/1/mem"},
        {"op": "read", "path": "/proc/1/environ", "opts": {"user": "root"}},
    ])
    for line in (env, mem, as_root):
        e = err(line)
        assert "SECRET_TOKEN" not in e["message"], e
    sid = ok(made)["sandboxId"]
    info = api(e2b, "GET", f"/sandboxes/{sid}").json()
    token = info["envdAccessToken"]
    hdr = {"Content-Type": "application/connect+json",
           "Connect-Protocol-Version": "1"}
    # An envelope announcing 2 GiB, one far over the agent's limit, a
    # unary message as large: Connect's resource_exhausted, in the
    # stream's end or as the answer; an unknown method: unimplemented.
    for body in (b"\x00\x7f\xff\xff\xff{}",
                 b"\x00" + (8 << 20).to_bytes(4, "big") + b"x" * (8 << 20)):
        r = routed(e2b, sid, ENVD, "/process.Process/Start", method="POST",
                   token=token, headers=hdr, data=body)
        assert r.status_code == 200 and r.content[:1] == b"\x02", r.content
        assert json.loads(r.content[5:])["error"]["code"] == \
            "resource_exhausted", r.content
    r = routed(e2b, sid, ENVD, "/process.Process/List", method="POST",
               token=token, data=b"x" * (5 << 20),
               headers={"Content-Type": "application/json"})
    assert r.status_code == 429
    assert r.json()["code"] == "resource_exhausted", r.text
    r = routed(e2b, sid, ENVD, "/process.Process/NoSuch", method="POST",
               token=token, json={})
    assert r.status_code == 501 and r.json()["code"] == "unimplemented"
    # The sandbox still serves.
    assert ok(run(e2b, [{"op": "connect", "id": sid},
                        {"op": "run", "cmd": "echo alive"}])[1])[
                            "stdout"] == "alive\n"
    api(e2b, "DELETE", f"/sandboxes/{sid}")


def test_code_interpreter(e2b):
    """The code interpreter's Sandbox (template code-interpreter-v1):
    runCode's value, output streamed to its callback, the create's envs
    in the kernel, an error with its name, a figure as a PNG result, and
    contexts (their own state, listed, restarted, removed); envd serves
    the same sandbox."""
    lines = run(e2b, [
        {"op": "create", "ci": True, "opts": {"envs": {"FROM_CREATE": "k1"}}},
        {"op": "run_code", "code": "1 + 1"},
        {"op": "run_code", "code": "import os, sys\nprint('out')\n"
         "print('err', file=sys.stderr)\nos.environ['FROM_CREATE']"},
        {"op": "run_code", "code": "1 / 0"},
        {"op": "run_code", "code": "import matplotlib.pyplot as plt\n"
         "plt.plot([1, 2, 3])\nplt.show()"},
        {"op": "contexts"},
        {"op": "run", "cmd": "echo $FROM_CREATE; python3 -c 'import pandas'"},
        {"op": "kill"},
    ])
    assert ok(lines[0])["secure"] is True
    r = ok(lines[1])
    assert r["text"] == "2" and r["error"] is None, r
    assert isinstance(r["executionCount"], int)
    r = ok(lines[2])
    assert r["logs"] == {"stdout": ["out\n"], "stderr": ["err\n"]}, r
    assert r["streamed"] == ["out\n"] and r["text"] == "k1", r
    r = ok(lines[3])
    assert r["error"]["name"] == "ZeroDivisionError", r
    assert "division by zero" in r["error"]["value"]
    r = ok(lines[4])
    assert [x["png"] for x in r["results"]] == [True], r
    assert ok(lines[5]) == {"inCtx": "42", "outside": "NameError",
                            "listed": True, "afterRestart": "NameError",
                            "gone": False}
    assert ok(lines[6])["stdout"] == "k1\n"


def test_readme_example(e2b, tmp_path):
    """The README's example, as printed there, with its three variables."""
    with open(os.path.join(os.path.dirname(__file__), "..", "..",
                           "README.md")) as f:
        readme = f.read()
    section = readme[readme.index("### E2B's SDKs, unchanged"):]
    code = section[section.index("```js\n") + 6:]
    code = code[:code.index("```")]
    (tmp_path / "node_modules").symlink_to(os.path.join(
        os.path.dirname(__file__), "..", "node_modules"))
    (tmp_path / "example.mjs").write_text(code)
    env = {**os.environ, "E2B_API_URL": e2b.url + "/e2b",
           "E2B_SANDBOX_URL": e2b.url, "E2B_API_KEY": KEY}
    p = subprocess.run([NODE, str(tmp_path / "example.mjs")], env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout == "hi from user\n\nhello\n", p.stdout
