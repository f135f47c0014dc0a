"""The workspace file routes and git under attack from the sandbox's own
user: the agent runs as root with --run-as (as every image runs it), the
workspace belongs to that user, and a process of theirs races the agent.
Each test reproduces a finding of issue 10 against the real binary.

The test process is root; it acts as the sandbox user from a forked child
that drops to the --run-as ids (as the agent's own commands do).
"""
import concurrent.futures
import ctypes
import http.client
import json
import os
import select
import shutil
import stat
import struct
import subprocess
import tempfile
import time

import pytest

RUN_AS = (4321, 4321)
HIDDEN = ".sandbox-upload-"


def as_user(fn, *args):
    """Fork a child that runs fn(*args) as the --run-as user; its pid."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgroups([])
            os.setgid(RUN_AS[1])
            os.setuid(RUN_AS[0])
            fn(*args)
            code = 0
        finally:
            os._exit(code)
    return pid


def wait_child(pid, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    raise AssertionError("the user's process did not finish")


@pytest.fixture
def user_workspace(tmp_workspace):
    """The workspace, owned by the --run-as user; its parent may be
    traversed, as a container's / can."""
    os.chmod(os.path.dirname(tmp_workspace), 0o755)
    os.chown(tmp_workspace, *RUN_AS)
    return tmp_workspace


@pytest.fixture
def hostile_agent(start_agent, user_workspace):
    return start_agent("--run-as", "%d:%d" % RUN_AS)


@pytest.fixture
def secret(user_workspace):
    """A root-only file outside the workspace, and its state."""
    outside = os.path.join(os.path.dirname(user_workspace), "outside")
    os.mkdir(outside, 0o700)
    path = os.path.join(outside, "secret")
    with open(path, "w") as f:
        f.write("root's alone")
    os.chmod(path, 0o600)
    return path


def state(path):
    st = os.lstat(path)
    with open(path, "rb") as f:
        return (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, f.read())


# Item 1: root chmods any path through a symlink renamed over a staged
# upload.

IN_CREATE = 0x100
IN_MOVED_TO = 0x80
IN_ISDIR = 0x40000000


def attacker(ws, target, stop, report_fd):
    """Watch the workspace root and swap every hidden upload name for a
    symlink to target, as fast as inotify tells of one; a directory is
    looked into and, failing that, swapped for a symlink to target's
    directory. Each attempt goes to report_fd as one line."""
    libc = ctypes.CDLL(None, use_errno=True)
    ino = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    if libc.inotify_add_watch(ino, ws.encode(), IN_CREATE | IN_MOVED_TO) < 0:
        raise OSError(ctypes.get_errno(), "inotify_add_watch")
    os.write(report_fd, b"ready\n")
    n = 0
    ours = set()    # names our own renames made: not the agent's
    deadline = time.time() + 60
    while not os.path.exists(stop) and time.time() < deadline:
        if not select.select([ino], [], [], 0.05)[0]:
            continue
        buf = os.read(ino, 65536)
        off = 0
        while off < len(buf):
            _, mask, _, size = struct.unpack_from("iIII", buf, off)
            name = buf[off + 16:off + 16 + size].rstrip(b"\0").decode()
            off += 16 + size
            if not name.startswith(HIDDEN) or name in ours:
                continue
            ours.add(name)
            p = os.path.join(ws, name)
            tmp = os.path.join(ws, "attack%d" % n)
            n += 1
            try:
                if mask & IN_ISDIR:
                    try:
                        os.listdir(p)
                        os.write(report_fd, b"listed the stage\n")
                    except OSError:
                        os.write(report_fd, b"stage closed to us\n")
                    os.rename(p, tmp + ".moved")
                    os.symlink(os.path.dirname(target), tmp)
                    os.rename(tmp, p)
                    os.write(report_fd, b"swapped a directory\n")
                else:
                    os.symlink(target, tmp)
                    os.rename(tmp, p)
                    os.write(report_fd, b"swapped a file\n")
            except OSError as e:
                os.write(report_fd, ("failed: %s\n" % e).encode())


