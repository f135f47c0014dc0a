"""Several sandboxd on one Redis (REDIS_ENABLED): two instances on one
dockerd, with distinct container prefixes and state directories, stand in
for two hosts. A real redis-server (Debian's) is started per test on a
loopback port in a temporary directory and stopped by its pid. Clients are
the SDK's request logic of test_sandboxd_sdk (RemoteManager, DirectClient).
"""
import concurrent.futures
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
from urllib.parse import parse_qs, urlparse

import pytest
import requests

import ws_client
from conftest import SANDBOXD_BIN, free_port, relay
from sandboxd_fixtures import (BACKEND, IMAGE_STORE, scratch,  # noqa: F401
                               minimal_tag, start_sandboxd, wait_until,
                               write_types)
from test_sandboxd_sdk import RemoteManager, DirectClient, stdout
from test_agent_desktop_web import full_update, rfb_handshake, try_to_drive

# Installed by make deps (tools/install-deps); missing, the tests fail.
REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
# What the instances sign and seal with (SANDBOXD_REDIS_SECRET).
SECRET = "test-secret-0123456789abcdef-0123456789abcdef"


class Redis:
    """redis-server on 127.0.0.1:<free port>, no persistence."""

    def __init__(self, password=None):
        self.dir = tempfile.mkdtemp(prefix="sbxd-redis-", dir="/tmp")
        self.port = free_port()
        self.password = password
        self.proc = None
        self.start()

    def start(self):
        args = [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no", "--dir", self.dir,
                "--daemonize", "no"]
        if self.password:
            args += ["--requirepass", self.password]
        self.log = open(os.path.join(self.dir, "redis.log"), "ab")
        self.proc = subprocess.Popen(args, stdout=self.log,
                                     stderr=subprocess.STDOUT)
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), 0.2):
                    return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError("redis-server did not start")

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.log.close()

    def cli(self, *args, lines=False):
        """The answer's words, or its lines (values may be empty)."""
        cmd = ["redis-cli", "-p", str(self.port)]
        if self.password:
            cmd += ["--no-auth-warning", "-a", self.password]
        out = subprocess.run(cmd + list(args), capture_output=True,
                             text=True, check=True).stdout
        return out.splitlines() if lines else out.split()

    def hgetall(self, key):
        out = self.cli("HGETALL", key, lines=True)
        return dict(zip(out[0::2], out[1::2]))


@pytest.fixture
def redis():
    r = Redis()
    yield r
    r.stop()
    shutil.rmtree(r.dir, ignore_errors=True)


def redis_env(redis, prefix, **more):
    env = {"REDIS_ENABLED": "true", "REDIS_PORT": str(redis.port),
           "CONTAINER_PREFIX_KEY": prefix,
           "SANDBOXD_REDIS_PREFIX": f"t{redis.port}:",
           "SANDBOXD_REDIS_SECRET": SECRET}
    env.update({k: str(v) for k, v in more.items()})
    return env


@pytest.fixture
def pair(start_sandboxd, redis):
    """Factory: pair(**env) -> (A, B) on one Redis."""
    def make(**env):
        a = start_sandboxd(env=redis_env(redis, "rda-", **env))
        b = start_sandboxd(env=redis_env(redis, "rdb-", **env))
        return a, b
    return make


def names_in_redis(redis):
    return set(redis.cli("SMEMBERS", f"t{redis.port}:sandboxes"))


def known(s, name):
    return s.post("/get_info", {"identity": name}).status_code == 200


def test_unannounced_record_is_looked_up(pair, redis):
    """B is asked about a sandbox before A's announcement reached it (a
    client whose create A just answered, on the next request through the
    balancer): B reads the record from Redis instead of answering 404. B
    is made to forget A's record (moved away and announced as by A, which
    takes no notice of its own announcements), then the record comes back
    unannounced, so B can learn of it only by looking."""
    a, b = pair()
    sid = a.create(meta={"session_ctx_id": "s-look"})
    p = f"t{redis.port}:"
    wait_until(lambda: known(b, sid), 10, what="B knows A's sandbox")

    def hide():
        redis.cli("RENAME", f"{p}sb:{sid}", f"{p}away")
        redis.cli("PUBLISH", f"{p}events", f"{a.instance} {sid}")
        wait_until(lambda: not known(b, sid), 10, what="B forgets it")
        redis.cli("RENAME", f"{p}away", f"{p}sb:{sid}")

    hide()
    assert not known(b, sid + "x")         # a name Redis has not: 404
    info = b.rpc("get_info", identity=sid)
    assert info["container_name"] == sid
    assert info["session_ctx_id"] == "s-look"
    assert b.shell(sid, "echo looked-up")["stdout"] == "looked-up\n"
    # A session's mapping likewise: its bindings are read from Redis (the
    # SDK's connect asks for it and would otherwise create a second one).
    hide()
    assert RemoteManager(b.url).get_session_mapping("s-look") == [sid]
    assert RemoteManager(b.url).get_session_mapping("s-none") == []


