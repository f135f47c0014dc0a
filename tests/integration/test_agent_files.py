"""The /workspace routes of the agent, over real HTTP against the real binary."""
import hashlib
import os
import socket
import stat
import time

import pytest
import requests

from conftest import rss_kib

ENTRY_KEYS = {"path", "name", "type", "size", "mtime_ms"}


def wait_for(predicate, timeout=15, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def tree(root):
    """{relative path: (kind, content or link target)} of everything under
    root, symlinks not followed: to show that nothing changed on disk."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", None)
            else:
                with open(p, "rb") as f:
                    out[rel] = ("file", f.read())
    return out


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def put(agent, path, data, **kw):
    return agent.put("/workspace/file", params={"path": path}, data=data, **kw)


def get(agent, path, fmt=None, **kw):
    params = {"path": path}
    if fmt is not None:
        params["format"] = fmt
    return agent.get("/workspace/file", params=params, **kw)


def listing(agent, path=None, depth=None):
    params = {}
    if path is not None:
        params["path"] = path
    if depth is not None:
        params["depth"] = depth
    return agent.get("/workspace/list", params=params)


def check_entry(agent, entry, rel, kind, size=None):
    assert set(entry) == ENTRY_KEYS
    assert entry["path"] == os.path.join(agent.workspace, rel)
    assert entry["name"] == os.path.basename(rel)
    assert entry["type"] == kind
    assert entry["size"] == size
    assert isinstance(entry["mtime_ms"], int)
    st = os.lstat(os.path.join(agent.workspace, rel))
    assert abs(entry["mtime_ms"] - st.st_mtime * 1000) < 2


def hidden_leftovers(root):
    return [p for p in tree(root) if ".sandbox-upload-" in p]


# Reading and writing files.

def test_text_round_trip_and_entry_info(agent):
    text = "héllo wörld ✓\nzweite Zeile\n"
    r = put(agent, "notes/hello.txt", text.encode())
    assert r.status_code == 200, r.text
    check_entry(agent, r.json(), "notes/hello.txt", "file",
                len(text.encode()))
    assert read(os.path.join(agent.workspace, "notes/hello.txt")) == text.encode()

    r = get(agent, "notes/hello.txt")
    assert r.status_code == 200
    assert r.headers["Content-Type"] == "text/plain; charset=utf-8"
    assert r.text == text
    r = agent.get("/fastapi/workspace/file",
                  params={"path": "notes/hello.txt", "format": "text"})
    assert r.text == text
    # An absolute path inside the workspace is the same file.
    r = get(agent, os.path.join(agent.workspace, "notes/hello.txt"), "bytes")
    assert r.headers["Content-Type"] == "application/octet-stream"
    assert r.content == text.encode()


def test_binary_round_trip(agent):
    data = bytes(range(256)) * 1000 + b"\x00\xff\r\n"
    r = agent.put("/fastapi/workspace/file", params={"path": "bin/all.bytes"},
                  data=data)
    assert r.status_code == 200, r.text
    check_entry(agent, r.json(), "bin/all.bytes", "file", len(data))
    r = get(agent, "bin/all.bytes", "bytes")
    assert r.content == data
    # The size is announced up front, so a client can show progress and
    # tell a cut download from a whole one.
    assert r.headers["Content-Length"] == str(len(data))


def test_empty_file(agent):
    r = put(agent, "empty", b"")
    assert r.status_code == 200 and r.json()["size"] == 0
    assert get(agent, "empty", "bytes").content == b""
    assert get(agent, "empty").text == ""


def test_text_format_replaces_invalid_utf8(agent):
    write(os.path.join(agent.workspace, "bad.txt"),
          b"ok \xff\xfe mid \xc3\xa9 end \xe2\x82")
    r = get(agent, "bad.txt")
    assert r.status_code == 200
    assert r.content.decode("utf-8") == \
        "ok \ufffd\ufffd mid \u00e9 end \ufffd\ufffd"
    # A character cut by a read chunk is still whole on the wire.
    body = b"a" * (64 * 1024 - 1) + "€".encode() * 3 + b"z"
    write(os.path.join(agent.workspace, "cut.txt"), body)
    assert get(agent, "cut.txt").content == body
    assert get(agent, "bad.txt", "bytes").content == \
        b"ok \xff\xfe mid \xc3\xa9 end \xe2\x82"


def test_read_errors(agent):
    os.mkdir(os.path.join(agent.workspace, "adir"))
    os.mkfifo(os.path.join(agent.workspace, "fifo"))
    write(os.path.join(agent.workspace, "f.txt"), "x")
    for path, status in [("missing.txt", 404), ("adir", 404), ("fifo", 404),
                         ("f.txt/below", 404), ("nodir/x", 404)]:
        r = get(agent, path)
        assert r.status_code == status, (path, r.text)
        assert "detail" in r.json()
    assert get(agent, "f.txt", "json").status_code == 400
    assert agent.get("/workspace/file").status_code == 400
    assert get(agent, "").status_code == 400


def test_put_creates_parents_and_replaces_keeping_mode(agent):
    target = os.path.join(agent.workspace, "a/b/c/run.sh")
    assert put(agent, "a/b/c/run.sh", b"#!/bin/sh\necho one\n").status_code == 200
    os.chmod(target, 0o751)
    inode = os.stat(target).st_ino
    r = put(agent, "a/b/c/run.sh", b"#!/bin/sh\necho two\n")
    assert r.status_code == 200
    assert read(target) == b"#!/bin/sh\necho two\n"
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o751
    # Replaced by a rename, not rewritten in place.
    assert os.stat(target).st_ino != inode
    assert hidden_leftovers(agent.workspace) == []


def test_put_onto_directory_is_409(agent):
    os.makedirs(os.path.join(agent.workspace, "d/sub"))
    before = tree(agent.workspace)
    r = put(agent, "d", b"data")
    assert r.status_code == 409 and "detail" in r.json()
    assert put(agent, ".", b"data").status_code == 409
    write(os.path.join(agent.workspace, "plain"), "x")
    before = tree(agent.workspace)
    r = put(agent, "plain/below.txt", b"data")
    assert r.status_code == 409
    assert tree(agent.workspace) == before


def test_put_through_symlink_inside_writes_its_target(agent):
    write(os.path.join(agent.workspace, "real/target.txt"), "old")
    os.symlink("real/target.txt", os.path.join(agent.workspace, "link.txt"))
    r = put(agent, "link.txt", b"new")
    assert r.status_code == 200
    assert r.json()["path"] == os.path.join(agent.workspace, "real/target.txt")
    assert os.path.islink(os.path.join(agent.workspace, "link.txt"))
    assert read(os.path.join(agent.workspace, "real/target.txt")) == b"new"


@pytest.mark.memory
def test_huge_file_streams_both_ways_in_constant_memory(agent):
    """1 GiB up and down: the agent's peak memory grows by a few MiB."""
    block = 1024 * 1024
    nblocks = 1024
    seed = os.urandom(block)
    up_hash = hashlib.sha256()

    def body():
        for i in range(nblocks):
            chunk = i.to_bytes(8, "little") + seed[8:]
            up_hash.update(chunk)
            yield chunk

    # Warm up every code path first, so that the baseline includes them.
    assert put(agent, "warm.bin", seed).status_code == 200
    assert get(agent, "warm.bin", "bytes").content == seed
    base = rss_kib(agent.proc.pid, "VmHWM")

    r = put(agent, "big/huge.bin", body())
    assert r.status_code == 200, r.text
    assert r.json()["size"] == block * nblocks
    after_up = rss_kib(agent.proc.pid, "VmHWM")

    down_hash = hashlib.sha256()
    got = 0
    with get(agent, "big/huge.bin", "bytes", stream=True) as r:
        assert r.status_code == 200
        for chunk in r.iter_content(block):
            down_hash.update(chunk)
            got += len(chunk)
    after_down = rss_kib(agent.proc.pid, "VmHWM")

    assert got == block * nblocks
    assert down_hash.hexdigest() == up_hash.hexdigest()
    print(f"agent VmHWM: {base} KiB, after 1 GiB up {after_up} KiB, "
          f"after 1 GiB down {after_down} KiB")
    assert after_up - base < 6 * 1024
    assert after_down - base < 6 * 1024
    assert hidden_leftovers(agent.workspace) == []


def send_then_hang_up(agent, head, body_part):
    """Send a request's head and part of its body, then close."""
    s = socket.create_connection(("127.0.0.1", agent.port))
    s.sendall(head.encode() + body_part)
    s.close()


def test_aborted_upload_keeps_old_content_and_leaves_nothing(agent):
    write(os.path.join(agent.workspace, "keep.txt"), "old content")
    before = tree(agent.workspace)
    for path in ["keep.txt", "newdir/deeper/new.txt"]:
        head = (f"PUT /workspace/file?path={path} HTTP/1.1\r\n"
                f"Host: x\r\nAuthorization: Bearer {agent.token}\r\n"
                f"Content-Length: {64 * 1024 * 1024}\r\n\r\n")
        n = agent.read_log().count("aborted by the client")
        send_then_hang_up(agent, head, b"x" * (3 * 1024 * 1024))
        wait_for(lambda: agent.read_log().count("aborted by the client") > n,
                 what="the agent to see the client go")
        assert tree(agent.workspace) == before
    assert get(agent, "keep.txt").text == "old content"


def test_upload_limit(start_agent):
    agent = start_agent("--max-upload", "1K")
    before = tree(agent.workspace)
    assert put(agent, "a.txt", b"x" * 1024).status_code == 200
    r = put(agent, "b.txt", b"x" * 1025)
    assert r.status_code == 413 and "detail" in r.json()
    r = put(agent, "c/d.txt", iter([b"x" * 1000, b"y" * 1000]))
    assert r.status_code == 413
    r = agent.post("/workspace/files:batch",
                   files=[("files", ("e.txt", b"z" * 2000))])
    assert r.status_code == 413
    assert set(tree(agent.workspace)) == set(before) | {"a.txt"}


def raw_exchange(agent, head):
    """Send a request head alone and return the status line of the answer."""
    with socket.create_connection(("127.0.0.1", agent.port)) as s:
        s.sendall(head.encode())
        f = s.makefile("rb")
        status = f.readline().decode()
        headers = {}
        for line in iter(f.readline, b"\r\n"):
            k, v = line.decode().split(":", 1)
            headers[k.lower()] = v.strip()
        return status, headers


def test_upload_larger_than_the_disk_is_507_before_the_body(agent):
    before = tree(agent.workspace)
    for target, ctype in [("/workspace/file?path=d/huge", "application/octet-stream"),
                          ("/workspace/files:batch",
                           "multipart/form-data; boundary=x")]:
        status, headers = raw_exchange(agent, (
            f"PUT {target} HTTP/1.1\r\n" if "batch" not in target else
            f"POST {target} HTTP/1.1\r\n") +
            f"Host: x\r\nAuthorization: Bearer {agent.token}\r\n"
            f"Content-Type: {ctype}\r\nContent-Length: {10 ** 18}\r\n\r\n")
        assert status.startswith("HTTP/1.1 507 "), status
        assert headers["connection"] == "close"
    assert tree(agent.workspace) == before


def test_head_requests(agent):
    write(os.path.join(agent.workspace, "h.txt"), "hello")
    r = agent.session.head(agent.url + "/workspace/file",
                           params={"path": "h.txt", "format": "bytes"})
    assert r.status_code == 200 and r.content == b""
    assert r.headers["Content-Type"] == "application/octet-stream"
    r = agent.session.head(agent.url + "/workspace/list")
    assert r.status_code == 200 and r.content == b""
    assert agent.session.head(agent.url + "/workspace/file",
                              params={"path": "nope"}).status_code == 404


# Escapes: refused with 403, and nothing changes on disk, inside or out.

@pytest.fixture
def escape_setup(agent):
    ws = agent.workspace
    parent = os.path.dirname(ws)
    outside = os.path.join(parent, "outside")
    write(os.path.join(outside, "secret.txt"), "secret")
    os.makedirs(os.path.join(outside, "subdir"))
    sibling = os.path.join(parent, os.path.basename(ws) + "2")
    write(os.path.join(sibling, "other.txt"), "sibling")
    os.symlink(outside, os.path.join(ws, "out"))
    os.symlink(os.path.join(outside, "secret.txt"), os.path.join(ws, "outfile"))
    os.symlink("../outside/secret.txt", os.path.join(ws, "relout"))
    write(os.path.join(ws, "inside/file.txt"), "inside")
    return {"ws": ws, "outside": outside, "sibling": sibling}


ESCAPE_PATHS = [
    "../outside/secret.txt",
    "inside/../../outside/secret.txt",
    "{outside}/secret.txt",
    "{sibling}/other.txt",
    "out/secret.txt",
    "outfile",
    "relout",
]


def escape_paths(setup):
    return [p.format(**setup) for p in ESCAPE_PATHS]


def unchanged(setup):
    snap = (tree(setup["ws"]), tree(setup["outside"]), tree(setup["sibling"]))
    return lambda: (tree(setup["ws"]), tree(setup["outside"]),
                    tree(setup["sibling"])) == snap


def assert_403(r):
    assert r.status_code == 403, r.text
    assert "detail" in r.json()


def test_escapes_read_write(agent, escape_setup):
    same = unchanged(escape_setup)
    for p in escape_paths(escape_setup):
        assert_403(get(agent, p))
        assert_403(get(agent, p, "bytes"))
        assert_403(put(agent, p, b"pwned"))
        assert_403(agent.get("/workspace/exists", params={"path": p}))
    for p in ["out/new.txt", "out/subdir/new.txt", "out/newdir/new.txt",
              "{sibling}/new.txt".format(**escape_setup), "../new.txt"]:
        assert_403(put(agent, p, b"pwned"))
    assert same()


def test_percent_encoded_dots(agent, escape_setup):
    same = unchanged(escape_setup)
    for q in ["%2e%2e/outside/secret.txt", "%2E%2E%2Foutside%2Fsecret.txt",
              "inside%2F%2e%2e%2F%2e%2e%2Foutside%2Fsecret.txt"]:
        assert_403(agent.get("/workspace/file?path=" + q))
        assert_403(agent.put("/workspace/file?path=" + q, data=b"x"))
        assert_403(agent.delete("/workspace/entry?path=" + q))
    assert same()


def test_escapes_list_delete_move_mkdir(agent, escape_setup):
    outside = escape_setup["outside"]
    same = unchanged(escape_setup)
    for p in ["out", "out/subdir", "..", outside,
              escape_setup["sibling"], "inside/../.."]:
        assert_403(listing(agent, p))
    for p in escape_paths(escape_setup) + ["out/subdir", ".."]:
        if p in ("outfile", "relout"):
            continue   # the link itself is inside: deleting it is fine
        assert_403(agent.delete("/workspace/entry", params={"path": p}))
    for src, dst in [("out/secret.txt", "stolen.txt"),
                     ("inside/file.txt", "out/file.txt"),
                     ("inside/file.txt", "out/newdir/file.txt"),
                     ("inside/file.txt", "../file.txt"),
                     ("inside/file.txt", escape_setup["sibling"] + "/f.txt"),
                     ("..", "x"), (outside, "x")]:
        assert_403(agent.post("/workspace/move",
                              {"source": src, "destination": dst}))
    for p in ["out/newdir", "out/subdir/newdir", "../newdir",
              escape_setup["sibling"] + "/newdir"]:
        assert_403(agent.post("/workspace/mkdir", {"path": p}))
    assert_403(agent.post("/workspace/files:batch",
                          files=[("files", ("a.txt", b"pwned")),
                                 ("paths", (None, "out/a.txt"))]))
    assert_403(agent.post("/workspace/files:batch",
                          files=[("files", ("../evil.txt", b"pwned"))]))
    assert same()


def test_deleting_a_link_out_removes_only_the_link(agent, escape_setup):
    for name in ["out", "outfile"]:
        r = agent.delete("/workspace/entry", params={"path": name})
        assert r.status_code == 204
        assert not os.path.lexists(os.path.join(agent.workspace, name))
    assert read(os.path.join(escape_setup["outside"], "secret.txt")) == b"secret"


# Batch uploads.

def batch(agent, files, paths=None, **kw):
    parts = []
    for p in paths or []:
        parts.append(("paths", (None, p)))
    for name, data in files:
        parts.append(("files", (name, data, "application/octet-stream")))
    return agent.post("/workspace/files:batch", files=parts, **kw)


def test_batch_with_paths(agent):
    big = os.urandom(3 * 1024 * 1024 + 5)
    r = batch(agent, [("a.txt", b"alpha"), ("b.bin", big), ("c", b"")],
              paths=["one/a.txt", "two/deep/b.bin", "c.txt"])
    assert r.status_code == 200, r.text
    infos = r.json()
    assert [i["path"] for i in infos] == [
        os.path.join(agent.workspace, p)
        for p in ["one/a.txt", "two/deep/b.bin", "c.txt"]]
    check_entry(agent, infos[0], "one/a.txt", "file", 5)
    check_entry(agent, infos[1], "two/deep/b.bin", "file", len(big))
    check_entry(agent, infos[2], "c.txt", "file", 0)
    assert read(os.path.join(agent.workspace, "two/deep/b.bin")) == big
    assert hidden_leftovers(agent.workspace) == []


def test_batch_without_paths_uses_filenames(agent):
    write(os.path.join(agent.workspace, "x/old.txt"), "old")
    r = agent.post("/fastapi/workspace/files:batch", files=[
        ("files", ("x/old.txt", b"replaced")),
        ("files", ("y/z/new.txt", b"new")),
        ("other", (None, "ignored field"))])
    assert r.status_code == 200, r.text
    assert [i["name"] for i in r.json()] == ["old.txt", "new.txt"]
    assert read(os.path.join(agent.workspace, "x/old.txt")) == b"replaced"
    assert read(os.path.join(agent.workspace, "y/z/new.txt")) == b"new"


def test_batch_paths_after_files(agent):
    """The paths may come after the parts they name."""
    r = agent.post("/workspace/files:batch", files=[
        ("files", ("ignored-name-1", b"first")),
        ("files", ("ignored-name-2", b"second")),
        ("paths", (None, "late/1.txt")),
        ("paths", (None, "late/2.txt"))])
    assert r.status_code == 200, r.text
    assert read(os.path.join(agent.workspace, "late/1.txt")) == b"first"
    assert read(os.path.join(agent.workspace, "late/2.txt")) == b"second"
    assert sorted(tree(agent.workspace)) == ["late", "late/1.txt", "late/2.txt"]


def test_batch_is_all_or_nothing(agent):
    os.makedirs(os.path.join(agent.workspace, "isdir"))
    write(os.path.join(agent.workspace, "keep.txt"), "old")
    before = tree(agent.workspace)
    cases = [
        # count mismatch
        (batch(agent, [("a", b"1"), ("b", b"2")], paths=["n/a.txt"]), 400),
        (batch(agent, [("a", b"1")], paths=["n/a.txt", "n/b.txt"]), 400),
        # a part without a filename, and no paths
        (agent.post("/workspace/files:batch",
                    files=[("files", (None, b"no name"))]), 400),
        # the third target is a directory: the first two are not written
        (batch(agent, [("a", b"1"), ("b", b"2"), ("c", b"3")],
               paths=["new/a.txt", "keep.txt", "isdir"]), 409),
        (batch(agent, [("a", b"1")], paths=[""]), 400),
    ]
    for r, status in cases:
        assert r.status_code == status, r.text
        assert "detail" in r.json()
    assert tree(agent.workspace) == before


def test_batch_malformed_bodies(agent):
    before = tree(agent.workspace)
    url = "/workspace/files:batch"
    r = agent.post(url, data=b"x", headers={"Content-Type": "text/plain"})
    assert r.status_code == 400
    r = agent.post(url, data=b"x",
                   headers={"Content-Type": "multipart/form-data"})
    assert r.status_code == 400
    ct = {"Content-Type": "multipart/form-data; boundary=BB"}
    for body in [
        b"--BB\r\nContent-Disposition: form-data; name=\"files\"; "
        b"filename=\"a.txt\"\r\n\r\nno closing boundary",
        b"--BB\r\nno colon\r\n\r\ndata\r\n--BB--\r\n",
        b"--BB\r\nContent-Disposition: form-data; name=\"paths\"\r\n\r\n"
        b"a\x00b\r\n--BB\r\nContent-Disposition: form-data; name=\"files\"; "
        b"filename=\"a\"\r\n\r\nx\r\n--BB--\r\n",
    ]:
        r = agent.post(url, data=body, headers=ct)
        assert r.status_code == 400, r.text
        assert "detail" in r.json()
    assert tree(agent.workspace) == before
    assert agent.post(url, data=b"--BB--\r\n", headers=ct).json() == []


def test_aborted_batch_leaves_nothing(agent):
    before = tree(agent.workspace)
    body = (b"--BB\r\nContent-Disposition: form-data; name=\"paths\"\r\n\r\n"
            b"d/a.txt\r\n--BB\r\nContent-Disposition: form-data; "
            b"name=\"files\"; filename=\"a.txt\"\r\n\r\n" + b"y" * 3000000)
    head = ("POST /workspace/files:batch HTTP/1.1\r\nHost: x\r\n"
            f"Authorization: Bearer {agent.token}\r\n"
            "Content-Type: multipart/form-data; boundary=BB\r\n"
            f"Content-Length: {len(body) + 1000000}\r\n\r\n")
    send_then_hang_up(agent, head, body)
    wait_for(lambda: "batch upload aborted" in agent.read_log(),
             what="the agent to see the client go")
    assert tree(agent.workspace) == before


# Listing.

@pytest.fixture
def sample_tree(agent):
    ws = agent.workspace
    write(os.path.join(ws, "b.txt"), "bb")
    write(os.path.join(ws, "a/one.txt"), "1")
    write(os.path.join(ws, "a/sub/two.txt"), "22")
    write(os.path.join(ws, "a/sub/deeper/three.txt"), "333")
    os.makedirs(os.path.join(ws, "c"))
    os.symlink("a", os.path.join(ws, "linkdir"))
    os.symlink("nowhere", os.path.join(ws, "dangling"))
    return ws


def test_list_depths(agent, sample_tree):
    r = listing(agent)
    assert r.status_code == 200 and r.headers["Content-Type"] == "application/json"
    top = r.json()
    assert [e["name"] for e in top] == ["a", "b.txt", "c", "dangling", "linkdir"]
    kinds = {e["name"]: e["type"] for e in top}
    assert kinds == {"a": "dir", "b.txt": "file", "c": "dir",
                     "dangling": "symlink", "linkdir": "symlink"}
    for e in top:
        check_entry(agent, e, e["name"], e["type"],
                    2 if e["name"] == "b.txt" else None)
    assert listing(agent, ".").json() == top
    assert listing(agent, agent.workspace, 1).json() == top

    rels = lambda entries: [os.path.relpath(e["path"], agent.workspace)
                            for e in entries]
    assert rels(listing(agent, depth=2).json()) == [
        "a", "a/one.txt", "a/sub", "b.txt", "c", "dangling", "linkdir"]
    deep = rels(listing(agent, depth=10).json())
    assert deep == ["a", "a/one.txt", "a/sub", "a/sub/deeper",
                    "a/sub/deeper/three.txt", "a/sub/two.txt", "b.txt", "c",
                    "dangling", "linkdir"]
    assert rels(listing(agent, "a", 1).json()) == ["a/one.txt", "a/sub"]
    assert rels(listing(agent, "a/sub", "2").json()) == [
        "a/sub/deeper", "a/sub/deeper/three.txt", "a/sub/two.txt"]
    # A symlinked directory given as the path is listed (it stays inside).
    assert rels(listing(agent, "linkdir").json()) == [
        "linkdir/one.txt", "linkdir/sub"]
    assert listing(agent, "c").json() == []


def test_list_errors(agent, sample_tree):
    for path, status in [("missing", 404), ("b.txt", 404), ("dangling", 404)]:
        r = listing(agent, path)
        assert r.status_code == status and "detail" in r.json()
    for depth in ["0", "-1", "x", "1.5", ""]:
        r = listing(agent, None, depth)
        assert r.status_code == 400, depth


def test_large_listing_streams(agent):
    d = os.path.join(agent.workspace, "many")
    os.makedirs(d)
    for i in range(3000):
        open(os.path.join(d, f"file-{i:05d}-{'x' * 60}"), "w").close()
    entries = listing(agent, "many").json()
    assert len(entries) == 3000
    assert entries[0]["name"].startswith("file-00000")
    assert entries[-1]["name"].startswith("file-02999")


# Exists, delete, move, mkdir.

def test_exists(agent, sample_tree):
    ex = lambda p: agent.get("/workspace/exists", params={"path": p})
    for p, want in [("b.txt", True), ("a/sub", True), ("linkdir/one.txt", True),
                    ("missing", False), ("b.txt/below", False),
                    ("dangling", False), (agent.workspace, True)]:
        r = ex(p)
        assert r.status_code == 200 and r.json() == {"exists": want}, p
    assert agent.get("/workspace/exists").status_code == 400


def test_delete(agent, escape_setup):
    ws = agent.workspace
    write(os.path.join(ws, "f.txt"), "x")
    write(os.path.join(ws, "d/e/f/g.txt"), "deep")
    os.symlink(escape_setup["outside"], os.path.join(ws, "d/e/outlink"))
    os.symlink("../../f.txt", os.path.join(ws, "d/e/inlink"))
    outside = tree(escape_setup["outside"])

    assert agent.delete("/workspace/entry", params={"path": "f.txt"}).status_code == 204
    assert not os.path.exists(os.path.join(ws, "f.txt"))
    r = agent.delete("/fastapi/workspace/entry", params={"path": "d"})
    assert r.status_code == 204 and r.content == b""
    assert not os.path.lexists(os.path.join(ws, "d"))
    # The link out was removed, never followed.
    assert tree(escape_setup["outside"]) == outside
    for p in ["missing", "d/missing/x", "f.txt/x"]:
        assert agent.delete("/workspace/entry", params={"path": p}).status_code == 204
    for p in [".", ws, "inside/.."]:
        assert_403(agent.delete("/workspace/entry", params={"path": p}))
    assert os.path.isdir(ws)
    assert agent.delete("/workspace/entry").status_code == 400


def test_move(agent):
    ws = agent.workspace
    mv = lambda s, d: agent.post("/workspace/move",
                                 {"source": s, "destination": d})
    write(os.path.join(ws, "a.txt"), "A")
    r = mv("a.txt", "x/y/b.txt")
    assert r.status_code == 200, r.text
    check_entry(agent, r.json(), "x/y/b.txt", "file", 1)
    assert not os.path.exists(os.path.join(ws, "a.txt"))

    # A file onto a file: replaced, as shutil.move and os.replace do.
    write(os.path.join(ws, "c.txt"), "C")
    r = mv("c.txt", "x/y/b.txt")
    assert r.status_code == 200 and read(os.path.join(ws, "x/y/b.txt")) == b"C"

    # Directories: onto a new name, an empty directory, not a full one.
    write(os.path.join(ws, "d1/f"), "1")
    write(os.path.join(ws, "full/g"), "2")
    os.makedirs(os.path.join(ws, "emptydir"))
    r = mv("d1", "emptydir")
    assert r.status_code == 200
    check_entry(agent, r.json(), "emptydir", "dir")
    assert read(os.path.join(ws, "emptydir/f")) == b"1"
    before = tree(ws)
    for src, dst, status in [("emptydir", "full", 409),
                             ("emptydir", "emptydir/inner", 409),
                             ("x/y/b.txt", "full", 409),
                             ("full", "x/y/b.txt", 409),
                             ("missing", "z", 404),
                             ("missing/deeper", "z", 404),
                             (".", "z", 403), ("full", ".", 409)]:
        r = mv(src, dst)
        assert r.status_code == status, (src, dst, r.text)
        assert "detail" in r.json()
    assert tree(ws) == before

    for payload in [{"source": "full"}, {"destination": "x"}, {},
                    {"source": 1, "destination": "x"},
                    {"source": "full", "destination": None},
                    {"source": "", "destination": "x"}]:
        r = agent.post("/workspace/move", payload)
        assert r.status_code == 400, payload
    r = agent.post("/workspace/move", data=b"{not json",
                   headers={"Content-Type": "application/json"})
    assert r.status_code == 400
    assert tree(ws) == before


def test_mkdir(agent):
    ws = agent.workspace
    mk = lambda p: agent.post("/workspace/mkdir", {"path": p})
    r = mk("new/nested/dir")
    assert r.status_code == 200 and r.json() == {"created": True}
    assert os.path.isdir(os.path.join(ws, "new/nested/dir"))
    assert mk("new/nested/dir").json() == {"created": False}
    assert mk("new").json() == {"created": False}
    assert mk(".").json() == {"created": False}
    write(os.path.join(ws, "file"), "x")
    os.symlink("nowhere", os.path.join(ws, "dangling"))
    before = tree(ws)
    for p in ["file", "file/sub", "dangling"]:
        r = mk(p)
        assert r.status_code == 409, p
        assert "detail" in r.json()
    for payload in [{}, {"path": 3}, {"path": ""}, {"path": None}]:
        assert agent.post("/workspace/mkdir", payload).status_code == 400
    assert tree(ws) == before


def test_new_entries_belong_to_the_command_user(start_agent):
    """With --run-as, what the agent creates is the commands' to change;
    a replaced file keeps its owner. (Without root, --run-as is ignored.)"""
    agent = start_agent("--run-as", "12345:23456")
    me = os.geteuid() == 0
    want = (12345, 23456) if me else (os.getuid(), os.getgid())
    owner = lambda rel: (lambda st: (st.st_uid, st.st_gid))(
        os.lstat(os.path.join(agent.workspace, rel)))
    assert put(agent, "p/q/file.txt", b"x").status_code == 200
    assert batch(agent, [("b", b"y")], paths=["r/s/b.txt"]).status_code == 200
    assert agent.post("/workspace/mkdir", {"path": "t/u"}).json() == {"created": True}
    write(os.path.join(agent.workspace, "m.txt"), "m")
    assert agent.post("/workspace/move", {"source": "m.txt",
                                          "destination": "v/m.txt"}).status_code == 200
    for rel in ["p", "p/q", "p/q/file.txt", "r", "r/s", "r/s/b.txt", "t",
                "t/u", "v"]:
        assert owner(rel) == want, rel
    if me:
        os.chown(os.path.join(agent.workspace, "p/q/file.txt"), 4242, 4343)
    kept = owner("p/q/file.txt")
    assert put(agent, "p/q/file.txt", b"new").status_code == 200
    assert owner("p/q/file.txt") == kept


def test_every_route_needs_the_token(agent):
    calls = [("GET", "/workspace/file?path=x"), ("PUT", "/workspace/file?path=x"),
             ("POST", "/workspace/files:batch"), ("GET", "/workspace/list"),
             ("GET", "/workspace/exists?path=x"),
             ("DELETE", "/workspace/entry?path=x"),
             ("POST", "/workspace/move"), ("POST", "/workspace/mkdir")]
    for method, path in calls:
        for prefix in ["", "/fastapi"]:
            r = requests.request(method, agent.url + prefix + path, data=b"{}")
            assert r.status_code == 403, (method, path)
    assert os.listdir(agent.workspace) == []


def test_stale_upload_files_are_swept_at_start(start_agent, tmp_workspace):
    """Hidden files an agent that died mid-upload left behind go when the
    next agent starts: only ours (the exact name pattern, regular files or
    root-only staging directories, older than the agent), only beneath the
    workspace root."""
    ws = tmp_workspace
    old = time.time() - 3600

    def make(rel, when=old, base=ws):
        p = os.path.join(base, rel)
        write(p, "half an upload")
        os.utime(p, (when, when))
        return p

    stale = [make(".sandbox-upload-0123456789abcdef"),
             make("deep/er/.sandbox-upload-fedcba9876543210")]
    # A batch's private staging directory (ours: mode 0700), and in it.
    stage = os.path.join(ws, "deep", ".sandbox-upload-4444444444444444")
    stale.append(make(os.path.join(stage, ".sandbox-upload-5555555555555555")))
    os.chmod(stage, 0o700)
    os.utime(stage, (old, old))
    stale.append(stage)
    kept = [make(name) for name in (
        ".sandbox-upload-0123456789ABCDEF", ".sandbox-upload-0123456789abcde",
        ".sandbox-upload-0123456789abcdef0", "sandbox-upload-0123456789abcdef",
        ".sandbox-upload-notours", "deep/keep.txt")]
    # Newer than the agent: an upload under way, not a stale one.
    kept.append(make("new/.sandbox-upload-00000000000000ff", time.time() + 3600))
    kept.append(os.path.join(ws, "dirs", ".sandbox-upload-1111111111111111"))
    os.makedirs(kept[-1])
    kept.append(os.path.join(ws, ".sandbox-upload-2222222222222222"))
    os.symlink("deep/keep.txt", kept[-1])
    os.utime(kept[-1], (old, old), follow_symlinks=False)
    # Reached only through a symlink out of the workspace: not touched.
    outside = os.path.join(os.path.dirname(ws), "outside")
    kept.append(make(".sandbox-upload-3333333333333333", base=outside))
    os.symlink(outside, os.path.join(ws, "linked"))

    a = start_agent()
    wait_for(lambda: "removed 3 stale upload files" in a.read_log(),
             what="the sweep")
    assert [p for p in stale if os.path.lexists(p)] == []
    assert [p for p in kept if not os.path.lexists(p)] == []
    # Uploads work as before.
    assert put(a, "deep/er/new.txt", b"fresh").status_code == 200
    assert read(os.path.join(ws, "deep/er/new.txt")) == b"fresh"
    assert sorted(os.listdir(os.path.join(ws, "deep/er"))) == ["new.txt"]