def slow_request(agent, method, path, headers, pieces, between):
    """Send the body in pieces, calling between() after each but the last;
    the status and the JSON answer."""
    conn = http.client.HTTPConnection("127.0.0.1", agent.port, timeout=60)
    conn.putrequest(method, path)
    conn.putheader("Authorization", f"Bearer {agent.token}")
    for k, v in headers.items():
        conn.putheader(k, v)
    conn.putheader("Content-Length", str(sum(map(len, pieces))))
    conn.endheaders()
    for i, piece in enumerate(pieces):
        conn.send(piece)
        if i < len(pieces) - 1:
            between()
    r = conn.getresponse()
    body = r.read()
    conn.close()
    return r.status, body


def read_reports(fd, want, timeout=10):
    """Lines from the attacker until one of want (or the timeout)."""
    got = b""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if select.select([fd], [], [], 0.05)[0]:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            got += chunk
            if any(w in got for w in want):
                break
    return got.decode()


def test_a_symlink_renamed_over_a_staged_batch_file_changes_nothing_outside(
        hostile_agent, secret):
    ws = hostile_agent.workspace
    victim = os.path.join(ws, "victim.txt")
    with open(victim, "w") as f:
        f.write("the user's old file")
    os.chmod(victim, 0o666)
    os.chown(victim, *RUN_AS)
    before = state(secret)
    stop = os.path.join(os.path.dirname(ws), "stop-attack")
    rfd, wfd = os.pipe()
    pid = as_user(attacker, ws, secret, stop, wfd)
    os.close(wfd)
    try:
        assert "ready" in read_reports(rfd, [b"ready"])
        content = b"uploaded by the client\n" * 4000
        head = (b"--BB\r\nContent-Disposition: form-data; name=\"paths\""
                b"\r\n\r\nvictim.txt\r\n--BB\r\nContent-Disposition: "
                b"form-data; name=\"files\"; filename=\"v\"\r\n\r\n")
        tail = b"\r\n--BB--\r\n"
        seen = []
        status, body = slow_request(
            hostile_agent, "POST", "/workspace/files:batch",
            {"Content-Type": "multipart/form-data; boundary=BB"},
            [head + content[:1000], content[1000:] + tail],
            lambda: seen.append(read_reports(
                rfd, [b"swapped", b"failed"])))
        open(stop, "w").close()
        assert wait_child(pid) == 0
        seen.append(read_reports(rfd, [], timeout=0.2))
    finally:
        open(stop, "w").close()
        os.close(rfd)
    # The race was run: the user's process saw the upload's staging.
    assert "".join(seen).strip(), seen
    # Nothing outside the workspace changed, whatever the race did.
    assert state(secret) == before
    assert stat.S_IMODE(os.stat(os.path.dirname(secret)).st_mode) == 0o700
    # The upload landed, as the regular file it is, or failed: never a
    # 200 for a symlink the user put in its place.
    if status == 200:
        info = json.loads(body)
        assert [i["type"] for i in info] == ["file"], info
        st = os.lstat(victim)
        assert stat.S_ISREG(st.st_mode)
        with open(victim, "rb") as f:
            assert f.read() == content
    else:
        # Failing is fine, with any error: the race may also hit the
        # staging directory's own name (404: not a directory).
        assert 400 <= status < 600, body
    assert hostile_agent.get("/healthz").status_code == 200



