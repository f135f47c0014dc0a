"""FILE_SYSTEM=oss: workspaces kept in object storage, against a real S3
server that checks SigV4 signatures (Ceph's RADOS gateway, started once
for the session by ceph_s3.ceph on 127.0.0.1), through the real sandboxd
and real sandboxes. A relay between them (s3_relay) counts the requests
and plays the server going away."""
import json
import os
import shutil
import signal
import subprocess
import threading
import uuid

import pytest
import requests

from ceph_s3 import ceph  # noqa: F401
from conftest import SANDBOXD_BIN, free_port
from s3_relay import S3Relay
from sandboxd_fixtures import (minimal_tag, scratch,  # noqa: F401
                               start_sandboxd, wait_until)
from test_sandboxd_redis import Redis, redis_env

MiB = 1 << 20

# Nested directories, an empty one, a 50 MiB file (a multipart upload),
# binary content, a UTF-8 name and one that is not UTF-8, modes, a symlink
# inside and two that point out of the workspace.
MAKE_WORKSPACE = r"""
set -e
cd /workspace
mkdir -p src/deep/er empty 'sp ace'
printf 'hello\n' > src/a.txt
printf '\000\001\002\377\n' > src/deep/er/bin.dat
printf 'u\n' > 'naïve – ünïcode.txt'
printf 'raw\n' > "$(printf 'bin\377name')"
printf 'x\n' > 'sp ace/f'
head -c 52428800 /dev/urandom > big.bin
ln -s src/a.txt link
ln -s /etc/shadow outside
ln -s ../../../.. up
chmod 0750 src
chmod 0600 src/a.txt
chmod 0755 src/deep/er/bin.dat
"""

# What a user sees of a workspace: every entry with its type, mode,
# owner, size and MD5 (files) or target (symlinks).
LIST_WORKSPACE = r"""
cd /workspace && find . -mindepth 1 | sort | while IFS= read -r p; do
  if [ -L "$p" ]; then echo "L $p -> $(readlink "$p") $(stat -c %u "$p")"
  elif [ -d "$p" ]; then echo "D $p $(stat -c '%a %u' "$p")"
  else echo "F $p $(stat -c '%a %u %s' "$p") $(md5sum < "$p" | cut -c1-32)"
  fi
done
"""


@pytest.fixture
def bucket(ceph):  # noqa: F811
    name = "t-" + uuid.uuid4().hex[:12]
    ceph.client(name).make_bucket()
    return name


@pytest.fixture
def relay(ceph):  # noqa: F811
    r = S3Relay(ceph.port)
    yield r
    r.close()


def oss_env(ceph, bucket, relay=None, **more):  # noqa: F811
    env = ceph.env(bucket)
    if relay is not None:
        env["OSS_ENDPOINT"] = relay.endpoint
    env.update({k: str(v) for k, v in more.items()})
    return env


def shell_ok(s, name, command):
    out = s.shell(name, command)
    assert out.get("returncode") == "0", out
    return out.get("stdout", "")


def storage_path(s, name):
    return s.rpc("get_info", identity=name)["storage_path"]


def workspaces(s):
    return set(os.listdir(os.path.join(s.state_dir, "workspaces")))


def test_round_trip_of_a_workspace(ceph, bucket, start_sandboxd):  # noqa: F811
    s = start_sandboxd(env=oss_env(ceph, bucket))
    a = s.create()
    shell_ok(s, a, MAKE_WORKSPACE)
    before = shell_ok(s, a, LIST_WORKSPACE)
    sp = storage_path(s, a)
    # The reference's default: the sandbox's id.
    assert a.endswith(sp)
    assert s.rpc("release", identity=a) is True

    objects = ceph.client(bucket).list(sp)
    size, etag = objects[f"{sp}/big.bin"]
    # 50 MiB in 8 MiB parts: a multipart upload.
    assert size == 50 * MiB and etag.endswith("-7"), etag
    assert f"{sp}/src/deep/er/bin.dat" in objects
    assert f"{sp}/naïve – ünïcode.txt" in objects
    # A name that is not UTF-8 cannot be a key; it goes beside.
    assert any(k.startswith(f"{sp}.sandboxd/raw/") for k in objects)
    # Symlinks are kept as symlinks: nothing they point at is read.
    assert not [k for k in objects if k.endswith(("/outside", "/up",
                                                  "/link"))]
    log = s.read_log()
    assert f"sandbox {a}: workspace uploaded to {sp}" in log

    b = s.create(storage_path=sp)
    assert shell_ok(s, b, LIST_WORKSPACE) == before
    assert "1000 " in before  # restored as the type's user, as made
    m = s.metrics()
    assert m['sandboxd_oss_transfers_total{kind="upload",result="ok"}'] == 1
    assert m['sandboxd_oss_transfers_total{kind="download",result="ok"}'] == 1


