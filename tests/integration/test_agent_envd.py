"""envd, E2B's in-sandbox API, served by the agent under /envd: the Connect
services process.Process and filesystem.Filesystem with the JSON codec
(unary calls and server streams, as the E2B SDKs send them) and the REST
routes /files, /health, /envs, /init and /metrics, against the real
binary as root
with --run-as, as every image runs it.

Every process and file operation must be the named user's: files it
creates are that user's, what root alone may read stays closed, and
nothing of the agent's (its token, its /proc entries) is within reach.
"""
import gzip
import hashlib
import json
import os
import pwd
import shutil
import signal
import stat
import tempfile
import time

import pytest
import requests

from envd_client import END, Envd, b64, collect, envelope, unb64
from test_agent_files import wait_for

USER = pwd.getpwuid(65534)		# nobody: the sandbox's user here
RUN_AS = f"{USER.pw_uid}:{USER.pw_gid}"


@pytest.fixture
def box():
    """A directory the user owns (d.user), one only root reads
    (d.secret, holding d.secret/key), under a parent anyone may enter."""
    base = tempfile.mkdtemp(prefix="envd-test-")
    os.chmod(base, 0o755)
    user = os.path.join(base, "user")
    os.mkdir(user)
    os.chown(user, USER.pw_uid, USER.pw_gid)
    secret = os.path.join(base, "secret")
    os.mkdir(secret, 0o700)
    with open(os.path.join(secret, "key"), "w") as f:
        f.write("root's eyes only")

    class Dirs:
        pass
    d = Dirs()
    d.base, d.user, d.secret = base, user, secret
    yield d
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def envd(start_agent, box):
    agent = start_agent("--run-as", RUN_AS)
    e = Envd(agent)
    # The default workdir: relative paths stay under home, "" is here.
    r = agent.post("/envd/init", {"defaultWorkdir": box.user})
    assert r.status_code == 204, r.text
    return e


def files_get(envd, path, **params):
    return requests.get(envd.url + "/files", params={"path": path, **params},
                        headers=envd.headers(), timeout=60)


def files_post(envd, files, path=None, headers=None, **params):
    """Multipart upload of [(filename, bytes)] in "file" parts."""
    if path is not None:
        params["path"] = path
    return requests.post(envd.url + "/files", params=params, timeout=60,
                         headers=envd.headers(extra=headers),
                         files=[("file", (name, data)) for name, data in files])


# Processes.

def test_start_streams_output_while_the_command_runs(envd, box):
    go = os.path.join(box.base, "go")
    s, pid = envd.start(f"echo first; while [ ! -e {go} ]; do sleep 0.02; "
                        f"done; echo second >&2; exit 3")
    assert s.content_type == "application/connect+json"
    flags, msg = s.next()
    assert msg == {"event": {"data": {"stdout": b64(b"first\n")}}}
    # The command is still waiting: its first line came while it ran.
    assert not os.path.exists(go)
    assert pid in [p["pid"] for p in envd.list()]
    open(go, "w").close()
    out, err, end = collect(s)
    assert (out, err) == (b"", b"second\n")
    assert end == {"exitCode": 3, "exited": True, "status": "exit status 3",
                   "error": "exit status 3"}
    wait_for(lambda: pid not in [p["pid"] for p in envd.list()],
             what="the process to leave List")


def test_start_runs_as_the_user_with_env_and_cwd(envd, box):
    out, err, end = envd.run("id -u; id -G; echo $HOME $USER; pwd")
    assert end["exitCode"] == 0, err
    uid, groups, env, cwd = out.decode().splitlines()
    assert uid == str(USER.pw_uid)
    assert groups == str(USER.pw_gid)		# no supplementary group
    assert env == f"{USER.pw_dir} {USER.pw_name}"
    assert cwd == box.user			# the default workdir of /init
    out, _, _ = envd.run("", process={
        "cmd": "sh", "args": ["-c", "echo $FOO; pwd"], "envs": {"FOO": "bar"},
        "cwd": "/tmp"})
    assert out == b"bar\n/tmp\n"