def test_a_symlink_renamed_over_a_replacing_upload_changes_nothing_outside(
        hostile_agent, secret):
    # A PUT over an existing file passes through a hidden name for a
    # moment (a link never replaces); the user's process races it.
    ws = hostile_agent.workspace
    victim = os.path.join(ws, "victim.txt")

    def reset():
        if os.path.lexists(victim):
            os.unlink(victim)
        with open(victim, "w") as f:
            f.write("the user's old file")
        os.chmod(victim, 0o666)
        os.chown(victim, *RUN_AS)

    reset()
    before = state(secret)
    stop = os.path.join(os.path.dirname(ws), "stop-attack")
    rfd, wfd = os.pipe()
    pid = as_user(attacker, ws, secret, stop, wfd)
    os.close(wfd)
    statuses = []
    try:
        assert "ready" in read_reports(rfd, [b"ready"])
        for i in range(100):
            data = b"upload %d\n" % i
            r = hostile_agent.put("/workspace/file",
                                  params={"path": "victim.txt"}, data=data)
            statuses.append(r.status_code)
            assert state(secret) == before, i
            if r.status_code == 200:
                assert r.json()["type"] == "file"
                assert stat.S_ISREG(os.lstat(victim).st_mode)
                with open(victim, "rb") as f:
                    assert f.read() == data
            else:
                assert r.status_code == 409, r.text
                reset()
        open(stop, "w").close()
        assert wait_child(pid) == 0
        reports = read_reports(rfd, [], timeout=0.2)
    finally:
        open(stop, "w").close()
        os.close(rfd)
    # The race was run, and uploads still got through.
    assert "swapped a file" in reports
    assert 200 in statuses



def dir_attacker(ws, root_dir, stop, report_fd):
    """Each new directory named new* in the workspace root is swapped, as
    soon as inotify tells, for root_dir (root's, in the workspace, so the
    user may rename it but not change it)."""
    libc = ctypes.CDLL(None, use_errno=True)
    ino = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    if libc.inotify_add_watch(ino, ws.encode(), IN_CREATE) < 0:
        raise OSError(ctypes.get_errno(), "inotify_add_watch")
    os.write(report_fd, b"ready\n")
    cur = root_dir
    deadline = time.time() + 60
    while not os.path.exists(stop) and time.time() < deadline:
        if not select.select([ino], [], [], 0.05)[0]:
            continue
        buf = os.read(ino, 65536)
        off = 0
        while off < len(buf):
            _, mask, _, size = struct.unpack_from("iIII", buf, off)
            name = buf[off + 16:off + 16 + size].rstrip(b"\0").decode()
            off += 16 + size
            if not (mask & IN_ISDIR) or not name.startswith("new"):
                continue
            p = os.path.join(ws, name)
            try:
                os.rename(p, p + ".made")
                os.rename(cur, p)
                cur = p
                os.write(report_fd, b"swapped a directory\n")
            except OSError as e:
                os.write(report_fd, ("failed: %s\n" % e).encode())


def test_a_directory_swapped_for_a_new_one_is_not_given_to_the_user(
        hostile_agent):
    ws = hostile_agent.workspace
    root_dir = os.path.join(ws, "roots")
    os.mkdir(root_dir, 0o755)
    with open(os.path.join(root_dir, "keep.txt"), "w") as f:
        f.write("root's")
    ino = os.stat(root_dir).st_ino
    stop = os.path.join(os.path.dirname(ws), "stop-attack")
    rfd, wfd = os.pipe()
    pid = as_user(dir_attacker, ws, root_dir, stop, wfd)
    os.close(wfd)
    try:
        assert "ready" in read_reports(rfd, [b"ready"])
        for i in range(100):
            r = hostile_agent.post("/workspace/mkdir", {"path": "new%d" % i})
            # 404: the name was between the user's two renames.
            assert r.status_code in (200, 404), r.text
        open(stop, "w").close()
        assert wait_child(pid) == 0
        reports = read_reports(rfd, [], timeout=0.2)
    finally:
        open(stop, "w").close()
        os.close(rfd)
    assert "swapped a directory" in reports
    moved = [e for e in os.scandir(ws) if e.inode() == ino]
    assert len(moved) == 1
    st = os.stat(moved[0].path)
    assert (st.st_uid, st.st_gid) == (0, 0)
    # The directories the agent made are the user's from the start.
    made = [e for e in os.scandir(ws) if e.name.startswith("new") and
            e.inode() != ino]
    assert made and all(os.stat(e.path).st_uid == RUN_AS[0] for e in made)


# Item 9: git under --run-as with root's HOME; the workspace the agent
# makes when it is missing.

def commit(agent, message):
    r = agent.post("/watcher/commit_changes", {"commit_message": message})
    assert r.status_code == 200, r.text
    return r.json()["commit"]