def test_create_on_a_call_on_b(pair, redis):
    a, b = pair()
    mgr_a, mgr_b = RemoteManager(a.url), RemoteManager(b.url)
    sid = mgr_a.create_from_pool(sandbox_type="minimal",
                                 meta={"session_ctx_id": "s-ab"})
    assert sid.startswith("rda-")
    # B answers at once: the name was announced before A handed it out.
    info = mgr_b.get_info(sid)
    assert info["container_name"] == sid
    assert info["session_ctx_id"] == "s-ab"
    assert mgr_b.check_health(sid) is True
    result = mgr_b.call_tool(sid, "run_shell_command",
                             {"command": "echo via-b; pwd"})
    assert stdout(result) == "via-b\n/workspace\n"
    assert "run_shell_command" in mgr_b.list_tools(sid)["generic"]
    # B's url for it is B's own proxy, which relays to A's agent.
    assert info["url"] == f"{b.url}/proxy/{sid}/"
    assert stdout(DirectClient(info).run_shell_command("echo proxied")) == \
        "proxied\n"
    r = b.get(f"/v1/sandboxes/{sid}")
    assert r.status_code == 200 and r.json()["container_name"] == sid
    assert mgr_b.get_session_mapping("s-ab") == [sid]
    assert "s-ab" in mgr_b.list_session_keys()
    assert sid in names_in_redis(redis)
    # Released through B: A, its owner, removes the container.
    assert mgr_b.release(sid) is True
    wait_until(lambda: sid not in a.containers(), 30, what="A removes it")
    wait_until(lambda: sid not in names_in_redis(redis), 10,
               what="record removed")
    wait_until(lambda: not known(b, sid), 10, what="B forgets it")
    assert mgr_a.get_session_mapping("s-ab") == []
    assert mgr_b.get_session_mapping("s-ab") == []


def test_connect_through_b_reuses_a_sandbox(pair):
    a, b = pair()

    def connect(base_url, session_id, user_id):
        """SandboxService(base_url=...).connect(session_id, user_id)."""
        mgr = RemoteManager(base_url)
        ctx = f"{session_id}_{user_id}"
        ids = mgr.get_session_mapping(ctx)
        if ids:
            return [(i, mgr.get_info(i)["version"]) for i in ids]
        return [(mgr.create_from_pool(sandbox_type="minimal",
                                      meta={"session_ctx_id": ctx}), None)]

    first = connect(a.url, "sess", "user")
    again = connect(b.url, "sess", "user")
    assert again[0][0] == first[0][0]
    assert "runtime-sandbox-minimal" in again[0][1]
    assert len(a.containers()) + len(b.containers()) == 1


def test_concurrent_pool_takes_never_hand_out_one_twice(pair, redis):
    a, b = pair(POOL_SIZE=4, SANDBOXD_POOL_PARALLEL=4)
    pool_key = f"t{redis.port}:container_pool:minimal"
    wait_until(lambda: len(redis.cli("LRANGE", pool_key, "0", "-1")) == 8,
               90, interval=0.2, what="both pools full", logs=[a, b])
    # The pools waited for Redis at start instead of failing a create on
    # it (and, once, not coming back: CI saw a pool stay empty).
    for s in (a, b):
        assert "unreachable" not in s.read_log()

    def take(i):
        s = a if i % 2 == 0 else b
        r = s.post("/create_from_pool",
                   {"sandbox_type": "minimal",
                    "meta": {"session_ctx_id": f"c{i}"}})
        assert r.status_code == 200, r.text
        return r.json()["data"]

    with concurrent.futures.ThreadPoolExecutor(40) as ex:
        names = list(ex.map(take, range(40)))
    assert all(names), names
    assert len(set(names)) == 40
    # Each one is bound to the one session that took it.
    for i, name in enumerate(names):
        info = RemoteManager(b.url).get_info(name)
        assert info["session_ctx_id"] == f"c{i}", (name, info)


class SlowStart:
    """A TCP relay to Redis whose first connection is held `delay` s before
    anything passes: sandboxd is ready before its Redis is."""

    def __init__(self, port, delay):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.target, self.delay, self.first = port, delay, True
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            delay, self.first = (self.delay if self.first else 0), False
            threading.Thread(target=self.relay, args=(client, delay),
                             daemon=True).start()

    def relay(self, client, delay):
        time.sleep(delay)
        try:
            upstream = socket.create_connection(("127.0.0.1", self.target))
        except OSError:         # Redis stopped at the test's end
            client.close()
            return
        threading.Thread(target=relay, args=(upstream, client),
                         daemon=True).start()
        relay(client, upstream)

    def close(self):
        self.sock.close()