def test_a_second_release_sends_only_what_changed(ceph, bucket, relay,  # noqa: F811
                                                  start_sandboxd):
    s = start_sandboxd(env=oss_env(ceph, bucket, relay))
    a = s.create()
    shell_ok(s, a, MAKE_WORKSPACE)
    sp = storage_path(s, a)
    assert s.rpc("release", identity=a) is True

    b = s.create(storage_path=sp)
    shell_ok(s, b, "cd /workspace && echo more >> src/a.txt && "
             "rm 'naïve – ünïcode.txt' && echo new > src/new.txt && "
             "rmdir empty")
    changed = shell_ok(s, b, LIST_WORKSPACE)
    relay.reset()
    assert s.rpc("release", identity=b) is True
    puts = sorted(p for m, p in relay.requests if m == "PUT")
    # The two files, the incomplete marker, then the manifest.
    assert len(puts) == 4, relay.requests
    assert [p for p in puts if p.endswith(("/src/a.txt", "/src/new.txt"))]
    assert len([p for p in puts if p.endswith("/manifest.jsonl")]) == 2
    assert relay.count("POST") == 1     # the deleted file's object
    objects = ceph.client(bucket).list(sp)
    assert f"{sp}/naïve – ünïcode.txt" not in objects
    assert f"{sp}/src/new.txt" in objects

    c = s.create(storage_path=sp)
    assert shell_ok(s, c, LIST_WORKSPACE) == changed
    relay.reset()
    # Unchanged: the listings and the manifest's GET, nothing sent.
    assert s.rpc("release", identity=c) is True
    assert relay.count("PUT") == 0 and relay.count("POST") == 0, \
        relay.requests
    assert relay.count() == relay.count("GET") == 3, relay.requests
    m = s.metrics()
    assert m['sandboxd_oss_files_total{what="deleted"}'] == 1


def test_workspace_restored_through_another_sandboxd_on_the_same_redis(
        ceph, bucket, start_sandboxd):  # noqa: F811
    redis = Redis()
    try:
        env = oss_env(ceph, bucket)
        a = start_sandboxd(env={**env, **redis_env(redis, "osa-")})
        b = start_sandboxd(env={**env, **redis_env(redis, "osb-")})
        name = a.create()
        shell_ok(a, name, "cd /workspace && mkdir d && echo from-a > d/f && "
                 "head -c 3000000 /dev/urandom > d/big")
        want = shell_ok(a, name, LIST_WORKSPACE)
        sp = storage_path(a, name)
        # Released through B: A, its owner, uploads; B's create waits
        # for that before it downloads.
        assert b.rpc("release", identity=name) is True
        other = b.create(storage_path=sp)
        assert shell_ok(b, other, LIST_WORKSPACE) == want, (
            a.read_log()[-3000:] + "\n-----\n" + b.read_log()[-3000:])

        # Redis holds names and flags, never the keys.
        keys = redis.cli("--scan")
        dump = subprocess.run(
            ["redis-cli", "-p", str(redis.port)],
            input="".join(f"DUMP {k}\n" for k in keys), capture_output=True,
            text=True, errors="replace").stdout
        assert keys and ceph.secret_key not in dump
        assert ceph.access_key not in dump
    finally:
        redis.stop()
        shutil.rmtree(redis.dir, ignore_errors=True)


