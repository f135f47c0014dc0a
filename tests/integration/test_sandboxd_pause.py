"""Pause and resume (POST /v1/sandboxes/{id}/pause and /resume) through the
real dockerd's cgroup freezer, and what a paused sandbox means to sandboxd:
its processes keep their state, its agent takes no calls, health checks and
the idle reaper leave it alone, the state file and a restart keep it paused,
shutdown removes it. And one sample of what a sandbox uses (/stats: CPU
and memory from the engine, the disk from its agent)."""
import json
import os
import signal
import time

from sandboxd_fixtures import (minimal_tag, start_sandboxd,  # noqa: F401
                               wait_until)

# A counter the host reads in the workspace, written by a process that
# outlives the command that started it.
COUNTER = ("setsid sh -c 'echo $$ > /workspace/pid; i=0; "
           "while :; do i=$((i+1)); echo $i > /workspace/n.tmp; "
           "mv /workspace/n.tmp /workspace/n; sleep 0.05; done' "
           "</dev/null >/dev/null 2>&1 &")


def create(s, **kw):
    r = s.post("/v1/sandboxes", {"type": "minimal", **kw})
    assert r.status_code == 201, r.text
    return r.json()


def shell(s, name, command):
    r = s.post(f"/v1/sandboxes/{name}/agent/tools/run_shell_command",
               {"command": command})
    return r


def count(mount):
    with open(os.path.join(mount, "n")) as f:
        return int(f.read())


def test_pause_freezes_and_resume_goes_on(start_sandboxd):
    s = start_sandboxd()
    m = create(s)
    name, mount = m["container_name"], m["mount_dir"]
    assert shell(s, name, COUNTER).status_code == 200
    wait_until(lambda: os.path.exists(os.path.join(mount, "n")) and
               count(mount) > 3, 30, what="the counter")
    with open(os.path.join(mount, "pid")) as f:
        pid = f.read().strip()

    r = s.post(f"/v1/sandboxes/{name}/pause")
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "paused"
    assert s.containers()[name] == "paused"
    # Frozen: the counter stands still.
    frozen = count(mount)
    time.sleep(0.5)
    assert count(mount) == frozen
    # The sandbox says so everywhere; its agent takes no calls.
    assert s.get(f"/v1/sandboxes/{name}").json()["state"] == "paused"
    listed = s.get("/v1/sandboxes?state=paused").json()
    assert [x["container_name"] for x in listed["sandboxes"]] == [name]
    r = shell(s, name, "true")
    assert r.status_code == 409 and "paused" in r.json()["detail"], r.text
    assert s.rpc("get_status", identity=name) == "paused"
    assert s.rpc("check_health", identity=name) is False
    # Pausing again, starting it: 409, and it stays paused.
    r = s.post(f"/v1/sandboxes/{name}/pause")
    assert r.status_code == 409 and "already paused" in r.json()["detail"]
    r = s.post("/start", {"identity": name})
    assert r.status_code == 409 and "resume" in r.json()["detail"], r.text
    assert s.get(f"/v1/sandboxes/{name}").json()["state"] == "paused"
    assert s.metrics()['sandboxd_sandboxes{type="minimal",state="paused"}'] == 1

    r = s.post(f"/v1/sandboxes/{name}/resume")
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "running"
    # The same process goes on from where it was.
    wait_until(lambda: count(mount) > frozen, 30, what="the counter again")
    r = shell(s, name, f"kill -0 {pid} && echo alive")
    assert r.status_code == 200 and "alive" in r.text, r.text
    r = s.post(f"/v1/sandboxes/{name}/resume")
    assert r.status_code == 409 and "not paused" in r.json()["detail"]

    # A paused one stops, and is released by shutdown as any other.
    assert s.post(f"/v1/sandboxes/{name}/pause").status_code == 200
    assert s.rpc("stop", identity=name) is True
    assert s.get(f"/v1/sandboxes/{name}").json()["state"] == "stopped"
    other = create(s)["container_name"]
    assert s.post(f"/v1/sandboxes/{other}/pause").status_code == 200
    s.signal(signal.SIGTERM)
    assert s.wait_exit() == 0
    assert s.containers() == {}


def test_pause_answers(start_sandboxd):
    s = start_sandboxd(token="t0k")
    name = create(s)["container_name"]
    for path in ("pause", "resume", "stats"):
        r = s.session.post(f"{s.url}/v1/sandboxes/{name}/{path}",
                           headers={"Authorization": "Bearer wrong"})
        assert r.status_code == 401, r.text
        r = s.post(f"/v1/sandboxes/sandboxd-nope/{path}")
        assert r.status_code == 404, r.text
    assert s.get(f"/v1/sandboxes/{name}/pause").status_code == 405
    assert s.post(f"/v1/sandboxes/{name}/stats").status_code == 405
    assert s.post(f"/v1/sandboxes/{name}/pausex").status_code == 404
    s.delete(f"/v1/sandboxes/{name}")
    r = s.post(f"/v1/sandboxes/{name}/pause")
    assert r.status_code == 409 and "released" in r.json()["detail"]
    assert s.get(f"/v1/sandboxes/{name}/stats").status_code == 409