def test_pool_waits_for_redis_at_start(start_sandboxd, redis):
    """Ready before its Redis connection is: the pool's first creates wait
    for the connection instead of failing on it (CI once saw a pool that,
    failed so, stayed empty)."""
    slow = SlowStart(redis.port, 1.5)
    try:
        a = start_sandboxd(env=redis_env(redis, "rda-", POOL_SIZE=1,
                                         REDIS_PORT=slow.port))
        wait_until(lambda: a.metrics()['sandboxd_pool_ready{type="minimal"}']
                   == 1, 30, what="the pool warm", logs=[a])
        assert "unreachable" not in a.read_log()
    finally:
        slow.close()


def test_instance_limit_counts_every_instance(pair, redis):
    a, b = pair(MAX_SANDBOX_INSTANCES=3)

    def create(i):
        s = a if i % 2 == 0 else b
        r = s.post("/v1/sandboxes", {"type": "minimal"})
        return r.status_code, r.json()

    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        answers = list(ex.map(create, range(8)))
    made = [body["container_name"] for status, body in answers
            if status == 201]
    refused = [body["detail"] for status, body in answers if status == 503]
    assert len(made) == 3, answers
    assert len(refused) == 5
    assert all("MAX_SANDBOX_INSTANCES=3" in d for d in refused), refused
    assert len(redis.cli("HKEYS", f"t{redis.port}:live")) == 3
    # A place freed on one instance is free for the other.
    assert RemoteManager(b.url).release(made[0]) is True
    wait_until(lambda: len(redis.cli("HKEYS", f"t{redis.port}:live")) == 2,
               30, what="place given back")
    r = (a if made[0].startswith("rdb-") else b).post(
        "/v1/sandboxes", {"type": "minimal"})
    assert r.status_code == 201, r.text


def test_owner_killed_then_restarted(pair, redis):
    a, b = pair(POOL_SIZE=1)
    mgr_b = RemoteManager(b.url)
    sid = a.create(meta={"session_ctx_id": "s-kill"})
    # Killed once its pool sandbox is warm and written to its state file
    # (50 ms after): a container killed before it has a record is
    # removed at restart, as it should be, and would not be "before".
    wait_until(lambda: a.metrics()['sandboxd_pool_ready{type="minimal"}']
               == 1, 60, what="A's pool sandbox warm", logs=[a, b])
    time.sleep(0.5)
    a.signal(signal.SIGKILL)
    a.wait_exit(10)
    a.expected_exit = -signal.SIGKILL
    # A's host (its Docker) is up: B still reaches its agent.
    result = mgr_b.call_tool(sid, "run_shell_command", {"command": "echo alive"})
    assert stdout(result) == "alive\n"
    assert mgr_b.get_session_mapping("s-kill") == [sid]
    before = set(a.containers())
    # A again, same state directory: it takes its containers back.
    a.start()
    a.expected_exit = 0
    wait_until(lambda: len([n for n in names_in_redis(redis)
                            if n.startswith("rda-")]) >= 2, 30,
               what="A's records")
    assert stdout(mgr_b.call_tool(sid, "run_shell_command",
                                  {"command": "echo again"})) == "again\n"
    # No duplicate, no leak: Redis and Docker agree on A's sandboxes.
    time.sleep(1)
    mine = {n for n in names_in_redis(redis) if n.startswith("rda-")}
    assert mine == set(a.containers(all_states=False)), (mine,
                                                        a.containers())
    assert before <= set(a.containers())
    pool_key = f"t{redis.port}:container_pool:minimal"
    try:
        wait_until(lambda: len(redis.cli("LRANGE", pool_key, "0", "-1")) == 2,
                   60, what="pools refilled")
    except AssertionError:
        raise AssertionError(str(redis.cli("LRANGE", pool_key, "0", "-1"))
                             + a.read_log()[-3000:] + b.read_log()[-2000:])
    assert mgr_b.release(sid) is True
    wait_until(lambda: sid not in a.containers(), 30, what="released by A")


def test_redis_restart_mid_run(pair, redis):
    a, b = pair()
    mgr_a, mgr_b = RemoteManager(a.url), RemoteManager(b.url)
    sa = a.create(meta={"session_ctx_id": "r1"})
    sb = b.create(meta={"session_ctx_id": "r2"})
    assert mgr_b.get_info(sa)["container_name"] == sa
    redis.stop()
    # Known sandboxes keep working from memory, on both instances.
    assert stdout(mgr_b.call_tool(sa, "run_shell_command",
                                  {"command": "echo down"})) == "down\n"
    assert stdout(mgr_a.call_tool(sb, "run_shell_command",
                                  {"command": "echo down"})) == "down\n"
    # New ones cannot be made: 503 and why.
    r = a.post("/v1/sandboxes", {"type": "minimal"})
    assert r.status_code == 503, r.text
    assert "Redis" in r.json()["detail"]
    assert a.post("/create", {"sandbox_type": "minimal"}).json()["data"] is None
    # Redis comes back empty (no persistence): both re-publish.
    redis.start()
    wait_until(lambda: names_in_redis(redis) == {sa, sb}, 30,
               what="records re-published")
    wait_until(lambda: a.post("/v1/sandboxes", {"type": "minimal"})
               .status_code == 201, 30, what="creates work again")
    assert mgr_a.get_session_mapping("r2") == [sb]
    assert stdout(mgr_a.call_tool(sb, "run_shell_command",
                                  {"command": "echo up"})) == "up\n"