def run_sandboxd(env, scratch):  # noqa: F811
    """sandboxd that must not start: (status, output)."""
    d = scratch()
    e = {"PATH": os.environ["PATH"], "SANDBOXD_STATE_DIR": d + "/st",
         "DEFAULT_SANDBOX_TYPE": "minimal", "POOL_SIZE": "0"}
    if "ASAN_OPTIONS" in os.environ:
        e["ASAN_OPTIONS"] = os.environ["ASAN_OPTIONS"]
    e.update(env)
    p = subprocess.run([SANDBOXD_BIN, "--port", "0"], env=e, cwd=d,
                       capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout + p.stderr


def test_bad_storage_settings_stop_sandboxd_naming_the_key(
        ceph, bucket, scratch):  # noqa: F811
    good = oss_env(ceph, bucket)
    cases = [
        ({"OSS_ACCESS_KEY_SECRET": "not-the-secret"},
         ["403", "SignatureDoesNotMatch", "OSS_ACCESS_KEY_SECRET"]),
        ({"OSS_ACCESS_KEY_ID": "NOSUCHKEY"},
         ["403", "InvalidAccessKeyId", "OSS_ACCESS_KEY_ID"]),
        ({"OSS_BUCKET_NAME": "no-such-bucket-here"},
         ["404", "NoSuchBucket", "OSS_BUCKET_NAME"]),
        ({"OSS_ENDPOINT": f"http://127.0.0.1:{free_port()}"},
         ["OSS_ENDPOINT", "did not answer"]),
        ({"OSS_ENDPOINT": ""}, ["OSS_ENDPOINT: required"]),
        ({"OSS_ENDPOINT": "ftp://127.0.0.1"}, ["OSS_ENDPOINT"]),
        ({"FILE_SYSTEM": "nfs"}, ["FILE_SYSTEM: 'nfs'"]),
        ({"STORAGE_FOLDER": "a/../b"}, ["STORAGE_FOLDER"]),
    ]
    for change, words in cases:
        status, out = run_sandboxd({**good, **change}, scratch)
        assert status == 2, (change, out)
        for w in words:
            assert w in out, (change, out)
        assert good["OSS_ACCESS_KEY_SECRET"] not in out


def test_a_bucket_gone_fails_the_release_and_the_workspace_waits(
        ceph, bucket, start_sandboxd):  # noqa: F811
    s = start_sandboxd(env=oss_env(ceph, bucket))
    a = s.create()
    shell_ok(s, a, "echo kept > /workspace/f")
    sp = storage_path(s, a)
    status, _, body = ceph.client(bucket).request("DELETE")
    assert status == 204, body

    # Our REST route: the status that fits.
    r = s.delete(f"/v1/sandboxes/{a}")
    detail = r.json()["detail"]
    assert r.status_code == 502, r.text
    assert "NoSuchBucket" in detail and "OSS_BUCKET_NAME" in detail
    assert "kept on this host" in detail
    r = s.post("/create", {"sandbox_type": "minimal", "storage_path": sp})
    assert r.json()["data"] is None and "NoSuchBucket" in r.json()["detail"]

    # Back: a release again uploads what was kept.
    ceph.client(bucket).make_bucket()
    assert s.rpc("release", identity=a) is True
    b = s.create(storage_path=sp)
    assert shell_ok(s, b, "cat /workspace/f") == "kept\n"


def test_the_server_gone_mid_upload_and_mid_download(ceph, bucket, relay,  # noqa: F811
                                                     start_sandboxd):
    s = start_sandboxd(env=oss_env(ceph, bucket, relay))
    a = s.create()
    shell_ok(s, a, "cd /workspace && echo one > small && "
             "head -c 20971520 /dev/urandom > big")
    sp = storage_path(s, a)
    assert s.rpc("release", identity=a) is True

    b = s.create(storage_path=sp)
    shell_ok(s, b, "cd /workspace && echo two > small && "
             "head -c 20971520 /dev/urandom > big")
    want = shell_ok(s, b, LIST_WORKSPACE)
    relay.cut_after = relay.moved + 8 * MiB
    # The manager's route: false and why, as the reference answers.
    r = s.post("/release", {"identity": b})
    assert r.status_code == 200 and r.json()["data"] is False, r.text
    assert "did not answer" in r.json()["detail"]
    relay.back()

    # What the store holds now is neither workspace: refused, and the
    # failed create leaves nothing behind.
    before = workspaces(s)
    r = s.post("/create", {"sandbox_type": "minimal", "storage_path": sp})
    assert r.json()["data"] is None
    assert "incomplete" in r.json()["detail"]
    assert workspaces(s) == before

    # A release again finishes the upload.
    assert s.rpc("release", identity=b) is True
    c = s.create(storage_path=sp)
    assert shell_ok(s, c, LIST_WORKSPACE) == want

    # Cut while a create downloads: no workspace is left half made.
    before = workspaces(s)
    relay.cut_after = relay.moved + 8 * MiB
    r = s.post("/create", {"sandbox_type": "minimal", "storage_path": sp})
    assert r.json()["data"] is None, r.text
    assert "did not answer" in r.json()["detail"]
    assert workspaces(s) == before


def put_manifest(client, prefix, entries):
    lines = [{"sandboxd_workspace": 1, "complete": True,
              "entries": len(entries)}] + entries
    client.put(f"{prefix}.sandboxd/manifest.jsonl",
               "".join(json.dumps(x) + "\n" for x in lines).encode())


def test_hostile_keys_in_the_store_are_refused(ceph, bucket, scratch,  # noqa: F811
                                               start_sandboxd):
    s = start_sandboxd(env=oss_env(ceph, bucket))
    c = ceph.client(bucket)
    ws = os.path.join(s.state_dir, "workspaces")
    outside = scratch()
    etag = c.put("plain/ok.txt", b"pwn")
    c.put("plain/sub/dir/f.txt", b"deep")
    c.put("plain/sub/", b"")
    c.put("plain/empty/", b"")
    c.put("h1/../escaped", b"pwn")
    c.put("h2//escaped", b"pwn")
    c.put("h3/a/../../escaped", b"pwn")
    put_manifest(c, "h4", [{"path": "../escaped", "type": "file",
                            "mode": 420, "size": 3, "etag": etag}])
    c.put("h4/../escaped", b"pwn")
    put_manifest(c, "h5", [{"path": "/escaped", "type": "file",
                            "mode": 420, "size": 3, "etag": etag}])
    # A symlink out, then a file through it: symlinks come last and
    # nothing is made through one.
    put_manifest(c, "h6", [{"path": "l", "type": "link",
                            "target": outside},
                           {"path": "l/escaped", "type": "file",
                            "mode": 420, "size": 3, "etag": etag}])
    c.put("h6/l/escaped", b"pwn")
    before = workspaces(s)
    for prefix, shown in [("h1", "h1/../escaped"), ("h2", "h2//escaped"),
                          ("h3", "h3/a/../../escaped"), ("h4", "../escaped"),
                          ("h5", "/escaped"), ("h6", "l/escaped")]:
        r = s.post("/create", {"sandbox_type": "minimal",
                               "storage_path": prefix})
        assert r.json()["data"] is None, (prefix, r.text)
        assert shown in r.json()["detail"], (prefix, r.text)
    assert workspaces(s) == before
    assert not os.path.exists(os.path.join(ws, "escaped"))
    assert not os.path.exists(os.path.join(s.state_dir, "escaped"))
    assert os.listdir(outside) == []
    # The same bucket restores a prefix other S3 tools filled: keys ending
    # in '/' are directories, the others' directories are implied.
    name = s.create(storage_path="plain")
    assert shell_ok(s, name, "cat /workspace/ok.txt") == "pwn"
    assert shell_ok(s, name, LIST_WORKSPACE) == (
        "D ./empty 755 1000\n"
        "F ./ok.txt 644 1000 3 " + etag + "\n"
        "D ./sub 755 1000\n"
        "D ./sub/dir 755 1000\n"
        "F ./sub/dir/f.txt 644 1000 4 " + c.put("x", b"deep") + "\n")


def test_keys_stay_out_of_logs_sandboxes_and_the_environment(
        ceph, bucket, start_sandboxd):  # noqa: F811
    env = oss_env(ceph, bucket, SANDBOXD_LOG_LEVEL="debug")
    s = start_sandboxd(env=env)
    a = s.create()
    shell_ok(s, a, "echo x > /workspace/f")
    sandbox_env = s.sandbox_env(a)
    assert not [v for v in sandbox_env if v.startswith("OSS_")]
    assert s.rpc("release", identity=a) is True
    with open(f"/proc/{s.proc.pid}/environ", "rb") as f:
        assert ceph.secret_key.encode() not in f.read()
    assert ceph.secret_key not in s.read_log()
    assert ceph.secret_key not in s.get("/metrics").text


def test_shutdown_gives_up_an_upload_and_the_next_start_finishes_it(
        ceph, bucket, relay, start_sandboxd):  # noqa: F811
    env = oss_env(ceph, bucket, relay, SANDBOXD_SHUTDOWN_TIMEOUT=3)
    s = start_sandboxd(env=env)
    a = s.create()
    shell_ok(s, a, "head -c 16777216 /dev/urandom > /workspace/big")
    want = shell_ok(s, a, LIST_WORKSPACE)
    sp = storage_path(s, a)
    relay.delay = 0.05   # a second per 1.3 MiB: the upload takes long

    def release():
        try:
            s.post("/release", {"identity": a}, timeout=60)
        except requests.RequestException:
            pass
    t = threading.Thread(target=release)
    t.start()
    wait_until(lambda: relay.count("PUT") > 0, 60, what="the upload")
    s.signal(signal.SIGTERM)
    assert s.wait_exit(60) == 1
    s.expected_exit = 1
    t.join()
    log = s.read_log()
    assert f"sandbox {a}: workspace upload to {sp}" in log
    assert "given up" in log and "next start" in log

    relay.delay = 0
    s2 = start_sandboxd(env=env, state_dir=s.state_dir)
    wait_until(lambda: f"sandbox {a}: workspace uploaded" in s2.read_log(),
               120, what="the upload at start", logs=[s2])
    b = s2.create(storage_path=sp)
    assert shell_ok(s2, b, LIST_WORKSPACE) == want