def test_git_routes_work_under_run_as_with_roots_home(start_agent,
                                                      user_workspace):
    # HOME as root has it in a container: a directory the user cannot
    # enter, so libgit2 could not even stat ~/.gitconfig there.
    assert os.stat("/root").st_mode & 0o001 == 0
    a = start_agent("--run-as", "%d:%d" % RUN_AS,
                    env={"HOME": "/root", "XDG_CONFIG_HOME": "/root/.config"})
    r = a.get("/watcher/git_logs")
    assert r.status_code == 200, r.text
    assert r.json() == {"logs": []}
    with open(os.path.join(user_workspace, "a.txt"), "w") as f:
        f.write("a\n")
    os.chown(os.path.join(user_workspace, "a.txt"), *RUN_AS)
    sha = commit(a, "first")
    r = a.post("/watcher/generate_diff", {})
    assert r.status_code == 200 and r.json() == {"diffs": {}}, r.text
    assert [c["commit"] for c in a.get("/watcher/git_logs").json()["logs"]] \
        == [sha]


def test_roots_git_configuration_does_not_reach_the_users_repository(
        start_agent, user_workspace):
    home = os.path.join(os.path.dirname(user_workspace), "roothome")
    os.mkdir(home, 0o755)
    with open(os.path.join(home, ".gitconfig"), "w") as f:
        f.write("[user]\n\tname = Root Leak\n\temail = root@leak.example\n")
    a = start_agent("--run-as", "%d:%d" % RUN_AS,
                    env={"HOME": home,
                         "XDG_CONFIG_HOME": os.path.join(home, ".config")})
    commit(a, "who am I")
    logs = a.get("/watcher/git_logs").json()["logs"]
    # The user has no configuration of their own: the protocol's fallback.
    assert [c["author"] for c in logs] == ["User"]


def test_git_reads_the_workspace_with_the_users_groups_only(start_agent,
                                                            user_workspace):
    # The agent's supplementary groups (Docker gives root disk, adm and
    # more) must not let its git read what the user cannot, into objects
    # the user can read. The agent inherits this group from us.
    group = 4242
    saved = os.getgroups()
    os.setgroups([group])
    try:
        # A HOME the user may read: only the groups are at stake here.
        a = start_agent("--run-as", "%d:%d" % RUN_AS, env={"HOME": "/"})
    finally:
        os.setgroups(saved)
    path = os.path.join(user_workspace, "group-only.txt")
    with open(path, "w") as f:
        f.write("for the group\n")
    os.chown(path, 0, group)
    os.chmod(path, 0o640)
    r = a.post("/watcher/commit_changes", {"commit_message": "try"})
    assert r.status_code != 200, r.text
    assert "detail" in r.json()
    res = a.shell("git ls-files; cat .git/objects/*/* | wc -c")
    assert "group-only.txt" not in str(res)


def test_a_workspace_the_agent_makes_is_the_users(start_agent,
                                                  tmp_workspace):
    top = os.path.dirname(tmp_workspace)
    os.chmod(top, 0o755)
    ws = os.path.join(top, "made")
    a = start_agent("--run-as", "%d:%d" % RUN_AS, workspace=ws)
    st = os.stat(ws)
    assert (st.st_uid, st.st_gid) == RUN_AS
    res = a.shell("echo mine > by-the-user.txt")
    made = os.path.join(ws, "by-the-user.txt")
    assert os.path.exists(made), res
    assert os.stat(made).st_uid == RUN_AS[0]


# Item 8: resource failures answer errors; slow disk work stays off the
# event loop.

class PidsCgroup:
    """A pids cgroup of our own (v1 or v2, whichever the machine has), the
    way a container's pids limit holds the agent."""

    def __init__(self):
        v1 = "/sys/fs/cgroup/pids"
        if os.path.exists(os.path.join(v1, "cgroup.procs")):
            base = v1
        else:
            base = "/sys/fs/cgroup"
            with open(os.path.join(base, "cgroup.controllers")) as f:
                assert "pids" in f.read().split(), \
                    "no pids cgroup controller on this machine"
            with open(os.path.join(base, "cgroup.subtree_control"), "w") as f:
                f.write("+pids")
        self.path = os.path.join(base, "sbx-test-%d" % os.getpid())
        os.mkdir(self.path)

    def write(self, name, value):
        with open(os.path.join(self.path, name), "w") as f:
            f.write(str(value))

    def remove(self):
        deadline = time.time() + 10
        while True:
            try:
                os.rmdir(self.path)
                return
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.05)