def test_heartbeat_expiry_reaped_exactly_once(pair, redis):
    a, b = pair(HEARTBEAT_TIMEOUT=8)
    plan = [(a, "hb-a"), (b, "hb-b"), (a, "hb-both"), (b, "hb-both")]
    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        names = list(ex.map(
            lambda p: p[0].create(meta={"session_ctx_id": p[1]}), plan))
    wait_until(lambda: not (set(a.containers()) | set(b.containers())),
               90, interval=0.2, what="every session reaped")
    logs = a.read_log() + b.read_log()
    for session in ("hb-a", "hb-b", "hb-both"):
        assert f"session {session} idle" in logs
    # One instance reaped each; its owner released each once.
    for name in names:
        assert logs.count(f"sandbox {name} released") == 1, name
    assert names_in_redis(redis) == set()


def test_paused_sandbox_is_not_reaped_and_others_see_it_paused(pair, redis):
    """The reaper of whichever instance holds the lock leaves a paused
    sandbox of an idle session alone; the other instance sees it paused
    and refuses calls to it as its owner does."""
    a, b = pair(HEARTBEAT_TIMEOUT=5)
    paused = a.create(meta={"session_ctx_id": "rp"})
    r = a.post(f"/v1/sandboxes/{paused}/pause")
    assert r.status_code == 200, r.text
    idle = a.create(meta={"session_ctx_id": "ri"})
    wait_until(lambda: idle not in a.containers(), 60, interval=0.2,
               what="the idle session reaped", logs=[a, b])
    wait_until(lambda: b.post("/get_info", {"identity": paused}).json()
               ["data"]["state"] == "paused", 30, what="B sees it paused")
    assert a.containers()[paused] == "paused"
    assert b.rpc("get_status", identity=paused) == "paused"
    r = b.post("/call_tool", {"identity": paused,
                              "tool_name": "run_shell_command",
                              "arguments": {"command": "true"}})
    assert r.status_code == 409 and "paused" in r.json()["detail"], r.text
    r = b.post(f"/v1/sandboxes/{paused}/resume")
    assert r.status_code == 409 and "resume it there" in r.json()["detail"]
    assert a.post(f"/v1/sandboxes/{paused}/resume").status_code == 200


@pytest.mark.parametrize("env,expect", [
    ({"REDIS_PASSWORD": "wrong"}, "REDIS_USER/REDIS_PASSWORD"),
    ({"REDIS_PASSWORD": "right", "REDIS_USER": "nobody"},
     "REDIS_USER/REDIS_PASSWORD"),
    ({"REDIS_PASSWORD": "right", "REDIS_DB": "99999"}, "REDIS_DB"),
    ({"REDIS_PORT": "1"}, "REDIS_SERVER"),
    ({"REDIS_SERVER": "unix:/nonexistent/redis.sock"}, "REDIS_SERVER"),
])
def test_bad_redis_settings_stop_start_up(env, expect, scratch, minimal_tag):
    r = Redis(password="right")
    try:
        d = scratch("sbxd-")
        e = {"PATH": os.environ["PATH"], "REDIS_ENABLED": "true",
             "REDIS_PORT": str(r.port), "SANDBOXD_STATE_DIR": d + "/st",
             "RUNTIME_SANDBOX_IMAGE_TAG": minimal_tag,
             "DEFAULT_SANDBOX_TYPE": "minimal", "POOL_SIZE": "0",
             "SANDBOXD_REDIS_SECRET": SECRET}
        e.update(env)
        p = subprocess.run([SANDBOXD_BIN, "--port", str(free_port())],
                           env=e, cwd=d, capture_output=True, text=True,
                           timeout=30)
        assert p.returncode == 2, p.stderr
        assert p.stderr.startswith("sandboxd: " + expect), p.stderr
        assert "right" not in p.stderr
    finally:
        r.stop()
        shutil.rmtree(r.dir, ignore_errors=True)