def test_start_failures_are_invalid_argument(envd, box):
    for process in ({"cmd": "/no/such/program"},
                    {"cmd": "/bin/true", "cwd": box.secret},
                    {"cmd": "/bin/true", "cwd": "/no/such/dir"}):
        s = envd.stream("process.Process/Start", {"process": process})
        assert s.status == 200
        events, eos = s.end()
        assert events == []
        assert eos["error"]["code"] == "invalid_argument", eos


def test_background_process_outlives_its_stream_and_is_killed(envd, box):
    s, pid = envd.start("sleep 1000")
    s.close()				# the client goes away
    time.sleep(0.2)
    assert pid in [p["pid"] for p in envd.list()]
    info = [p for p in envd.list() if p["pid"] == pid][0]
    assert info["config"]["cmd"] == "/bin/bash"
    assert envd.call("process.Process/SendSignal", {
        "process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"}) == {}
    wait_for(lambda: pid not in [p["pid"] for p in envd.list()],
             what="the killed process to leave List")
    # A late Connect still learns how it ended.
    c = envd.stream("process.Process/Connect", {"process": {"pid": pid}})
    events, eos = c.end()
    assert events[0] == {"event": {"start": {"pid": pid}}}
    assert events[1]["event"]["end"]["status"] == "signal: killed"
    assert eos == {}
    status, msg = envd.unary("process.Process/SendSignal", {
        "process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"})
    assert (status, msg["code"]) == (404, "not_found")


def test_connect_by_pid_and_by_tag_sees_output_from_then_on(envd, box):
    go = os.path.join(box.base, "go")
    wait = f"while [ ! -e {go}$n ]; do sleep 0.02; done"
    s, pid = envd.start(f"for n in 1 2; do {wait}; echo got $n; done",
                        tag="worker")
    s.close()
    by_tag = envd.stream("process.Process/Connect",
                         {"process": {"tag": "worker"}})
    by_pid = envd.stream("process.Process/Connect", {"process": {"pid": pid}})
    for c in (by_tag, by_pid):
        assert c.next()[1] == {"event": {"start": {"pid": pid}}}
    assert [p.get("tag") for p in envd.list() if p["pid"] == pid] == ["worker"]
    open(go + "1", "w").close()
    for c in (by_tag, by_pid):
        assert c.next()[1] == {"event": {"data": {"stdout": b64(b"got 1\n")}}}
    open(go + "2", "w").close()
    for c in (by_tag, by_pid):
        out, _, end = collect(c)
        assert out == b"got 2\n" and end["exitCode"] == 0
    status, msg = envd.unary("process.Process/SendInput", {
        "process": {"tag": "nope"}, "input": {"stdin": b64(b"x")}})
    assert (status, msg["code"]) == (404, "not_found")


def test_stdin_send_close_and_disabled(envd):
    s, pid = envd.start("cat; echo done", stdin=True)
    envd.call("process.Process/SendInput", {
        "process": {"pid": pid}, "input": {"stdin": b64(b"hello\x00\xff\n")}})
    envd.call("process.Process/CloseStdin", {"process": {"pid": pid}})
    out, _, end = collect(s)
    assert out == b"hello\x00\xff\ndone\n" and end["exitCode"] == 0
    # stdin: false reads end of file at once, and takes no input.
    s, pid = envd.start("cat; sleep 30", stdin=False)
    status, msg = envd.unary("process.Process/SendInput", {
        "process": {"pid": pid}, "input": {"stdin": b64(b"x")}})
    assert msg["code"] == "failed_precondition"
    envd.call("process.Process/SendSignal", {"process": {"pid": pid},
                                             "signal": "SIGNAL_SIGTERM"})
    out, _, end = collect(s)
    assert out == b"" and end["status"] == "signal: terminated"