def test_paused_sandbox_is_left_alone_by_health_and_reaper(start_sandboxd):
    s = start_sandboxd(env={"HEARTBEAT_TIMEOUT": "5"})

    def state(name):
        # The list: a GET of the sandbox itself would count as activity.
        listed = s.get(f"/v1/sandboxes?all=true").json()["sandboxes"]
        return {x["container_name"]: x["state"] for x in listed}[name]

    paused = create(s, session_ctx_id="p")["container_name"]
    assert s.post(f"/v1/sandboxes/{paused}/pause").status_code == 200
    # Health rounds run: a killed sandbox is found unhealthy.
    killed = create(s)["container_name"]
    s.kill_container(killed)
    wait_until(lambda: state(killed) == "unhealthy", 30,
               what="the killed one found")
    # The reaper runs: an idle session's sandbox goes.
    idle = create(s, session_ctx_id="i")["container_name"]
    wait_until(lambda: state(idle) == "released", 30,
               what="the idle one reaped")
    # The paused one, idle for longer, is still there, paused, and
    # counted by no health failure.
    assert state(paused) == "paused"
    assert s.containers()[paused] == "paused"
    assert s.metrics()['sandboxd_health_failures_total{type="minimal"}'] == 1
    # Resumed, its session's clock starts again, and runs out.
    assert s.post(f"/v1/sandboxes/{paused}/resume").status_code == 200
    wait_until(lambda: state(paused) == "released", 30,
               what="the resumed one reaped", logs=[s])


def test_restart_keeps_it_paused(start_sandboxd):
    s = start_sandboxd(env={"AUTO_CLEANUP": "false"})
    m = create(s, session_ctx_id="keep")
    name = m["container_name"]
    assert shell(s, name, "echo kept > /workspace/mark").status_code == 200
    assert s.post(f"/v1/sandboxes/{name}/pause").status_code == 200
    wait_until(lambda: '"state":"paused"' in open(
        os.path.join(s.state_dir, "state.json")).read(), 10,
        what="the state file")
    s.signal(signal.SIGTERM)
    assert s.wait_exit() == 0
    with open(os.path.join(s.state_dir, "state.json")) as f:
        saved = {r["name"]: r for r in json.load(f)["sandboxes"]}
    assert saved[name]["state"] == "paused"
    assert s.containers()[name] == "paused"

    s.start()
    wait_until(lambda: s.metrics()['sandboxd_adopted_total{type="minimal"}']
               == 1, 60, what="adoption")
    info = s.get(f"/v1/sandboxes/{name}").json()
    assert info["state"] == "paused"
    assert info["runtime_token"] == m["runtime_token"]
    assert s.containers()[name] == "paused"
    r = s.post(f"/v1/sandboxes/{name}/resume")
    assert r.status_code == 200, r.text
    r = shell(s, name, "cat /workspace/mark")
    assert r.status_code == 200 and "kept" in r.text, r.text
    s.delete(f"/v1/sandboxes/{name}")


def test_stats(start_sandboxd):
    s = start_sandboxd()
    name = create(s)["container_name"]
    assert shell(s, name, "setsid sh -c 'while :; do :; done' "
                 "</dev/null >/dev/null 2>&1 &").status_code == 200
    r = s.get(f"/v1/sandboxes/{name}/stats")
    assert r.status_code == 200, r.text
    first = r.json()
    # The minimal type: half a CPU (one, counted whole), 256 MiB.
    assert first["cpu_count"] == 1
    assert first["mem_total"] == 256 * 1024 * 1024
    assert 0 < first["mem_used"] <= first["mem_total"]
    assert 0 <= first["cpu_used_pct"] <= 100
    # Its root file system, as its agent's statvfs has it.
    assert 0 < first["disk_used"] <= first["disk_total"], first
    # The busy loop shows in the next sample, also while paused (the
    # engine's count is what it used before).
    wait_until(lambda: s.get(f"/v1/sandboxes/{name}/stats").json()
               ["cpu_used_pct"] > 0, 30, what="CPU use")
    assert s.post(f"/v1/sandboxes/{name}/pause").status_code == 200
    paused = s.get(f"/v1/sandboxes/{name}/stats")
    assert paused.status_code == 200
    # Its agent frozen, the disk is as last sampled.
    assert paused.json()["disk_total"] == first["disk_total"]