def test_host_ports_claimed_across_instances(pair, redis, scratch):
    """Two instances on one host share PORT_RANGE: a port one of them
    holds (REDIS_PORT_KEY) is never the other's, even before a container
    binds it; released, it is free for either again."""
    types = write_types(scratch(), {"net": {"from": "minimal",
                                            "network": "bridge"}})
    lo, hi = 62210, 62212
    a, b = pair(PORT_RANGE=f"{lo},{hi}", SANDBOXD_TYPES=types)
    key = f"t{redis.port}:occupied_ports:127.0.0.1"
    # As if another instance had just claimed lo and not yet started
    # its container: nothing is bound there, only Redis knows.
    redis.cli("SADD", key, str(lo))
    made = b.post("/v1/sandboxes", {"type": "net"})
    assert made.status_code == 201, made.text
    assert made.json()["ports"] == [lo + 1], made.json()
    assert sorted(map(int, redis.cli("SMEMBERS", key))) == [lo, lo + 1]
    on_a = a.post("/v1/sandboxes", {"type": "net"})
    assert on_a.status_code == 201, on_a.text
    assert on_a.json()["ports"] == [hi], on_a.json()
    # The range is full for both now: a clear 503, nothing half-made.
    full = b.post("/v1/sandboxes", {"type": "net"})
    assert full.status_code == 503 and "PORT_RANGE" in full.json()["detail"]
    name = made.json()["container_name"]
    assert b.delete(f"/v1/sandboxes/{name}").status_code == 200
    wait_until(lambda: str(lo + 1) not in redis.cli("SMEMBERS", key), 30,
               what="the port given back in Redis")
    for s in (a, b):
        for n in list(s.containers()):
            s.delete(f"/v1/sandboxes/{n}")


def listed(s):
    return [x["container_name"] for x in s.get("/v1/sandboxes").json()[
        "sandboxes"]]


def lease_env(redis, prefix, grace, **more):
    """An instance with a 2 s lease and the given grace after it."""
    return redis_env(redis, prefix, SANDBOXD_REDIS_LEASE=2,
                     SANDBOXD_REDIS_DEAD_GRACE=grace, **more)


def kill_when_pool_warm(a, redis):
    wait_until(lambda: a.metrics()['sandboxd_pool_ready{type="minimal"}']
               == 1, 60, what="A's pool sandbox warm", logs=[a])
    # In its state file (written 50 ms after), so it comes back.
    time.sleep(0.5)
    warm = [n for n in redis.cli("LRANGE", f"t{redis.port}:container_pool:"
                                 "minimal", "0", "-1") if n.startswith("rda-")]
    a.signal(signal.SIGKILL)
    a.wait_exit(10)
    a.expected_exit = -signal.SIGKILL
    return warm


def test_dead_owner_warm_sandbox_not_handed_out(start_sandboxd, redis):
    """A warm sandbox whose owner holds no lease is not handed out (nobody
    would answer for it); the owner, back, offers it again."""
    pool_key = f"t{redis.port}:container_pool:minimal"

    def pool():
        return redis.cli("LRANGE", pool_key, "0", "-1")

    a = start_sandboxd(env=lease_env(redis, "rda-", 600, POOL_SIZE=1))
    wait_until(lambda: len(pool()) == 1, 60, what="A's pool sandbox warm",
               logs=[a])
    # B's warm one queued after A's: a take through B finds A's first.
    b = start_sandboxd(env=lease_env(redis, "rdb-", 600, POOL_SIZE=1))
    wait_until(lambda: len(pool()) == 2, 60, what="B's pool sandbox warm",
               logs=[a, b])
    warm = kill_when_pool_warm(a, redis)
    assert pool()[0] == warm[0]
    wait_until(lambda: redis.cli("EXISTS", f"t{redis.port}:instance:"
                                 f"{a.instance}") == ["0"], 20,
               what="A's lease lapsed")
    mgr_b = RemoteManager(b.url)
    taken = mgr_b.create_from_pool(sandbox_type="minimal",
                                   meta={"session_ctx_id": "s-warm"})
    assert taken.startswith("rdb-"), (taken, warm)
    assert warm[0] not in pool()
    # Within the grace its records stay: a restart is not a death.
    assert warm[0] in listed(b)
    a.start()
    a.expected_exit = 0
    wait_until(lambda: warm[0] in pool(), 30,
               what="A offers its warm sandbox again")
    # Oldest first: within as many takes as the list holds.
    n = len(pool())
    got = [mgr_b.create_from_pool(sandbox_type="minimal") for _ in range(n)]
    assert warm[0] in got, (got, warm)