def test_stream_input_is_a_client_stream(envd):
    s, pid = envd.start("cat", stdin=True)

    def body():
        yield envelope({"start": {"process": {"pid": pid}}})
        yield envelope({"keepalive": {}})
        yield envelope({"data": {"input": {"stdin": b64(b"streamed ")}}})
        yield envelope({"data": {"input": {"stdin": b64(b"input\n")}}})
    r = requests.post(envd.url + "/process.Process/StreamInput", data=body(),
                      headers=envd.headers(extra={
                          "Content-Type": "application/connect+json"}),
                      timeout=60)
    assert r.status_code == 200
    assert r.content == envelope({}) + envelope({}, END)
    envd.call("process.Process/CloseStdin", {"process": {"pid": pid}})
    out, _, _ = collect(s)
    assert out == b"streamed input\n"


def test_pty_session_with_resize(envd):
    s, pid = envd.start("", process={
        "cmd": "/bin/bash", "args": ["--norc", "--noprofile", "-i"],
        "envs": {"TERM": "xterm", "PS1": "$ "}},
        pty={"size": {"cols": 80, "rows": 24}})

    def read_until(marker):
        seen = b""
        while marker not in seen:
            flags, msg = s.next()
            assert not flags & END, msg
            seen += unb64(msg["event"].get("data", {}).get("pty", ""))
        return seen

    envd.call("process.Process/SendInput", {
        "process": {"pid": pid}, "input": {"pty": b64(b"tty; stty size\n")}})
    out = read_until(b"24 80")
    assert b"/dev/pts/" in out			# a terminal, not a pipe
    envd.call("process.Process/Update", {"process": {"pid": pid},
                                         "pty": {"size": {"cols": 100,
                                                          "rows": 30}}})
    envd.call("process.Process/SendInput", {
        "process": {"pid": pid}, "input": {"pty": b64(b"stty size; exit 7\n")}})
    read_until(b"30 100")
    _, _, end = collect(s)
    assert end["exitCode"] == 7
    # Input of a PTY process goes to its pty, not to stdin.
    s, pid = envd.start("", process={"cmd": "/bin/cat"},
                        pty={"size": {"cols": 10, "rows": 10}})
    status, msg = envd.unary("process.Process/SendInput", {
        "process": {"pid": pid}, "input": {"stdin": b64(b"x")}})
    assert msg["code"] == "failed_precondition"
    status, msg = envd.unary("process.Process/CloseStdin",
                             {"process": {"pid": pid}})
    assert msg["code"] == "failed_precondition"
    envd.call("process.Process/SendSignal", {"process": {"pid": pid},
                                             "signal": 9})
    collect(s)


def test_keepalives_and_the_deadline(envd):
    s, pid = envd.start("sleep 30", headers={"Keepalive-Ping-Interval": "1",
                                             "Connect-Timeout-Ms": "2500"})
    assert s.next()[1] == {"event": {"keepalive": {}}}
    # The deadline ends the stream and, as in envd, the process.
    events, eos = s.end()
    assert eos.get("error", {}).get("code") == "deadline_exceeded" or \
        events[-1]["event"]["end"]["status"] == "signal: killed", (events, eos)
    wait_for(lambda: pid not in [p["pid"] for p in envd.list()],
             what="the process to end at its deadline")


def test_a_stream_nobody_reads_holds_the_process_back(envd, box):
    """Backpressure, not memory: output is read only as fast as the
    client takes it."""
    done = os.path.join(box.user, "done")
    size = 32 * 1024 * 1024
    s, pid = envd.start(f"head -c {size} /dev/zero; touch {done}")
    time.sleep(1)
    assert not os.path.exists(done)
    out, _, end = collect(s)
    assert len(out) == size and end["exitCode"] == 0
    assert os.path.exists(done)


# Files over RPC.

