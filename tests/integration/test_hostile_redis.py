"""sandboxd against whoever can write its Redis. Everything another instance
reads there may have been written by someone without the instances' secret
(SANDBOXD_REDIS_SECRET): a record naming any socket with a token of its
choice, a record of one sandbox copied under another name or owner, an old
record said again, a release request, a pool entry, a session's activity.
None of it may steer a request, release a sandbox or hand one out; tokens
are not readable there. The tests play that writer with redis-cli (and,
where they need a record that is signed but says what its owner cannot
publish, with the secret: tests/integration/helpers/redis_sign.py), against two
real sandboxd on a real redis-server and dockerd. Where a request could go
to a socket of the test's, the test listens there and asserts nothing
came.
"""
import os
import socket
import subprocess
import threading
import time

import pytest
import requests

from conftest import SANDBOXD_BIN, free_port
from redis_sign import Signer
from sandboxd_fixtures import (scratch, minimal_tag, start_sandboxd,  # noqa: F401
                               wait_until, write_types)
from test_sandboxd_redis import (SECRET, Redis, known, redis,  # noqa: F401
                                 redis_env)

BEARER = "hostile-redis-bearer"
DOCKER_SOCK = "/var/run/docker.sock"


class Listener:
    """A unix or TCP socket of the test's own that answers any request
    200 and counts the connections it gets: none may come."""

    def __init__(self, path=None, host="127.0.0.1", port=0):
        if path is not None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.bind(path)
            self.addr = "unix:" + path
        else:
            self.sock = socket.create_server((host, port))
            self.port = self.sock.getsockname()[1]
            self.addr = f"{host}:{self.port}"
        self.sock.listen(16)
        self.got = []
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                try:
                    self.got.append(conn.recv(65536))
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: "
                                 b"application/json\r\nContent-Length: 2"
                                 b"\r\n\r\n{}")
                except OSError:
                    pass

    def close(self):
        self.sock.close()


@pytest.fixture
def listeners(scratch):
    """Factory: listeners(tcp=False, host=...) -> Listener, closed at
    teardown."""
    made = []
    d = scratch("sbxd-l-")

    def make(tcp=False, host="127.0.0.1"):
        if tcp:
            s = Listener(host=host)
        else:
            s = Listener(path=os.path.join(d, f"l{len(made)}.sock"))
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def cli(redis, *args):
    """redis-cli, the output's lines (a value may hold spaces)."""
    return redis.cli(*args, lines=True)


def record(redis, name):
    return redis.hgetall(f"t{redis.port}:sb:{name}")


def write(redis, name, fields, announce=False):
    """fields as sb:<name>, whole (what was there goes first)."""
    p = f"t{redis.port}:"
    cli(redis, "DEL", f"{p}sb:{name}")
    args = []
    for k, v in fields.items():
        args += [k, v]
    cli(redis, "HSET", f"{p}sb:{name}", *args)
    cli(redis, "SADD", f"{p}sandboxes", name)
    if announce:
        cli(redis, "PUBLISH", f"{p}events", f"hostile {name}")


def start_pair(start_sandboxd, redis, a_env=None, b_env=None, **env):
    a = start_sandboxd(token=BEARER,
                       env=redis_env(redis, "rda-", **env, **(a_env or {})))
    b = start_sandboxd(token=BEARER,
                       env=redis_env(redis, "rdb-", **env, **(b_env or {})))
    return a, b


def hide_from(b, redis, name, a):
    """B forgets name (its record moved away and announced, as if by its
    owner A, which takes no notice of its own announcements), and the
    record is back, unannounced: B reads it again only when asked."""
    p = f"t{redis.port}:"
    cli(redis, "RENAME", f"{p}sb:{name}", f"{p}hidden")
    cli(redis, "PUBLISH", f"{p}events", f"{a.instance} {name}")
    wait_until(lambda: not known(b, name), 10, what="B forgets " + name)
    cli(redis, "RENAME", f"{p}hidden", f"{p}sb:{name}")


def refused(b, name):
    return f"refusing the record of {name} in Redis" in b.read_log()


def proxied(s, name, token):
    return requests.get(f"{s.url}/proxy/{name}/version", timeout=30,
                        headers={"Authorization": f"Bearer {token}"})