def test_dead_owner_records_removed_then_owner_back(start_sandboxd, redis,
                                                    scratch):
    """Past its lease and SANDBOXD_REDIS_DEAD_GRACE, what a dead instance
    left in Redis is removed by the reaper-lock holder (its containers are
    left alone: only their owner talks to its Docker); the owner back
    adopts its containers and writes their records again, once each."""
    types = write_types(scratch(), {"net": {"from": "minimal",
                                            "network": "bridge"}})
    lo, hi = 62220, 62229
    more = dict(SANDBOXD_TYPES=types, PORT_RANGE=f"{lo},{hi}")
    grace = 3
    a = start_sandboxd(env=lease_env(redis, "rda-", grace, POOL_SIZE=1,
                                     **more))
    b = start_sandboxd(env=lease_env(redis, "rdb-", grace, POOL_SIZE=0,
                                     **more))
    p = f"t{redis.port}:"
    sid = a.create(meta={"session_ctx_id": "s-dead"})
    nid = a.create(sandbox_type="net", meta={"session_ctx_id": "s-dead"})
    # B learns of it from the announcement, a moment later.
    wait_until(lambda: known(b, nid), 10, what="B knows A's sandbox")
    port = RemoteManager(b.url).get_info(nid)["ports"][0]
    ports_key = f"{p}occupied_ports:127.0.0.1"
    assert str(port) in redis.cli("SMEMBERS", ports_key)
    warm = kill_when_pool_warm(a, redis)
    killed = time.time()
    before = set(a.containers())
    assert {sid, nid} | set(warm) <= set(listed(b))

    def mine():
        return {n for n in names_in_redis(redis) if n.startswith("rda-")}

    # B forgets them once A's lease has lapsed for the grace (its own
    # reckoning), the reaper-lock holder removes them from Redis.
    wait_until(lambda: not any(n.startswith("rda-") for n in listed(b)) and
               not mine(), 60, what="B no longer lists A's sandboxes")
    # Not before the lease lapsed and the grace passed.
    assert time.time() - killed >= grace - 0.5
    assert redis.cli("KEYS", f"{p}sb:rda-*") == []
    assert redis.cli("SMEMBERS", f"{p}session:s-dead") == []
    assert not [n for n in redis.cli("HKEYS", f"{p}live")
                if n.startswith("rda-")]
    assert str(port) not in redis.cli("SMEMBERS", ports_key)
    assert not [n for n in redis.cli("LRANGE", f"{p}container_pool:minimal",
                                     "0", "-1") if n.startswith("rda-")]
    assert a.instance not in redis.cli("HKEYS", f"{p}instances")
    mgr_b = RemoteManager(b.url)
    assert mgr_b.get_session_mapping("s-dead") == []
    assert not known(b, sid)
    # The containers are A's: B did not touch them.
    assert set(a.containers()) == before
    # A back: its containers adopted, their records written once each.
    a.start()
    a.expected_exit = 0
    wait_until(lambda: {sid, nid} | set(warm) <= mine(), 30,
               what="A's records back")
    time.sleep(1)
    assert mine() == set(a.containers(all_states=False)) == before
    names = listed(b)
    assert len(names) == len(set(names))
    assert {sid, nid} | set(warm) <= set(names)
    assert sorted(mgr_b.get_session_mapping("s-dead")) == sorted([sid, nid])
    assert str(port) in redis.cli("SMEMBERS", ports_key)
    assert stdout(mgr_b.call_tool(nid, "run_shell_command",
                                  {"command": "echo back"})) == "back\n"


