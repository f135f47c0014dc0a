#!/usr/bin/python3
"""Many sandboxes through one sandboxd: `make test-scale` and the scale
figures of `make bench`.

  scale.py run N [options]
      Start sandboxd (AUTO_CLEANUP, no pool, containers named PREFIX...),
      create N sandboxes through POST /create, PARALLEL callers at once,
      each in its own session; call run_shell_command once in each; time
      GET /v1/sandboxes and /list_session_keys with all of them listed; take
      sandboxd's, dockerd's and the sandboxes' CPU over a few health rounds;
      then SIGTERM and time the shutdown. Prints the figures as k=v lines.
      --check: exit 1 unless every create and call succeeded, sandboxd
      exited 0 within 30 s and no container of its was left (the scale
      test). --baseline: then time Docker alone removing as many (see
      docker-rate) and let the shutdown take up to 1.25 times that when
      Docker itself cannot remove them in 30 s.
      --no-calls, --no-health, --no-shutdown leave those steps out (the
      bench's memory figure; sandboxd still removes its sandboxes at the
      end, untimed).
  scale.py docker-rate N [options]
      Docker alone, for comparison, through the Engine API as sandboxd
      calls it: N containers like minimal sandboxes, agents running,
      created and started PARALLEL at once, then force-removed RM_PARALLEL
      at once (as sandboxd's shutdown does on this engine); prints both
      rates.

Options: --type minimal, --tag TAG (RUNTIME_SANDBOX_IMAGE_TAG; default: the
image of this tree's agent, as the tests tag it, built when missing: only
for minimal), --parallel
16, --rm-parallel (0: as sandboxd's shutdown on this engine, 32 or 1 on a
Docker before 20.10.27), --marks 0,250,500 (create rate after that many were
live, over --window 50 creates), --health-interval 5, --health-rounds 4,
--prefix sbxscale- (containers made here; leftovers with it are removed at
the end, whatever happened), --sandboxd supervisor/sandboxd, --env K=V
(more of sandboxd's settings; repeatable), --backend docker|crun
(CONTAINER_DEPLOYMENT; with crun the Docker-only figures, the health
round's CPU and the Docker baseline, are left out).

Only 127.0.0.1, unix sockets and containers made here are reached.
"""
import argparse
import http.client
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