@pytest.mark.parametrize("env,key", [
    ({}, "SANDBOXD_REDIS_SECRET: REDIS_ENABLED needs a secret"),
    ({"SANDBOXD_REDIS_SECRET": "x" * 31},
     "SANDBOXD_REDIS_SECRET: the secret has 31 characters"),
    ({"SANDBOXD_REDIS_SECRET_FILE": "short"},
     "SANDBOXD_REDIS_SECRET_FILE: the secret has 5 characters"),
    ({"SANDBOXD_REDIS_SECRET_FILE": "/nonexistent/secret"},
     "SANDBOXD_REDIS_SECRET_FILE: cannot read /nonexistent/secret"),
    ({"SANDBOXD_REDIS_SECRET": SECRET, "SANDBOXD_REDIS_SECRET_FILE": "f"},
     "SANDBOXD_REDIS_SECRET and SANDBOXD_REDIS_SECRET_FILE"),
])
def test_shared_mode_needs_the_secret(env, key, scratch, minimal_tag):
    """Without a secret of its own (or a weak one) an instance would have
    to trust Redis: it does not start, and says which key is missing."""
    r = Redis()
    try:
        d = scratch("sbxd-")
        with open(os.path.join(d, "short"), "w") as f:
            f.write("12345\n")
        e = {"PATH": os.environ["PATH"], "REDIS_ENABLED": "true",
             "REDIS_PORT": str(r.port), "SANDBOXD_STATE_DIR": d + "/st",
             "RUNTIME_SANDBOX_IMAGE_TAG": minimal_tag,
             "DEFAULT_SANDBOX_TYPE": "minimal", "POOL_SIZE": "0"}
        e.update(env)
        p = subprocess.run([SANDBOXD_BIN, "--port", str(free_port())],
                           env=e, cwd=d, capture_output=True, text=True,
                           timeout=30)
        assert p.returncode == 2, p.stderr
        assert p.stderr.startswith("sandboxd: " + key), p.stderr
        assert "x" * 31 not in p.stderr and SECRET not in p.stderr
        assert r.cli("KEYS", "*") == []
    finally:
        r.stop()


@pytest.mark.parametrize("target", ["own socket", "docker socket"])
def test_forged_record_steers_nothing(start_sandboxd, redis, listeners,
                                      target):
    """A record written straight to Redis naming a socket (the Docker
    daemon's: /proxy/{name}/version would be the Engine API) and a token
    of the writer's choice: neither an announcement nor a look-up makes
    an instance take it, so that token opens nothing and nothing is sent
    there."""
    a, b = start_pair(start_sandboxd, redis)
    sock = listeners() if target == "own socket" else None
    agent = sock.addr if sock is not None else "unix:" + DOCKER_SOCK
    forged = {"id": "00000000000000aa", "owner": a.instance,
              "type": "minimal", "image": "x", "token": "w" * 32,
              "agent": agent, "port": "0", "state": "running",
              "session": "s-forged", "meta": "{}", "created_at": "1",
              "updated_at": "1", "host": "", "api": ""}
    # Announced, of an instance that does not exist; unannounced, of A's
    # (which A, told, would remove as a stray of its own).
    announced, quiet = "rdx-00000000000000aa", "rda-00000000000000bb"
    write(redis, announced, dict(forged, owner="e" * 32), announce=True)
    write(redis, quiet, dict(forged, id="00000000000000bb"))
    wait_until(lambda: refused(b, announced), 10, what="B refuses it",
               logs=[b])
    for name in (announced, quiet):
        for s in (a, b):
            r = s.post("/get_info", {"identity": name})
            assert r.status_code == 404, r.text
            r = proxied(s, name, "w" * 32)
            assert r.status_code == 401, r.text
            assert "ApiVersion" not in r.text
            r = s.post("/call_tool", {"identity": name,
                                      "tool_name": "run_shell_command",
                                      "arguments": {"command": "true"}})
            assert r.status_code == 404, r.text
    assert b.rpc("get_session_mapping", session_ctx_id="s-forged") == []
    if sock is not None:
        assert sock.got == []