def unshare_or_skip():
    probe = subprocess.run(["unshare", "-n", "-m", "true"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip("unshare -n -m is not permitted here: " + probe.stderr)


def test_unknown_redis_host_stops_start_up(scratch, minimal_tag):
    """An unknown name in REDIS_SERVER: a clear error at start, exit 2.
    Run in a network namespace with only a down loopback, so resolving
    it sends nothing anywhere."""
    unshare_or_skip()
    d = scratch("sbxd-")
    e = {"PATH": os.environ["PATH"], "REDIS_ENABLED": "true",
         "REDIS_SERVER": "no-such-host.invalid",
         "SANDBOXD_STATE_DIR": d + "/st",
         "RUNTIME_SANDBOX_IMAGE_TAG": minimal_tag,
         "DEFAULT_SANDBOX_TYPE": "minimal", "POOL_SIZE": "0",
         "SANDBOXD_REDIS_SECRET": SECRET}
    p = subprocess.run(["unshare", "-n", SANDBOXD_BIN, "--port",
                        str(free_port())], env=e, cwd=d,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    assert p.stderr.startswith("sandboxd: REDIS_SERVER: cannot connect to "
                               "Redis at no-such-host.invalid:6379"), p.stderr


DNS_STUB = os.path.join(os.path.dirname(__file__), "helpers", "dns_stub.py")

# Polls url/health every 50 ms for the given seconds from inside the
# namespace; prints the slowest answer's seconds (a failure counts as
# its time too).
HEALTH_PROBE = """
import sys, time, urllib.request
url, secs, worst = sys.argv[1], float(sys.argv[2]), 0.0
end = time.time() + secs
while time.time() < end:
    t = time.time()
    try:
        urllib.request.urlopen(url + "/health", timeout=30).read()
    except OSError:
        pass
    worst = max(worst, time.time() - t)
    time.sleep(0.05)
print(worst)
"""


def test_redis_host_name_resolved_off_the_loop(start_sandboxd, scratch):
    """REDIS_SERVER as a name whose name server stops answering while
    Redis is away: the reconnects' resolving must not hold the loop
    (hiredis resolves with a blocking getaddrinfo). All of it runs in a
    network namespace of its own: a DNS stub on its loopback, Redis and
    sandboxd in it, nothing leaves it."""
    unshare_or_skip()
    d = scratch("sbxd-dns-")
    resolv = os.path.join(d, "resolv.conf")
    with open(resolv, "w") as f:
        f.write("nameserver 127.0.0.1\noptions timeout:2 attempts:1\n")
    flag = os.path.join(d, "answer")
    open(flag, "w").close()
    name = "redis.sbxd.test"
    ns = subprocess.Popen(
        ["unshare", "-n", "-m", "sh", "-c",
         f"ip link set lo up && mount --bind {resolv} /etc/resolv.conf && "
         f"exec /usr/bin/python3 {DNS_STUB} {name} {flag}"],
        stdout=subprocess.PIPE, text=True)
    procs = [ns]
    try:
        assert ns.stdout.readline().strip() == "ready"
        enter = ["nsenter", "-t", str(ns.pid), "-n", "-m"]
        port = free_port()
        redis_args = enter + [REDIS_SERVER, "--port", str(port), "--bind",
                              "127.0.0.1", "--save", "", "--appendonly",
                              "no", "--dir", d]

        def start_redis():
            p = subprocess.Popen(redis_args, stdout=subprocess.DEVNULL)
            procs.append(p)
            wait_until(lambda: subprocess.run(
                enter + ["redis-cli", "-p", str(port), "PING"],
                capture_output=True, text=True).stdout.strip() == "PONG",
                10, what="redis-server in the namespace")
            return p

        def probe(secs):
            out = subprocess.run(enter + ["/usr/bin/python3", "-c",
                                          HEALTH_PROBE, s.url, str(secs)],
                                 capture_output=True, text=True, check=True)
            return float(out.stdout)

        redis_proc = start_redis()
        s = start_sandboxd(env={"REDIS_ENABLED": "true",
                                "REDIS_SERVER": name,
                                "REDIS_PORT": str(port),
                                "SANDBOXD_REDIS_PREFIX": "dns:",
                                "SANDBOXD_REDIS_SECRET": SECRET},
                           wrapper=enter, wait=False)
        wait_until(lambda: "shared state: Redis at" in s.read_log(), 30,
                   what="sandboxd connected through the name")
        assert probe(0.3) < 1
        # The name server goes silent, then Redis goes away: every
        # reconnect asks the name again and waits out 2 s.
        os.unlink(flag)
        redis_proc.terminate()
        redis_proc.wait(10)
        wait_until(lambda: "lost Redis" in s.read_log(), 10,
                   what="sandboxd lost Redis")
        worst = probe(4)
        assert worst < 1, f"/health took {worst:.2f} s: the loop was held"
        # Answers again: sandboxd finds Redis by name once more.
        open(flag, "w").close()
        start_redis()
        wait_until(lambda: s.read_log().count("shared state: Redis at")
                   == 2, 30, what="sandboxd back on Redis")
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.terminate()
                p.wait(10)


def two_hosts(start_sandboxd, redis, **kw):
    """A and B as on two hosts: distinct SANDBOXD_ADVERTISE_ADDR
    (127.0.0.1 and 127.0.0.2, both loopback), and B in a mount namespace
    where A's directory (its agents' unix sockets) is an empty tmpfs, as
    on another machine."""
    unshare_or_skip()
    a = start_sandboxd(env=redis_env(redis, "rda-",
                                     SANDBOXD_ADVERTISE_ADDR="127.0.0.1"),
                       **kw)
    hide = ["unshare", "-m", "sh", "-c",
            f'mount -t tmpfs none {a.dir} && exec "$@"', "sh"]
    b = start_sandboxd(env=redis_env(redis, "rdb-",
                                     SANDBOXD_ADVERTISE_ADDR="127.0.0.2"),
                       wrapper=hide, **kw)
    return a, b


@pytest.mark.parametrize("hosts", ["one", "two"])
def test_desktop_websocket_through_the_other_instance(start_sandboxd, redis,
                                                      hosts):
    """A gui sandbox made through A: its desktop page and its WebSocket
    (RFB, relayed to the agent's /websockify) through B, which reaches
    A's agent directly on one host, through A's /desktop/{name} from
    another; the viewer's pointer moves A's desktop. The gui image is the
    one already built (tag latest, as test_images_desktop)."""
    tag = os.environ.get("RUNTIME_SANDBOX_IMAGE_TAG", "latest")
    image = f"agentscope/runtime-sandbox-gui:{tag}"
    if subprocess.run(["docker", "image", "inspect", image],
                      capture_output=True).returncode != 0:
        pytest.skip(f"{image} is not built (tools/build-image gui)")
    if BACKEND == "crun":
        subprocess.run([IMAGE_STORE, "import", image], check=True,
                       timeout=1200)
    if hosts == "two":
        a, b = two_hosts(start_sandboxd, redis, tag=tag)
    else:
        a = start_sandboxd(tag=tag, env=redis_env(redis, "rda-"))
        b = start_sandboxd(tag=tag, env=redis_env(redis, "rdb-"))
    name = a.create("gui")
    # B learns of it from the announcement, a moment after the create
    # answers (a known gap: B does not yet look a name up in Redis).
    wait_until(lambda: known(b, name), 10, what="B knows A's sandbox")
    # B's link is A's: both derive it from the sandbox's token.
    info = b.rpc("get_info", identity=name)
    assert info["desktop_url"] == a.rpc("get_info", identity=name)[
        "desktop_url"].replace(a.url, b.url)
    token = parse_qs(urlparse(info["desktop_url"]).query)["password"][0]
    view_token = parse_qs(urlparse(info["desktop_view_url"]).query)[
        "password"][0]
    page = requests.get(f"{b.url}/desktop/{name}/vnc/vnc_relay.html"
                        f"?password={token}", timeout=60)
    assert page.status_code == 200, page.text
    assert page.headers["content-type"].startswith("text/html")
    # The view-only link through B only watches, on A's desktop too.
    b.rpc("call_tool", identity=name, tool_name="computer",
          arguments={"action": "mouse_move", "coordinate": [600, 400]})
    ws = ws_client.connect(f"/desktop/{name}?password={view_token}",
                           port=b.port, timeout=30)
    try:
        assert rfb_handshake(ws) == (1280, 800, "sandbox")
        try_to_drive(ws)
    finally:
        ws.close()
    assert b.rpc("call_tool", identity=name, tool_name="computer",
                 arguments={"action": "get_cursor_position"})[
        "structuredContent"] == {"x": 600, "y": 400}
    ws = ws_client.connect(f"/desktop/{name}?password={token}", port=b.port,
                           timeout=30)
    try:
        assert ws.headers["sec-websocket-protocol"] == "binary"
        assert rfb_handshake(ws) == (1280, 800, "sandbox")
        rects = full_update(ws, 1280, 800)
        assert sum(w * h for _, _, w, h, _ in rects) == 1280 * 800
        ws.send(struct.pack("!BBHH", 5, 0, 321, 234))
        want = {"x": 321, "y": 234}
        res = wait_until(lambda: (lambda r: r if r["structuredContent"]
                                  == want else None)(
            b.rpc("call_tool", identity=name, tool_name="computer",
                  arguments={"action": "get_cursor_position"})), 10,
            interval=0.1, what="the pointer moved")
        assert res["structuredContent"] == want
    finally:
        ws.close()
    # Without the sandbox's token, B refuses it as A would.
    with pytest.raises(ws_client.Refused) as refused:
        ws_client.connect(f"/desktop/{name}?password=wrong", port=b.port)
    assert refused.value.status == 401
    assert RemoteManager(b.url).release(name) is True
    wait_until(lambda: name not in a.containers(), 60, what="A removes it")


def test_network_none_across_hosts_through_the_owner(start_sandboxd, redis):
    """A network-none sandbox of A, from B on another "host" (two_hosts):
    reached through A's API (its /proxy/{name}), which A publishes in the
    record."""
    a, b = two_hosts(start_sandboxd, redis)
    mgr_b = RemoteManager(b.url)
    sid = a.create(meta={"session_ctx_id": "s-far"})
    rec = redis.hgetall(f"t{redis.port}:sb:{sid}")
    assert rec["agent"].startswith("unix:") and rec["host"] == "127.0.0.1"
    assert rec["api"] == f"127.0.0.1:{a.port}"
    assert mgr_b.check_health(sid) is True
    assert stdout(mgr_b.call_tool(sid, "run_shell_command",
                                  {"command": "echo far"})) == "far\n"
    assert "run_shell_command" in mgr_b.list_tools(sid)["generic"]
    info = mgr_b.get_info(sid)
    assert info["url"] == f"{b.url}/proxy/{sid}/"
    assert stdout(DirectClient(info).run_shell_command("echo by-url")) == \
        "by-url\n"
    # Each went through A's API.
    log = a.read_log()
    assert f'"POST /proxy/{sid}/' in log and f'"GET /proxy/{sid}/healthz' \
        in log, log[-3000:]
    assert mgr_b.release(sid) is True
    wait_until(lambda: sid not in a.containers(), 30, what="A removes it")