@pytest.fixture
def pids_cgroup():
    cg = PidsCgroup()
    yield cg
    cg.remove()


def test_at_the_pids_limit_uploads_answer_503_and_the_agent_serves_on(
        pids_cgroup, hostile_agent):
    a = hostile_agent
    with open(os.path.join(a.workspace, "here.txt"), "wb") as f:
        f.write(b"x" * 100000)
    pids_cgroup.write("cgroup.procs", a.proc.pid)
    # As a command that forked up to the limit leaves it: no new task,
    # not even a thread, can start in the sandbox.
    pids_cgroup.write("pids.max", 1)
    big = os.urandom(200 * 1024)
    r = a.put("/workspace/file", params={"path": "big.bin"}, data=big)
    assert r.status_code == 503, r.text
    assert "limit of processes" in r.json()["detail"]
    r = a.post("/workspace/files:batch",
               files=[("files", ("b.bin", big)), ("paths", (None, "b.bin"))])
    assert r.status_code == 503, r.text
    for r in [a.get("/workspace/file", params={"path": "here.txt"}),
              a.delete("/workspace/entry", params={"path": "here.txt"})]:
        assert r.status_code == 503, r.text
        assert "detail" in r.json()
    assert a.proc.poll() is None
    assert a.get("/healthz").status_code == 200
    # Small uploads need no thread of their own.
    r = a.put("/workspace/file", params={"path": "small.txt"}, data=b"s")
    assert r.status_code == 200, r.text
    assert sorted(os.listdir(a.workspace)) == ["here.txt", "small.txt"]
    pids_cgroup.write("pids.max", "max")
    r = a.put("/workspace/file", params={"path": "big.bin"}, data=big)
    assert r.status_code == 200, r.text
    assert a.get("/workspace/file", params={"path": "big.bin",
                                            "format": "bytes"}).content == big
    r = a.delete("/workspace/entry", params={"path": "here.txt"})
    assert r.status_code == 204


@pytest.fixture
def shm_workspace():
    """A workspace on tmpfs, where a tree of many files is quick to make."""
    top = tempfile.mkdtemp(prefix="sbx-test-", dir="/dev/shm")
    ws = os.path.join(top, "workspace")
    os.mkdir(ws)
    yield ws
    shutil.rmtree(top, ignore_errors=True)


def test_a_huge_delete_does_not_hold_up_the_agent(shm_workspace,
                                                  start_agent):
    a = start_agent(workspace=shm_workspace)
    tree = os.path.join(shm_workspace, "tree")
    for d in range(50):
        os.makedirs(os.path.join(tree, "d%d" % d))
        for i in range(1000):
            os.close(os.open(os.path.join(tree, "d%d" % d, "f%d" % i),
                             os.O_CREAT | os.O_WRONLY, 0o644))
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        gone = pool.submit(a.delete, "/workspace/entry",
                           params={"path": "tree"})
        while os.path.exists(tree) and len(os.listdir(tree)) == 50:
            assert not gone.done(), gone.result().text
            time.sleep(0.001)
        r = a.get("/healthz", timeout=120)
        # Answered before the delete finished: the tree is still there.
        still_there = os.path.exists(tree)
        assert gone.result(timeout=300).status_code == 204
    assert r.status_code == 200
    assert still_there
    assert not os.path.exists(tree)


# Item 8: GET /watcher/git_logs over a history the user wrote.