@pytest.mark.parametrize("change", [
    lambda a, b, sock: {"agent": sock.addr},
    lambda a, b, sock: {"token": "w" * 32},
    lambda a, b, sock: {"session": "s-other"},
    lambda a, b, sock: {"owner": b.instance},
    lambda a, b, sock: {"api": sock.addr.replace("unix:", "")},
], ids=["agent", "token", "session", "owner", "api"])
def test_tampered_record_is_refused_then_written_again(
        start_sandboxd, redis, listeners, change):
    """One field of a real record changed in Redis (its MAC left as it
    was): the other instance refuses it; once the change is announced,
    its owner writes the record again and the sandbox answers as before."""
    a, b = start_pair(start_sandboxd, redis)
    sock = listeners()
    sid = a.create(meta={"session_ctx_id": "s-real"})
    wait_until(lambda: known(b, sid), 10, what="B knows A's sandbox")
    hide_from(b, redis, sid, a)
    cli(redis, "HSET", f"t{redis.port}:sb:{sid}",
        *sum(change(a, b, sock).items(), ()))
    r = b.post("/get_info", {"identity": sid})
    assert r.status_code == 404, r.text
    assert b.rpc("get_session_mapping", session_ctx_id="s-other") == []
    assert sock.got == []
    cli(redis, "PUBLISH", f"t{redis.port}:events", f"hostile {sid}")
    wait_until(lambda: known(b, sid), 10, what="A writes it again",
               logs=[a, b])
    assert b.rpc("get_info", identity=sid)["session_ctx_id"] == "s-real"
    assert b.shell(sid, "echo again")["stdout"] == "again\n"
    assert sock.got == []


def test_record_moved_to_another_name_is_refused(start_sandboxd, redis):
    """A's record copied under another name (as a writer of Redis would to
    reach A's sandbox through a name of their own) does not check: its
    MAC is bound to its key."""
    a, b = start_pair(start_sandboxd, redis)
    sid = a.create()
    p = f"t{redis.port}:"
    other = "rda-1234567890abcdef"
    assert cli(redis, "COPY", f"{p}sb:{sid}", f"{p}sb:{other}") == ["1"]
    cli(redis, "SADD", f"{p}sandboxes", other)
    r = b.post("/get_info", {"identity": other})
    assert r.status_code == 404, r.text
    assert refused(b, other)
    # Named, and signed, for the copy's key but with the original's id:
    # not its name's.
    sign = Signer(SECRET)
    fields = sign.sign_record(f"{p}sb:{other}", record(redis, sid))
    write(redis, other, fields)
    r = b.post("/get_info", {"identity": other})
    assert r.status_code == 404, r.text


def two_hosts_tcp(start_sandboxd, redis, scratch, lo):
    """A and B as on two hosts (distinct advertised loopback addresses),
    A's bridge sandboxes on ports lo and lo + 1."""
    types = write_types(scratch(), {"net": {"from": "minimal",
                                            "network": "bridge"}})
    return start_pair(start_sandboxd, redis,
                      a_env={"SANDBOXD_ADVERTISE_ADDR": "127.0.0.1"},
                      b_env={"SANDBOXD_ADVERTISE_ADDR": "127.0.0.2"},
                      SANDBOXD_TYPES=types, PORT_RANGE=f"{lo},{lo + 1}")


@pytest.mark.parametrize("where", ["unix", "tcp outside the range",
                                   "tcp at no instance's address", "api"])
def test_signed_record_beyond_what_its_owner_publishes(
        start_sandboxd, redis, listeners, scratch, where):
    """Even signed (a leaked secret, a bug of ours), a record is taken only
    when it keeps to what its owner's lease says it publishes: a unix agent
    in its socket directory, a TCP agent on its advertised address and
    port range, its own API."""
    lo = 62240
    a, b = two_hosts_tcp(start_sandboxd, redis, scratch, lo)
    if where == "unix":
        sock = listeners()
        change = {"agent": sock.addr}
    elif where == "tcp outside the range":
        sock = listeners(tcp=True)
        assert not lo <= sock.port <= lo + 1
        change = {"agent": sock.addr, "port": str(sock.port)}
    elif where == "tcp at no instance's address":
        sock = listeners(tcp=True, host="127.0.0.3")
        change = {"agent": f"127.0.0.3:{lo}", "port": str(lo)}
    else:
        sock = listeners(tcp=True)
        change = {"api": sock.addr}
    sid = a.create(meta={"session_ctx_id": "s-signed"})
    wait_until(lambda: known(b, sid), 10, what="B knows A's sandbox")
    hide_from(b, redis, sid, a)
    key = f"t{redis.port}:sb:{sid}"
    fields = dict(record(redis, sid), **change)
    write(redis, sid, Signer(SECRET).sign_record(key, fields))
    r = b.post("/get_info", {"identity": sid})
    assert r.status_code == 404, r.text
    r = b.post("/call_tool", {"identity": sid,
                              "tool_name": "run_shell_command",
                              "arguments": {"command": "true"}})
    assert r.status_code == 404, r.text
    assert sock.got == []
    assert refused(b, sid)