TICK = os.sysconf("SC_CLK_TCK")


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Client:
    """One keep-alive connection to sandboxd per thread."""

    def __init__(self, port):
        self.port = port
        self.conn = None

    def request(self, method, path, body=None, timeout=900):
        data = json.dumps(body).encode() if body is not None else None
        for attempt in (0, 1):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(
                    "127.0.0.1", self.port, timeout=timeout)
            try:
                self.conn.request(method, path, body=data, headers={
                    "Content-Type": "application/json"} if data else {})
                r = self.conn.getresponse()
                return r.status, r.read()
            except (ConnectionError, http.client.HTTPException):
                self.conn.close()
                self.conn = None
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def rpc(self, method, **kw):
        status, body = self.request("POST", "/" + method, kw)
        if status != 200:
            raise RuntimeError(f"{method}: HTTP {status}: {body[:300]!r}")
        return json.loads(body)["data"]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def cpu_seconds(pid):
    """utime + stime of a process, seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def containers_cpu(ids):
    """CPU of these containers (cgroup v1 cpuacct, else v2), seconds."""
    total = 0
    for cid in ids:
        for path in (f"/sys/fs/cgroup/cpuacct/docker/{cid}/cpuacct.usage",
                     f"/sys/fs/cgroup/system.slice/docker-{cid}.scope/"
                     "cpu.stat"):
            try:
                with open(path) as f:
                    text = f.read()
            except OSError:
                continue
            if path.endswith("cpuacct.usage"):
                total += int(text) / 1e9
            else:
                for line in text.splitlines():
                    if line.startswith("usage_usec "):
                        total += int(line.split()[1]) / 1e6
            break
    return total


def host_used_mib():
    m = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, v = line.split(":")
            m[k] = int(v.split()[0])
    return (m["MemTotal"] - m["MemAvailable"]) / 1024


def pidof(name):
    out = subprocess.run(["pidof", name], capture_output=True, text=True)
    pids = out.stdout.split()
    return int(pids[0]) if pids else None


def docker_ids(prefix, running=False):
    out = subprocess.run(
        ["docker", "ps", "-q" if running else "-aq", "--no-trunc", "--filter",
         f"name=^/{prefix}"],
        capture_output=True, text=True, check=True, timeout=300)
    return out.stdout.split()


def crun_names(workdir):
    """The crun sandboxes of a sandboxd of this run: every directory of
    its own and every container of its crun root."""
    st = os.path.join(workdir, "st", "crun")
    names = set()
    if os.path.isdir(os.path.join(st, "sandboxes")):
        names |= set(os.listdir(os.path.join(st, "sandboxes")))
    if os.path.isdir(os.path.join(st, "state")):
        out = subprocess.run(["crun", "--root", os.path.join(st, "state"),
                              "list", "-q"], capture_output=True, text=True)
        names |= set(out.stdout.split())
    return sorted(names)


def ours(a, workdir):
    return crun_names(workdir) if a.backend == "crun" else \
        docker_ids(a.prefix)


def remove_leftovers(a, workdir):
    """Remove what is left of ours; how many are still there."""
    if a.backend == "crun":
        names = crun_names(workdir)
        for n in names:
            subprocess.run(["crun", "--root", os.path.join(
                workdir, "st", "crun", "state"), "delete", "--force", n],
                capture_output=True, timeout=120)
            shutil.rmtree(os.path.join(workdir, "st", "crun", "sandboxes",
                                       n), ignore_errors=True)
        return len(names) - len(crun_names(workdir))
    prefix = a.prefix
    ids = docker_ids(prefix)
    if ids:
        log(f"removing {len(ids)} leftover containers named {prefix}*")
        for i in range(0, len(ids), 100):
            try:
                subprocess.run(["docker", "rm", "-f", *ids[i:i + 100]],
                               capture_output=True, timeout=600)
            except subprocess.TimeoutExpired:
                log("docker rm -f did not finish in 600 s")
    left = docker_ids(prefix)
    if left:
        log(f"{len(left)} containers named {prefix}* are still there")
    return len(ids) - len(left)


_docker_local = threading.local()


def docker_api(method, path, body=None, timeout=600):
    """One Engine API call over Docker's unix socket (a keep-alive
    connection per thread): (status, bytes)."""
    conn = getattr(_docker_local, "conn", None)
    reused = conn is not None
    if conn is None:
        conn = http.client.HTTPConnection("localhost", timeout=timeout)
        sock = socket.socket(socket.AF_UNIX)
        sock.settimeout(timeout)
        sock.connect("/var/run/docker.sock")
        conn.sock = sock
        _docker_local.conn = conn
    data = json.dumps(body).encode() if body is not None else None
    try:
        conn.request(method, path, data, {"Content-Type": "application/json"}
                     if data is not None else {})
        r = conn.getresponse()
        return r.status, r.read()
    except (BrokenPipeError, ConnectionResetError,
            http.client.RemoteDisconnected):
        # dockerd closes a connection idle for a while: a kept one that
        # fails before any answer is tried again once on a new one.
        _docker_local.conn = None
        if not reused:
            raise
        return docker_api(method, path, body, timeout)
    except (OSError, http.client.HTTPException):
        _docker_local.conn = None
        raise


def docker_get(path):
    """GET path from the Docker Engine API: bytes."""
    return docker_api("GET", path)[1]


def docker_list_cost(instance, dockerd, calls=10):
    """dockerd's CPU and the wall time of one list of this instance's
    containers: all of them (as a health round asked before) and only
    those not running."""
    import urllib.parse
    label = f"io.agentscope.sandboxd.instance={instance}"
    out = {}
    for what, filters in (
            ("all", {"label": [label]}),
            ("not_running", {"label": [label], "status": [
                "created", "restarting", "removing", "paused", "exited",
                "dead"]})):
        path = "/containers/json?all=1&filters=" + urllib.parse.quote(
            json.dumps(filters))
        d0, t0 = cpu_seconds(dockerd), time.monotonic()
        for _ in range(calls):
            size = len(docker_get(path))
        out[f"docker_list_{what}_ms"] = round(
            (time.monotonic() - t0) * 1e3 / calls, 1)
        out[f"docker_list_{what}_dockerd_cpu_ms"] = round(
            (cpu_seconds(dockerd) - d0) * 1e3 / calls, 1)
        out[f"docker_list_{what}_bytes"] = size
    return out


def percentile(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]


def time_requests(port, method, path, body, n=20):
    c = Client(port)
    c.request(method, path, body)       # warm: connection and caches
    ms = []
    size = 0
    for _ in range(n):
        t0 = time.monotonic()
        status, out = c.request(method, path, body)
        ms.append((time.monotonic() - t0) * 1e3)
        if status != 200:
            raise RuntimeError(f"{path}: HTTP {status}")
        size = len(out)
    return statistics.median(ms), percentile(ms, 90), size


def start_sandboxd(a, workdir):
    port = free_port()
    env = {k: v for k, v in os.environ.items()
           if k in ("PATH", "HOME", "LANG", "DOCKER_HOST")}
    env.update({
        "CONTAINER_DEPLOYMENT": a.backend,
        "RUNTIME_SANDBOX_IMAGE_TAG": a.tag,
        "DEFAULT_SANDBOX_TYPE": a.type,
        "POOL_SIZE": "0",
        "AUTO_CLEANUP": "true",
        # Creating 1000 takes longer than the default 300 s: the first
        # sessions would be reaped as idle before the calls.
        "HEARTBEAT_TIMEOUT": "0",
        "CONTAINER_PREFIX_KEY": a.prefix,
        "SANDBOXD_STATE_DIR": os.path.join(workdir, "st"),
        "SANDBOXD_HEALTH_INTERVAL": str(a.health_interval),
        # The scale test times the whole removal, however long Docker
        # takes; the default (80 s) would stop short and exit 1.
        "SANDBOXD_SHUTDOWN_TIMEOUT": "1800",
    })
    env.update(kv.split("=", 1) for kv in a.env)
    logf = open(os.path.join(workdir, "sandboxd.log"), "wb")
    proc = subprocess.Popen([os.path.abspath(a.sandboxd), "--port",
                             str(port)], env=env, cwd=workdir, stdout=logf,
                            stderr=subprocess.STDOUT)
    c = Client(port)
    for _ in range(1500):
        if proc.poll() is not None:
            break
        try:
            if c.request("GET", "/health", timeout=2)[0] == 200:
                return proc, port
        except OSError:
            pass
        time.sleep(0.02)
    raise RuntimeError("sandboxd did not start; see " + logf.name)


def run(a):
    workdir = tempfile.mkdtemp(prefix="sbxscale-", dir="/tmp")
    out = {}
    ok = True
    proc = None
    try:
        mem0 = host_used_mib()
        proc, port = start_sandboxd(a, workdir)
        log(f"sandboxd pid {proc.pid} on port {port}, log "
            f"{workdir}/sandboxd.log; creating {a.n} {a.type} sandboxes, "
            f"{a.parallel} at once")

        clients = {}

        def client():
            import threading
            t = threading.get_ident()
            if t not in clients:
                clients[t] = Client(port)
            return clients[t]

        done_at = []
        failures = []
        t_start = time.monotonic()

        def create(i):
            try:
                name = client().rpc("create", sandbox_type=a.type,
                                    meta={"session_ctx_id": f"scale-{i}"})
            except Exception as e:      # noqa: BLE001 - counted, reported
                name = None
                failures.append(str(e)[:300])
            if name is None and not failures:
                failures.append("create answered null")
            done_at.append(time.monotonic() - t_start)
            if len(done_at) % 100 == 0:
                log(f"  {len(done_at)} of {a.n} created "
                    f"({time.monotonic() - t_start:.0f} s)")
            return name

        with ThreadPoolExecutor(a.parallel) as ex:
            names = list(ex.map(create, range(a.n)))
        t_create = time.monotonic() - t_start
        names_ok = [x for x in names if x]
        out["created"] = len(names_ok)
        out["create_failures"] = a.n - len(names_ok)
        out["create_all_s"] = round(t_create, 1)
        out["create_per_s"] = round(a.n / t_create, 2)
        if failures:
            log(f"create failures ({len(failures)}): {failures[:3]}")
            ok = False
        done_at.sort()
        for mark in a.marks:
            if mark + a.window <= len(done_at):
                t0 = done_at[mark - 1] if mark > 0 else 0.0
                t1 = done_at[mark + a.window - 1]
                out[f"create_rate_at_{mark}_per_s"] = round(
                    a.window / (t1 - t0), 2)
        time.sleep(2)
        out["host_mem_per_sandbox_mib"] = round(
            (host_used_mib() - mem0) / max(1, len(names_ok)), 2)
        log(f"created {len(names_ok)} in {t_create:.1f} s")

        if not a.no_calls:
            def call(name):
                try:
                    r = client().rpc("call_tool", identity=name,
                                     tool_name="run_shell_command",
                                     arguments={"command": "echo ok"})
                except Exception as e:  # noqa: BLE001 - counted, reported
                    log(f"call to {name} failed: {str(e)[:300]}")
                    return False
                return any("ok" in c.get("text", "")
                           for c in r.get("content", []))
            t0 = time.monotonic()
            with ThreadPoolExecutor(a.parallel) as ex:
                answered = list(ex.map(call, names_ok))
            out["calls_answered"] = sum(answered)
            out["calls_s"] = round(time.monotonic() - t0, 2)
            if sum(answered) != len(names_ok):
                ok = False

            p50, p90, size = time_requests(port, "GET", "/v1/sandboxes",
                                           None)
            out["list_sandboxes_p50_ms"] = round(p50, 2)
            out["list_sandboxes_p90_ms"] = round(p90, 2)
            out["list_sandboxes_bytes"] = size
            p50, p90, size = time_requests(port, "POST", "/list_session_keys",
                                           {})
            out["list_session_keys_p50_ms"] = round(p50, 2)
            out["list_session_keys_p90_ms"] = round(p90, 2)

        if not a.no_health and a.backend == "docker":
            ids = docker_ids(a.prefix)
            dockerd = pidof("dockerd")
            window = a.health_interval * a.health_rounds
            log(f"CPU over {window:.0f} s ({a.health_rounds} health rounds)")
            s0, c0 = cpu_seconds(proc.pid), containers_cpu(ids)
            d0 = cpu_seconds(dockerd) if dockerd else 0
            time.sleep(window)
            s1, c1 = cpu_seconds(proc.pid), containers_cpu(ids)
            d1 = cpu_seconds(dockerd) if dockerd else 0
            out["health_round_sandboxd_cpu_ms"] = round(
                (s1 - s0) * 1e3 / a.health_rounds, 1)
            out["health_round_dockerd_cpu_ms"] = round(
                (d1 - d0) * 1e3 / a.health_rounds, 1)
            out["health_round_sandboxes_cpu_ms"] = round(
                (c1 - c0) * 1e3 / a.health_rounds, 1)
            if dockerd:
                with open(os.path.join(workdir, "st", "instance")) as f:
                    out.update(docker_list_cost(f.read().strip(), dockerd))
            with open(f"/proc/{proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        out["sandboxd_rss_mib"] = round(
                            int(line.split()[1]) / 1024, 1)

        if not a.no_shutdown:
            log("SIGTERM")
            t0 = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            try:
                rc = proc.wait(timeout=1800)
            except subprocess.TimeoutExpired:
                rc = "timeout"
            out["shutdown_s"] = round(time.monotonic() - t0, 1)
            out["shutdown_exit"] = rc
            left = ours(a, workdir)
            out["left_after_shutdown"] = len(left)
            if rc != 0 or left:
                ok = False
            with open(os.path.join(workdir, "sandboxd.log"), "rb") as f:
                lines = [x for x in f.read().decode(
                    errors="replace").splitlines() if "shutdown" in x]
            for line in lines[-4:]:
                log("  " + line)
            out["shutdown_within_30s"] = "yes" if out["shutdown_s"] <= 30 \
                else "no"
            if a.baseline and a.backend == "docker":
                # Docker alone removing as many, right after: the best
                # this Docker does here and now.
                out.update(docker_rate(a))
                out["shutdown_vs_docker"] = round(
                    out["shutdown_s"] / out["docker_rm_s"], 2)
                if out["shutdown_s"] > max(30, 1.25 * out["docker_rm_s"]):
                    ok = False
            elif out["shutdown_s"] > 30:
                ok = False
    except BaseException:
        ok = False      # the work directory (sandboxd's log) is kept
        raise
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=900)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        t0 = time.monotonic()
        n = remove_leftovers(a, workdir)
        if n:
            out["leftovers_removed"] = n
            out["leftovers_removed_s"] = round(time.monotonic() - t0, 1)
        if ok:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            log(f"kept {workdir} for a look")
    print(" ".join(f"{k}={v}" for k, v in out.items()), flush=True)
    if a.check and not ok:
        sys.exit(1)


def docker_rate(a):
    """Docker alone, through the Engine API as sandboxd calls it: each
    container like a minimal sandbox (network none, no Docker healthcheck,
    every capability dropped, its agent running: without a token it would
    exit at once and a removal of a stopped container is ten times
    cheaper), created and started PARALLEL at once; then all force-removed,
    RM_PARALLEL at once (sandboxd's SANDBOXD_SHUTDOWN_PARALLEL default)."""
    image = f"agentscope/runtime-sandbox-{a.type}:{a.tag}"
    names = [f"{a.prefix}dr-{i}" for i in range(a.n)]
    body = {"Image": image, "Env": ["SECRET_TOKEN=" + "x" * 32],
            "Cmd": ["--listen", "unix:/tmp/agent.sock"],
            "Labels": {"io.agentscope.sandboxd.scale": "docker-rate"},
            "StopTimeout": 2, "Healthcheck": {"Test": ["NONE"]},
            "HostConfig": {"NetworkMode": "none", "CapDrop": ["ALL"],
                           "SecurityOpt": ["no-new-privileges"]}}

    def one(name):
        status, out = docker_api("POST", f"/containers/create?name={name}",
                                 body)
        if status != 201:
            raise RuntimeError(f"create {name}: {status} {out[:200]!r}")
        cid = json.loads(out)["Id"]
        status, out = docker_api("POST", f"/containers/{cid}/start")
        if status != 204:
            raise RuntimeError(f"start {name}: {status} {out[:200]!r}")
        return cid

    def gone(cid):
        status, out = docker_api("DELETE", f"/containers/{cid}?force=1&v=1")
        if status != 204:
            raise RuntimeError(f"remove: {status} {out[:200]!r}")
    try:
        t0 = time.monotonic()
        with ThreadPoolExecutor(a.parallel) as ex:
            ids = list(ex.map(one, names))
        t_run = time.monotonic() - t0
        log(f"docker alone: {a.n} started in {t_run:.1f} s")
        time.sleep(2)
        running = docker_ids(a.prefix, running=True)
        if len(running) != a.n:
            raise RuntimeError(f"{a.n - len(running)} containers did not "
                               "keep running")
        t0 = time.monotonic()
        with ThreadPoolExecutor(a.rm_parallel) as ex:
            list(ex.map(gone, ids))
        t_rm = time.monotonic() - t0
        log(f"docker alone: {a.n} removed in {t_rm:.1f} s")
    finally:
        remove_leftovers(a, None)
    return {"docker_run_n": a.n, "docker_run_s": round(t_run, 1),
            "docker_run_per_s": round(a.n / t_run, 2),
            "docker_rm_s": round(t_rm, 1),
            "docker_rm_per_s": round(a.n / t_rm, 2),
            "docker_rm_parallel": a.rm_parallel}


def exits_may_deadlock(version):
    """sandboxd's rule (docker_exits_may_deadlock): an engine before
    20.10.27 deadlocks in libnetwork when two containers exit at once
    (moby/moby#46661)."""
    try:
        parts = [int(x) for x in version.split("+")[0].split(".")[:3]]
    except ValueError:
        return True
    if len(parts) < 2:
        return True
    major, minor, patch = (parts + [0])[:3]
    if major != 20:
        return major < 20
    return minor < 10 or (minor == 10 and patch < 27)


def auto_rm_parallel():
    """Docker alone removes as sandboxd's shutdown does on this engine
    (SANDBOXD_SHUTDOWN_PARALLEL auto): 32 at once, or one at a time."""
    version = json.loads(docker_get("/version")).get("Version", "")
    return 1 if exits_may_deadlock(version) else 32


def agent_tag(type_name):
    """The tests' tag of this tree's agent; builds the image if missing."""
    import hashlib
    with open("agent/sandbox-agent", "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    tag = "t-" + sha[:16]
    have = subprocess.run(
        ["docker", "image", "inspect", "--format",
         '{{index .Config.Labels "io.agentscope.sandboxd.agent-sha256"}}',
         f"agentscope/runtime-sandbox-{type_name}:{tag}"],
        capture_output=True, text=True).stdout.strip()
    if have != sha:
        subprocess.run(["tools/build-image", "--tag", tag, type_name],
                       check=True, stdout=sys.stderr)
    return tag


def main():
    p = argparse.ArgumentParser(usage=__doc__)
    p.add_argument("cmd", choices=("run", "docker-rate"))
    p.add_argument("n", type=int)
    p.add_argument("--type", default="minimal")
    p.add_argument("--tag")
    p.add_argument("--parallel", type=int, default=16)
    p.add_argument("--rm-parallel", type=int, default=0)
    p.add_argument("--baseline", action="store_true")
    p.add_argument("--marks", default="0,250,500")
    p.add_argument("--window", type=int, default=50)
    p.add_argument("--health-interval", type=float, default=5)
    p.add_argument("--health-rounds", type=int, default=4)
    p.add_argument("--prefix", default="sbxscale-")
    p.add_argument("--sandboxd", default="supervisor/sandboxd")
    p.add_argument("--env", action="append", default=[])
    p.add_argument("--check", action="store_true")
    p.add_argument("--no-calls", action="store_true")
    p.add_argument("--no-health", action="store_true")
    p.add_argument("--no-shutdown", action="store_true")
    p.add_argument("--backend", choices=("docker", "crun"), default="docker")
    a = p.parse_args()
    a.marks = [int(x) for x in a.marks.split(",") if x]
    if a.rm_parallel == 0 and a.backend == "docker":
        a.rm_parallel = auto_rm_parallel()
    if a.tag is None:
        a.tag = agent_tag(a.type)
    if a.cmd == "run":
        run(a)
    else:
        out = docker_rate(a)
        print(" ".join(f"{k}={v}" for k, v in out.items()), flush=True)


if __name__ == "__main__":
    main()