def make_history(ws, commits):
    """Commits (each {path: bytes}) written with git fast-import, oldest
    first, by the user who owns the workspace."""
    env = dict(os.environ, HOME="/nonexistent", GIT_CONFIG_NOSYSTEM="1")
    subprocess.run(["git", "init", "-q", ws], check=True, env=env)
    stream = []
    for i, files in enumerate(commits):
        msg = b"commit %d" % i
        stream.append(b"commit refs/heads/master\ncommitter U <u@example.com> "
                      b"%d +0000\ndata %d\n%s\n" % (1700000000 + i, len(msg),
                                                    msg))
        for path, data in files.items():
            stream.append(b"M 100644 inline %s\ndata %d\n%s\n" % (
                path.encode(), len(data), data))
    git = ["git", "-c", "safe.directory=*", "-C", ws]
    subprocess.run(git + ["fast-import", "--quiet"],
                   input=b"".join(stream), check=True, env=env)
    subprocess.run(git + ["symbolic-ref", "HEAD", "refs/heads/master"],
                   check=True, env=env)
    for dirpath, dirnames, filenames in os.walk(ws):
        for name in dirnames + filenames + ["."]:
            os.lchown(os.path.join(dirpath, name), *RUN_AS)


@pytest.fixture
def git_hostile_agent(start_agent, user_workspace):
    # A HOME the user may read: the log's bounds are at stake here.
    return start_agent("--run-as", "%d:%d" % RUN_AS, env={"HOME": "/"})


def logs(agent, **params):
    r = agent.get("/watcher/git_logs", params=params)
    return r.status_code, r.json(), len(r.content)


def test_git_logs_of_a_long_history_come_a_page_at_a_time(git_hostile_agent):
    a = git_hostile_agent
    make_history(a.workspace, [{"n.txt": b"%d\n" % i} for i in range(150)])
    status, body, _ = logs(a)
    assert status == 200 and set(body) == {"logs"}
    # Not the whole history unless asked: a default page, newest first.
    assert [c["message"] for c in body["logs"]] == \
        ["commit %d" % i for i in range(149, 49, -1)]
    status, body, _ = logs(a, limit=30, offset=140)
    assert status == 200
    assert [c["message"] for c in body["logs"]] == \
        ["commit %d" % i for i in range(9, -1, -1)]
    assert body["logs"][0]["diff"] == {
        "n.txt": "--- a/n.txt\n+++ b/n.txt\n@@ -1 +1 @@\n-8\n+9"}
    assert logs(a, offset=150)[:2] == (200, {"logs": []})
    for bad in [{"limit": 0}, {"limit": 1001}, {"limit": "x"},
                {"offset": -1}, {"offset": "1e3"}]:
        status, body, _ = logs(a, **bad)
        assert status == 400 and "detail" in body, bad


def test_git_logs_are_bounded_whatever_the_diffs(git_hostile_agent):
    a = git_hostile_agent
    mib = 1024 * 1024

    def text(tag, size):
        line = b"%s %s\n" % (tag, b"x" * 50)
        return (line * (size // len(line) + 1))[:size]

    make_history(a.workspace, [
        {"small.txt": b"a\n"},
        # 40 files of 1 MiB: some 40 MiB of diff in one commit.
        {"big/%02d.txt" % i: text(b"%d" % i, mib) for i in range(40)},
        # Past the size a blob is diffed at: shown as binary, never read.
        {"huge.txt": text(b"huge", 3 * mib)},
        {"small.txt": b"b\n"},
    ])
    status, body, size = logs(a)
    # The page ends before the commit that would make it too large.
    assert status == 200, body
    assert size <= 32 * mib
    assert [c["message"] for c in body["logs"]] == ["commit 3", "commit 2"]
    assert body["logs"][1]["diff"] == {"huge.txt": "--- a/huge.txt\n+++ "
                                       "b/huge.txt\nBinary files a/huge.txt "
                                       "and b/huge.txt differ"}
    status, body, size = logs(a, offset=2)
    assert status == 413, size
    assert "generate_diff" in body["detail"]
    assert [c["message"] for c in logs(a, offset=3)[1]["logs"]] == \
        ["commit 0"]
    # The big commit is still there for the diff route.
    r = a.post("/watcher/generate_diff", {"commit_a": "HEAD~3",
                                          "commit_b": "HEAD~2"})
    assert r.status_code == 200 and len(r.json()["diffs"]) == 40