def test_replayed_record_of_a_port_handed_on(start_sandboxd, redis, scratch):
    """A released sandbox's record, signed and saved by whoever reads
    Redis, written back after its port went to a newer sandbox of the
    same owner: it would send requests (with a dead token) to the newer
    one's agent. The newer record holds the port; the old one is
    refused."""
    lo = 62250
    a, b = two_hosts_tcp(start_sandboxd, redis, scratch, lo)
    n1 = a.create("net")
    n2 = a.create("net")
    old = record(redis, n1)
    assert old["agent"].startswith("127.0.0.1:"), old
    assert a.rpc("release", identity=n1) is True
    wait_until(lambda: n1 not in a.containers(), 30, what="n1 removed")
    n3 = a.create("net")
    wait_until(lambda: known(b, n3), 10, what="B knows n3")
    assert record(redis, n3)["agent"] == old["agent"]
    write(redis, n1, old)
    r = b.post("/get_info", {"identity": n1})
    assert r.status_code == 404, r.text
    assert refused(b, n1)
    assert b.rpc("get_info", identity=n3)["container_name"] == n3
    assert b.shell(n3, "echo n3")["stdout"] == "n3\n"
    assert b.shell(n2, "echo n2")["stdout"] == "n2\n"


def test_forged_release_request_releases_nothing(start_sandboxd, redis):
    """A release asked in Redis by someone who is not an instance (the
    fields another instance wrote for one before): the owner does not
    release, and its record is written again."""
    a, b = start_pair(start_sandboxd, redis)
    sid = a.create()
    wait_until(lambda: known(b, sid), 10, what="B knows A's sandbox")
    cli(redis, "HSET", f"t{redis.port}:sb:{sid}", "release", "1", "state",
        "releasing")
    cli(redis, "PUBLISH", f"t{redis.port}:events", f"hostile {sid}")
    wait_until(lambda: "ignoring a release request in Redis" in a.read_log(),
               10, what="A ignores it", logs=[a])
    wait_until(lambda: record(redis, sid).get("state") == "running", 10,
               what="A writes its record again")
    assert sid in a.containers(all_states=False)
    assert f"sandbox {sid} released" not in a.read_log()
    wait_until(lambda: known(b, sid), 10, what="B knows it again")
    assert b.shell(sid, "echo kept")["stdout"] == "kept\n"
    # A release through B is one: signed by B.
    assert b.rpc("release", identity=sid) is True
    wait_until(lambda: sid not in a.containers(), 30, what="A releases it")


def test_forged_pool_entry_not_handed_out(start_sandboxd, redis, listeners):
    """A name put first on a pool list, with a warm record of a made-up
    instance (its lease key set too): a take does not hand it out, it
    hands out the warm sandbox behind it."""
    a, b = start_pair(start_sandboxd, redis, b_env={"POOL_SIZE": "1"})
    sock = listeners()
    p = f"t{redis.port}:"
    pool = f"{p}container_pool:minimal"
    wait_until(lambda: cli(redis, "LLEN", pool) == ["1"], 60,
               what="B's pool warm", logs=[b])
    warm = cli(redis, "LRANGE", pool, "0", "-1")[0]
    fake = "f" * 32
    cli(redis, "SET", f"{p}instance:{fake}", "{}")
    name = "rdf-00000000000000cc"
    write(redis, name, {"id": "00000000000000cc", "owner": fake,
                        "type": "minimal", "image": "x", "token": "w" * 32,
                        "agent": sock.addr, "port": "0", "state": "warm",
                        "session": "", "meta": "{}", "created_at": "1",
                        "updated_at": "1", "host": "", "api": ""})
    cli(redis, "LPUSH", pool, name)
    got = b.rpc("create_from_pool", sandbox_type="minimal",
                meta={"session_ctx_id": "s-pool"})
    assert got == warm, (got, warm)
    assert b.shell(got, "echo mine")["stdout"] == "mine\n"
    assert b.rpc("get_session_mapping", session_ctx_id="s-pool") == [got]
    assert sock.got == []