def test_stat_list_mkdir_move_remove(envd, box):
    os.makedirs(os.path.join(box.user, "a", "b"))
    for d in ("a", "a/b"):
        os.chown(os.path.join(box.user, d), USER.pw_uid, USER.pw_gid)
    with open(os.path.join(box.user, "a", "f.txt"), "w") as f:
        f.write("12345")
    os.symlink("a/f.txt", os.path.join(box.user, "link"))
    entry = envd.call("filesystem.Filesystem/Stat",
                      {"path": os.path.join(box.user, "a", "f.txt")})["entry"]
    assert entry["name"] == "f.txt" and entry["type"] == "FILE_TYPE_FILE"
    assert entry["size"] == "5" and entry["mode"] == 0o644
    assert entry["permissions"] == "-rw-r--r--"
    assert entry["owner"] == "root" and entry["modifiedTime"].endswith("Z")
    link = envd.call("filesystem.Filesystem/Stat",
                     {"path": os.path.join(box.user, "link")})["entry"]
    assert link["type"] == "FILE_TYPE_FILE"
    assert link["symlinkTarget"] == os.path.join(box.user, "a", "f.txt")
    assert link["permissions"].startswith("L")
    names = lambda depth: [e["path"] for e in envd.call(
        "filesystem.Filesystem/ListDir",
        {"path": box.user, "depth": depth})["entries"]]
    a = os.path.join(box.user, "a")
    assert names(1) == [a, os.path.join(box.user, "link")]
    assert names(2) == [a, os.path.join(a, "b"), os.path.join(a, "f.txt"),
                        os.path.join(box.user, "link")]
    new = os.path.join(box.user, "x", "y", "z")
    made = envd.call("filesystem.Filesystem/MakeDir", {"path": new})["entry"]
    assert made["type"] == "FILE_TYPE_DIRECTORY" and made["path"] == new
    assert os.stat(new).st_uid == USER.pw_uid
    status, msg = envd.unary("filesystem.Filesystem/MakeDir", {"path": new})
    assert (status, msg["code"]) == (409, "already_exists")
    dst = os.path.join(box.user, "moved", "g.txt")
    moved = envd.call("filesystem.Filesystem/Move", {
        "source": os.path.join(a, "f.txt"), "destination": dst})["entry"]
    assert moved["path"] == dst and open(dst).read() == "12345"
    assert envd.call("filesystem.Filesystem/Remove", {"path": a}) == {}
    assert not os.path.exists(a)
    assert envd.call("filesystem.Filesystem/Remove", {"path": a}) == {}
    for method, body in (("Stat", {"path": a}), ("ListDir", {"path": a}),
                         ("Move", {"source": a, "destination": dst + "2"})):
        status, msg = envd.unary("filesystem.Filesystem/" + method, body)
        assert (status, msg["code"]) == (404, "not_found"), (method, msg)
    status, msg = envd.unary("filesystem.Filesystem/ListDir", {"path": dst})
    assert msg["code"] == "invalid_argument"


def test_paths_resolve_as_e2b_resolves_them(start_agent, box):
    """"" is the default workdir, relative paths and ~ are under the
    user's home. The user and its home are the test's own: the agent runs
    in a mount namespace where /etc/passwd is a copy naming them."""
    uid = 4242
    home = os.path.join(os.path.dirname(box.user), "home")
    os.mkdir(home)
    os.chown(home, uid, uid)
    passwd = os.path.join(os.path.dirname(box.user), "passwd")
    with open("/etc/passwd") as f:
        lines = f.read()
    with open(passwd, "w") as f:
        f.write(lines + f"envdtest:x:{uid}:{uid}::{home}:/bin/sh\n")
    wrapper = ("unshare", "--mount", "--", "sh", "-c",
               'mount --bind "$0" /etc/passwd && exec "$@"', passwd)
    envd = Envd(start_agent("--run-as", f"{uid}:{uid}", wrapper=wrapper))
    made = envd.call("filesystem.Filesystem/MakeDir",
                     {"path": "d/../d/sub"})["entry"]
    assert made["path"] == os.path.join(home, "d", "sub")
    entry = envd.call("filesystem.Filesystem/Stat", {"path": "~/d"})["entry"]
    assert entry["path"] == os.path.join(home, "d")
    assert entry["owner"] == "envdtest"
    assert envd.call("filesystem.Filesystem/Stat",
                     {"path": ""})["entry"]["path"] == home
    status, msg = envd.unary("filesystem.Filesystem/Stat",
                             {"path": "~root/x"})
    assert msg["code"] == "invalid_argument"


