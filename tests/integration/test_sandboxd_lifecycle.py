"""Shutdown and restart: SIGTERM removes everything with AUTO_CLEANUP; without
it, a restarted sandboxd takes its sandboxes back with their sessions and
removes what it cannot take back. Workspaces: kept in STORAGE_FOLDER on
release and restored by storage_path; a caller's mount_dir where allowed."""
import os
import signal

from sandboxd_fixtures import (scratch, BACKEND, LABEL_ANY,  # noqa: F401
                               LABEL_INSTANCE, docker, minimal_tag,
                               start_sandboxd, wait_until)


def test_sigterm_removes_every_sandbox(start_sandboxd):
    s = start_sandboxd(env={"POOL_SIZE": "2"})
    names = [s.create() for _ in range(2)]
    s.rpc("create", sandbox_type="minimal", meta={"session_ctx_id": "x"})
    wait_until(lambda: len(s.containers()) == 5, 60, what="5 containers")
    mounts = [s.rpc("get_info", identity=n)["mount_dir"] for n in names]
    s.signal(signal.SIGTERM)
    assert s.wait_exit() == 0
    assert s.containers() == {}
    for m in mounts:
        assert not os.path.exists(m)
    assert os.listdir(os.path.join(s.state_dir, "run")) == []
    assert "bye" in s.read_log()


def test_sigint_with_creates_in_flight_leaves_nothing(start_sandboxd):
    s = start_sandboxd(env={"POOL_SIZE": "4", "SANDBOXD_POOL_PARALLEL": "4"})
    # Creates are under way when the signal comes.
    wait_until(lambda: len(s.containers()) >= 1, 60, what="a create")
    s.signal(signal.SIGINT)
    assert s.wait_exit() == 0
    assert s.containers() == {}


def test_restart_takes_sandboxes_back(start_sandboxd, minimal_tag):
    s = start_sandboxd(env={"AUTO_CLEANUP": "false", "POOL_SIZE": "1",
                            "HEARTBEAT_TIMEOUT": "3600"})
    a = s.rpc("create", sandbox_type="minimal",
              meta={"session_ctx_id": "keep", "note": "n1"})
    s.shell(a, "echo before > /workspace/mark")
    info_a = s.rpc("get_info", identity=a)
    stopped = s.create()
    s.rpc("stop", identity=stopped)
    doomed = s.create()
    wait_until(lambda: s.metrics()['sandboxd_pool_ready{type="minimal"}'] == 1,
               60, what="pool")
    s.signal(signal.SIGTERM)
    assert s.wait_exit() == 0
    before = s.containers()
    assert len(before) == 4

    # While it is down: one container dies, and a stranger with our
    # instance label (not in the state file) appears.
    s.kill_container(doomed)
    stranger = "sandboxd-stranger-" + s.instance[:8]
    if BACKEND == "crun":
        # A sandbox directory no record knows (one a create left).
        os.mkdir(os.path.join(s.crun_bundles, stranger))
    else:
        docker("run", "-d", "--name", stranger, "--network", "none",
               "--label", f"{LABEL_ANY}=1",
               "--label", f"{LABEL_INSTANCE}={s.instance}",
               "-e", "SECRET_TOKEN=x",
               f"agentscope/runtime-sandbox-minimal:{minimal_tag}")

    s.start()
    wait_until(lambda: s.metrics()['sandboxd_adopted_total{type="minimal"}'] >= 2,
               60, what="adoption")
    wait_until(lambda: doomed not in s.containers() and
               stranger not in s.containers(), 60, what="removals")
    info = s.rpc("get_info", identity=a)
    assert info["state"] == "running"
    assert info["session_ctx_id"] == "keep"
    assert info["meta"]["note"] == "n1"
    assert info["runtime_token"] == info_a["runtime_token"]
    assert s.rpc("get_session_mapping", session_ctx_id="keep") == [a]
    assert s.shell(a, "cat /workspace/mark")["stdout"] == "before\n"
    assert s.rpc("get_info", identity=stopped)["state"] == "stopped"
    # The warm one is back in the pool; no extra one was made.
    assert s.metrics()['sandboxd_pool_ready{type="minimal"}'] == 1
    took = s.rpc("create_from_pool", sandbox_type="minimal")
    assert took in before
    # The dead one went as a release would.
    assert s.rpc("get_info", identity=doomed)["state"] == "released"


def test_storage_folder_keeps_and_restores(start_sandboxd, scratch):
    store = scratch("sbxd-store-")
    s = start_sandboxd(env={"STORAGE_FOLDER": store})
    a = s.rpc("create", sandbox_type="minimal", storage_path="proj/one")
    info = s.rpc("get_info", identity=a)
    assert info["storage_path"] == os.path.join(store, "proj/one")
    s.shell(a, "mkdir -p sub && echo saved > sub/f")
    s.rpc("release", identity=a)
    assert not os.path.exists(info["mount_dir"])
    with open(os.path.join(store, "proj/one/sub/f")) as f:
        assert f.read() == "saved\n"
    # A new sandbox with the same storage_path starts from it.
    b = s.rpc("create", sandbox_type="minimal", storage_path="proj/one")
    assert s.shell(b, "cat sub/f")["stdout"] == "saved\n"
    s.shell(b, "echo second > sub/f")
    s.rpc("release", identity=b)
    with open(os.path.join(store, "proj/one/sub/f")) as f:
        assert f.read() == "second\n"
    # Without a storage_path, a release still keeps it, by id.
    c = s.create()
    cid = s.rpc("get_info", identity=c)["session_id"]
    s.shell(c, "echo by-id > x")
    s.rpc("release", identity=c)
    with open(os.path.join(store, cid, "x")) as f:
        assert f.read() == "by-id\n"
    # Outside STORAGE_FOLDER: refused, nothing made.
    r = s.post("/create", {"sandbox_type": "minimal",
                           "storage_path": "../escape"})
    assert r.status_code == 400
    assert "STORAGE_FOLDER" in r.json()["detail"]
    assert s.containers() == {}


def test_mount_dir_inside_allowed_roots(start_sandboxd, scratch):
    root = scratch("sbxd-mounts-")
    s = start_sandboxd(env={"SANDBOXD_ALLOWED_MOUNT_DIRS": root})
    mine = os.path.join(root, "project")
    os.mkdir(mine)
    with open(os.path.join(mine, "given"), "w") as f:
        f.write("from host\n")
    a = s.rpc("create", sandbox_type="minimal", mount_dir=mine)
    assert s.shell(a, "cat given")["stdout"] == "from host\n"
    s.rpc("release", identity=a)
    # A caller's directory is never deleted.
    assert os.path.exists(os.path.join(mine, "given"))
    for bad in ["/etc", root, os.path.join(root, "..", "elsewhere"),
                "/tmp", "rel/../../x"]:
        r = s.post("/create", {"sandbox_type": "minimal",
                               "mount_dir": bad})
        assert r.status_code == 400, bad
        assert "mount_dir" in r.json()["detail"]
    # A symlink inside the root that points out of it.
    os.symlink("/etc", os.path.join(root, "link"))
    r = s.post("/create", {"sandbox_type": "minimal",
                           "mount_dir": os.path.join(root, "link")})
    assert r.status_code == 400
    assert s.containers() == {}