def test_forged_activity_reaps_nothing(start_sandboxd, redis):
    """A busy session's last activity set far back in Redis, over and over
    (faster than the instances write it): its sandboxes stay. Another
    session, idle, is reaped meanwhile: the reaper did run."""
    a, b = start_pair(start_sandboxd, redis, HEARTBEAT_TIMEOUT=8)
    idle = a.create(meta={"session_ctx_id": "hb-idle"})
    busy = a.create(meta={"session_ctx_id": "hb-busy"})
    key = f"t{redis.port}:heartbeats"
    last_call = [0.0]

    def reaped_idle():
        cli(redis, "HSET", key, "hb-busy", "1")
        if time.time() - last_call[0] > 1:
            assert b.shell(busy, "true")["stdout"] == ""
            last_call[0] = time.time()
        return "session hb-idle idle for" in a.read_log() + b.read_log()

    wait_until(reaped_idle, 60, interval=0.05, what="the idle one reaped",
               logs=[a, b])
    assert "session hb-busy idle" not in a.read_log() + b.read_log()
    assert busy in a.containers(all_states=False)
    wait_until(lambda: idle not in a.containers(), 30, what="idle removed")


def scan(redis):
    """Every key under the test's prefix with its value(s), as text."""
    p = f"t{redis.port}:"
    out = []
    for key in cli(redis, "--scan", "--pattern", p + "*"):
        kind = cli(redis, "TYPE", key)[0]
        cmd = {"string": ["GET"], "hash": ["HGETALL"], "set": ["SMEMBERS"],
               "list": ["LRANGE"], "zset": ["ZRANGE"]}[kind]
        extra = ["0", "-1"] if kind in ("list", "zset") else []
        out.append(key + "\n" + "\n".join(cli(redis, *cmd, key, *extra)))
    return "\n".join(out)


def test_tokens_not_readable_in_redis(start_sandboxd, redis, scratch):
    """Every key the instances write, after creates, pool takes across
    instances, sessions' activity, a release through the other instance:
    no sandbox's token in it (sealed), nor the secret; the logs carry
    neither. A reads the secret from a file, B from its environment: one
    secret, the same keys."""
    d = scratch("sbxd-secret-")
    path = os.path.join(d, "secret")
    with open(path, "w") as f:
        f.write(SECRET + "\n")
    os.chmod(path, 0o600)
    a, b = start_pair(start_sandboxd, redis, POOL_SIZE=1,
                      a_env={"SANDBOXD_REDIS_SECRET": "",
                             "SANDBOXD_REDIS_SECRET_FILE": path})
    pool = f"t{redis.port}:container_pool:minimal"
    wait_until(lambda: cli(redis, "LLEN", pool) == ["2"], 90,
               what="both pools warm", logs=[a, b])
    names = [a.create(meta={"session_ctx_id": "s-tok"}),
             b.create(meta={"session_ctx_id": "s-tok"})]
    names += [s.rpc("create_from_pool", sandbox_type="minimal",
                    meta={"session_ctx_id": "s-tok2"}) for s in (a, b, a)]
    tokens = set()
    for name in names:
        for s in (a, b):
            info = wait_until(lambda: (lambda r: r.json()["data"]
                              if r.status_code == 200 else None)(
                s.post("/get_info", {"identity": name})), 10,
                what=f"{name} known")
            tokens.add(info["runtime_token"])
            assert s.shell(name, "echo ok")["stdout"] == "ok\n"
    assert len(tokens) == len(names)
    dump = scan(redis)
    assert f"sb:{names[0]}" in dump and "heartbeats" in dump
    for t in tokens:
        assert t not in dump
    assert SECRET not in dump
    assert b.rpc("release", identity=names[0]) is True
    wait_until(lambda: names[0] not in a.containers(), 30, what="released")
    for t in tokens:
        assert t not in scan(redis)
    logs = a.read_log() + b.read_log()
    for t in tokens:
        assert t not in logs
    assert SECRET not in logs