def test_watch_dir_sees_writes(envd, box):
    s = envd.stream("filesystem.Filesystem/WatchDir",
                    {"path": box.user, "recursive": True,
                     "includeEntry": True})
    assert s.status == 200 and s.next()[1] == {"start": {}}
    os.mkdir(os.path.join(box.user, "sub"))
    seen = []
    while not any(e["name"] == "sub" for e in seen):
        seen.append(s.next()[1]["filesystem"])
    # The new directory is watched too (recursive).
    time.sleep(0.2)
    with open(os.path.join(box.user, "sub", "f.txt"), "w") as f:
        f.write("x")
    while not any(e["name"] == "sub/f.txt" and e["type"] == "EVENT_TYPE_WRITE"
                  for e in seen):
        seen.append(s.next()[1]["filesystem"])
    create = [e for e in seen if e["name"] == "sub/f.txt"][0]
    assert create["type"] == "EVENT_TYPE_CREATE"
    assert create["entry"]["path"] == os.path.join(box.user, "sub", "f.txt")
    os.unlink(os.path.join(box.user, "sub", "f.txt"))
    while not any(e["type"] == "EVENT_TYPE_REMOVE" for e in seen):
        seen.append(s.next()[1]["filesystem"])
    assert "entry" not in seen[-1]
    s.close()
    status = envd.stream("filesystem.Filesystem/WatchDir",
                         {"path": box.secret}).end()[1]
    assert status["error"]["code"] == "permission_denied"
    status = envd.stream("filesystem.Filesystem/WatchDir",
                         {"path": box.user + "/nope"}).end()[1]
    assert status["error"]["code"] == "not_found"


def test_polled_watchers(envd, box):
    wid = envd.call("filesystem.Filesystem/CreateWatcher",
                    {"path": box.user})["watcherId"]
    with open(os.path.join(box.user, "p.txt"), "w") as f:
        f.write("x")
    events = []
    wait_for(lambda: events.extend(envd.call(
        "filesystem.Filesystem/GetWatcherEvents",
        {"watcherId": wid}).get("events", [])) or
        any(e["type"] == "EVENT_TYPE_WRITE" for e in events),
        what="the write's event")
    assert events[0] == {"name": "p.txt", "type": "EVENT_TYPE_CREATE"}
    assert envd.call("filesystem.Filesystem/RemoveWatcher",
                     {"watcherId": wid}) == {}
    status, msg = envd.unary("filesystem.Filesystem/GetWatcherEvents",
                             {"watcherId": wid})
    assert (status, msg["code"]) == (404, "not_found")


def test_watchers_are_bounded(envd, box):
    ids = [envd.call("filesystem.Filesystem/CreateWatcher",
                     {"path": box.user})["watcherId"] for _ in range(64)]
    status, msg = envd.unary("filesystem.Filesystem/CreateWatcher",
                             {"path": box.user})
    assert (status, msg["code"]) == (429, "resource_exhausted")
    envd.call("filesystem.Filesystem/RemoveWatcher", {"watcherId": ids[0]})
    envd.call("filesystem.Filesystem/CreateWatcher", {"path": box.user})


# REST.

def test_files_up_and_down_byte_exact(envd, box):
    data = bytes(range(256)) * 4096 + os.urandom(300000)
    path = os.path.join(box.user, "deep", "dir", "blob.bin")
    r = files_post(envd, [(path, data)], path=path)
    assert r.status_code == 200, r.text
    assert r.json() == [{"name": "blob.bin", "type": "file", "path": path}]
    st = os.stat(path)
    assert (st.st_uid, st.st_gid) == (USER.pw_uid, USER.pw_gid)
    assert os.stat(os.path.dirname(path)).st_uid == USER.pw_uid
    r = files_get(envd, path)
    assert r.status_code == 200
    assert r.headers["Content-Type"] == "application/octet-stream"
    assert hashlib.sha256(r.content).digest() == hashlib.sha256(data).digest()
    # Several files in one request, each part's filename its path; the
    # second overwrites a file in place.
    one, two = os.path.join(box.user, "one"), path
    r = files_post(envd, [(one, b"1"), (two, b"2")])
    assert [e["path"] for e in r.json()] == [one, two]
    assert files_get(envd, two).content == b"2"
    # A raw body, gzipped, with metadata; an empty file.
    raw = os.path.join(box.user, "raw.txt")
    r = requests.post(envd.url + "/files", params={"path": raw},
                      data=gzip.compress(b"raw " * 100000), timeout=60,
                      headers=envd.headers(extra={
                          "Content-Type": "application/octet-stream",
                          "Content-Encoding": "gzip",
                          "X-Metadata-Owner": "test"}))
    assert r.status_code == 200, r.text
    assert r.json()[0]["metadata"] == {"owner": "test"}
    assert files_get(envd, raw).content == b"raw " * 100000
    assert envd.call("filesystem.Filesystem/Stat", {"path": raw})[
        "entry"]["metadata"] == {"owner": "test"}
    assert files_post(envd, [("x", b"")], path=raw).status_code == 200
    r = files_get(envd, raw)
    assert r.content == b"" and r.headers["Content-Length"] == "0"


def test_many_large_files_in_one_upload(envd, box):
    blobs = [(os.path.join(box.user, f"f{i}.bin"), os.urandom(3 << 20))
             for i in range(4)] + [(os.path.join(box.user, "tiny"), b"t")]
    r = files_post(envd, blobs)
    assert r.status_code == 200, r.text
    assert [e["path"] for e in r.json()] == [p for p, _ in blobs]
    for path, data in blobs:
        assert files_get(envd, path).content == data


def test_files_errors(envd, box):
    for path, status in ((box.user + "/missing", 404), (box.user, 400),
                         (os.path.join(box.secret, "key"), 403)):
        r = files_get(envd, path)
        assert r.status_code == status, (path, r.text)
        assert r.json()["code"] == status
    r = files_get(envd, box.user + "/x", username="no-such-user")
    assert (r.status_code, r.json()["code"]) == (401, 401)
    r = files_post(envd, [("a", b"1"), ("b", b"2")], path=box.user + "/same")
    assert r.status_code == 400
    r = files_post(envd, [("x", b"1")], path=box.user)
    assert r.status_code == 400


def test_health_envs_init(envd, box):
    r = requests.get(envd.url + "/health", headers=envd.headers(), timeout=10)
    assert r.status_code == 204 and r.content == b""
    r = envd.agent.post("/envd/init", {"envVars": {"SBX": "yes"},
                                       "accessToken": "ignored",
                                       "timestamp": "2024-01-01T00:00:00Z"})
    assert r.status_code == 204
    assert envd.agent.get("/envd/envs").json() == {"SBX": "yes"}
    out, _, _ = envd.run("echo $SBX")
    assert out == b"yes\n"
    r = envd.agent.post("/envd/init", {"caBundle": "---"})
    assert r.status_code == 400 and r.json()["code"] == 400


def test_metrics_are_envds(envd):
    """/metrics as E2B's envd answers it: the root file system's size and
    use (statvfs, used = all but what is available), memory as
    /proc/meminfo has it, the CPUs the agent may use."""
    before = int(time.time())
    r = envd.agent.get("/envd/metrics")
    after = time.time()
    assert r.status_code == 200, r.text
    m = r.json()
    assert set(m) == {"ts", "cpu_count", "cpu_used_pct", "mem_total",
                      "mem_used", "mem_cache", "mem_total_mib",
                      "mem_used_mib", "disk_used", "disk_total"}
    fs = os.statvfs("/")
    assert m["disk_total"] == fs.f_blocks * fs.f_frsize
    assert 0 < m["disk_used"] <= m["disk_total"]
    with open("/proc/meminfo") as f:
        total = int(f.readline().split()[1]) * 1024
    assert m["mem_total"] == total and m["mem_total_mib"] == total >> 20
    assert 0 < m["mem_used"] < total and 0 <= m["mem_cache"] < total
    assert m["cpu_count"] == len(os.sched_getaffinity(envd.agent.proc.pid))
    assert 0 <= m["cpu_used_pct"] <= 100
    assert before <= m["ts"] <= after


# The user's credentials, and nothing of the agent's.

def test_root_only_paths_are_refused_as_eacces(envd, box):
    key = os.path.join(box.secret, "key")
    for method, body in (("Stat", {"path": key}),
                         ("ListDir", {"path": box.secret}),
                         ("MakeDir", {"path": box.secret + "/new"}),
                         ("Remove", {"path": key}),
                         ("Move", {"source": key,
                                   "destination": box.user + "/stolen"})):
        status, msg = envd.unary("filesystem.Filesystem/" + method, body)
        assert (status, msg["code"]) == (403, "permission_denied"), method
    assert open(key).read() == "root's eyes only"
    r = files_post(envd, [("x", b"mine")], path=box.secret + "/planted")
    assert r.status_code == 403
    assert os.listdir(box.secret) == ["key"]
    out, err, end = envd.run(f"cat {key}")
    assert end["exitCode"] != 0 and b"Permission denied" in err


def test_root_and_unknown_users(envd, box):
    for method, body in (("filesystem.Filesystem/Stat", {"path": "/"}),
                         ("filesystem.Filesystem/MakeDir",
                          {"path": box.user + "/r"})):
        status, msg = envd.unary(method, body, user="root")
        assert (status, msg["code"]) == (403, "permission_denied")
        status, msg = envd.unary(method, body, user="no-such-user")
        assert (status, msg["code"]) == (401, "unauthenticated")
    s = envd.stream("process.Process/Start", {"process": {"cmd": "/bin/id"}},
                    user="root")
    assert s.end()[1]["error"]["code"] == "permission_denied"
    r = files_get(envd, "/etc/hostname", username="root")
    assert r.status_code == 403
    # The user by name works as the default does.
    entry = envd.call("filesystem.Filesystem/MakeDir",
                      {"path": box.user + "/named"}, user=USER.pw_name)
    assert os.stat(entry["entry"]["path"]).st_uid == USER.pw_uid


def test_without_run_as_envd_acts_as_the_agents_user(start_agent, box):
    """A root-mode type (no --run-as): commands run as the agent, and so
    do envd's by default; another user may still be named."""
    envd = Envd(start_agent())
    out, _, end = envd.run("", process={
        "cmd": "/bin/sh", "args": ["-c", "id -u"], "cwd": box.user})
    assert out == b"0\n"
    path = os.path.join(box.user, "as-named")
    assert files_post(envd, [("x", b"1")], path=path,
                      username=USER.pw_name).status_code == 200
    assert os.stat(path).st_uid == USER.pw_uid
    r = files_get(envd, os.path.join(box.secret, "key"),
                  username=USER.pw_name)
    assert r.status_code == 403


def test_the_agents_token_and_proc_are_out_of_reach(envd):
    pid = envd.agent.proc.pid
    token = envd.agent.token.encode()
    for path in (f"/proc/{pid}/environ", f"/proc/{pid}/mem",
                 f"/proc/{pid}/fd/0", f"/proc/{pid}/root/etc/hostname"):
        r = files_get(envd, path)
        assert r.status_code == 403, (path, r.status_code)
        assert token not in r.content
    # What anyone may read of a process, the user may too.
    r = files_get(envd, f"/proc/{pid}/cmdline")
    assert r.status_code == 200 and token not in r.content
    status, msg = envd.unary("filesystem.Filesystem/ListDir",
                             {"path": f"/proc/{pid}/fd"})
    assert msg["code"] == "permission_denied"
    # /proc/self is the user's own (undumpable) helper, which holds
    # nothing of ours.
    for path in ("/proc/self/environ", "/proc/self/cmdline",
                 "/proc/self/maps"):
        r = files_get(envd, path)
        assert r.status_code in (200, 403) and token not in r.content
    # A process of the user's through and through, not the agent (as a
    # thread of the agent with the user's file-system ids would be).
    status = files_get(envd, "/proc/self/status").text
    uids = [line.split()[1:] for line in status.splitlines()
            if line.startswith("Uid:")][0]
    assert uids == [str(USER.pw_uid)] * 4
    assert f"Pid:\t{pid}\n" not in status
    out, err, _ = envd.run(f"cat /proc/{pid}/environ /proc/1/environ; "
                           f"ls /proc/{pid}/fd; cat /proc/self/environ")
    assert token not in out + err


def test_a_user_process_cannot_reach_into_the_file_helper(envd, box):
    """The helper runs as the user, but undumpable: no process of the user
    may open its memory or its descriptors (its socket to the agent)."""
    envd.call("filesystem.Filesystem/Stat", {"path": box.user})
    helpers = [p for p in os.listdir("/proc") if p.isdigit() and
               open(f"/proc/{p}/cmdline", "rb").read() ==
               b"sandbox-agent\0--envd-fs-helper\0"]
    assert helpers
    pid = helpers[0]
    assert os.stat(f"/proc/{pid}").st_uid == USER.pw_uid
    out, err, end = envd.run(
        f"head -c 16 /proc/{pid}/mem; ls /proc/{pid}/fd; "
        f"cat /proc/{pid}/fd/3; cat /proc/{pid}/environ; echo reached")
    assert out == b"reached\n", (out, err)
    assert err.count(b"Permission denied") == 4, err


# Hostile requests: a clear error and nothing else.

def test_bad_envelopes_and_messages(envd, box):
    marker = os.path.join(box.user, "ran")
    start = {"process": {"cmd": "/bin/touch", "args": [marker]}}
    cases = [
        (envelope(start)[:8], "invalid_argument"),		# cut short
        (envelope(start) + envelope(start), "invalid_argument"),
        (envelope(start, flags=0x01), "unimplemented"),	# compressed
        (envelope(start, flags=0x02), "invalid_argument"),
        (envelope(b"{not json"), "invalid_argument"),
        (envelope(b"[1, 2]"), "invalid_argument"),
        (envelope({"process": "x"}), "invalid_argument"),
        (envelope({"process": {"cmd": 5}}), "invalid_argument"),
        (b"\x00\x7f\xff\xff\xff" + b"{}", "resource_exhausted"),
    ]
    for raw, code in cases:
        s = envd.stream("process.Process/Start", None, raw=raw)
        assert s.status == 200, raw
        events, eos = s.end()
        assert events == [] and eos["error"]["code"] == code, (raw, eos)
    assert not os.path.exists(marker)


def test_unknown_rpcs_bad_headers_and_huge_bodies(envd):
    status, msg = envd.unary("process.Process/Nope", {})
    assert (status, msg["code"]) == (501, "unimplemented")
    events, eos = envd.stream("nope.Nope/Start", {}).end()
    assert eos["error"]["code"] == "unimplemented"
    r = requests.post(envd.url + "/process.Process/List", data="{}",
                      headers=envd.headers(extra={"Content-Type":
                                                  "application/proto"}),
                      timeout=10)
    assert r.status_code == 415 and r.json()["code"] == "invalid_argument"
    status, msg = envd.unary("process.Process/List", {}, headers={
        "Content-Encoding": "gzip"})
    assert msg["code"] == "unimplemented"
    s = envd.stream("process.Process/Start", {"process": {"cmd": "/bin/true"}},
                    headers={"Connect-Timeout-Ms": "soon"})
    assert s.end()[1]["error"]["code"] == "invalid_argument"
    status, msg = envd.unary("filesystem.Filesystem/Stat", {"path": "/"},
                             headers={"E2b-Authorization": "Bearer x"})
    assert (status, msg["code"]) == (401, "unauthenticated")
    big = json.dumps({"path": "x" * (5 * 1024 * 1024)})
    r = requests.post(envd.url + "/filesystem.Filesystem/Stat", data=big,
                      headers=envd.headers(extra={"Content-Type":
                                                  "application/json"}),
                      timeout=60)
    assert (r.status_code, r.json()["code"]) == (429, "resource_exhausted")
    status, msg = envd.unary("filesystem.Filesystem/Stat",
                             {"path": "/" + "x" * 5000})
    assert msg["code"] == "invalid_argument"


def test_nothing_before_the_agents_token(envd):
    r = requests.post(envd.url + "/process.Process/Start",
                      data=envelope({"process": {"cmd": "/bin/true"}}),
                      headers={"Content-Type": "application/connect+json"},
                      timeout=10)
    assert r.status_code == 403
    assert r.json() == {"detail": "Not authenticated"}
