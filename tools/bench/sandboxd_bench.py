#!/usr/bin/python3
"""Helpers of the sandboxd section of tools/bench/run: the figures that are
not one request type repeated (httplat measures those).

  sandboxd_bench.py wait-pool URL TYPE N [TIMEOUT]
      wait until the pool of TYPE holds N warm sandboxes
  sandboxd_bench.py cold URL IMAGE N DIR
      N cold creates through sandboxd (POST /create, answered once the agent
      is healthy), alternated with N bare `docker run`s of the same image
      timed to the agent's first /healthz 200 over the same kind of unix
      socket; prints sandboxd_p50_ms, bare_p50_ms, ratio, docker_cli_p50_ms
  sandboxd_bench.py versus-true URL TYPE IMAGE TRUE N
      N cold creates of TYPE through sandboxd (to healthy), alternated with
      N bare `docker run --rm --entrypoint TRUE IMAGE`: the images issue's
      target; prints sandboxd_p50_ms, true_p50_ms, ratio
  sandboxd_bench.py fill URL TYPE N PARALLEL
      create N sandboxes, PARALLEL at a time; prints created=N
  sandboxd_bench.py bridge-ip NAME
      the container's address on Docker's bridge

Only 127.0.0.1, unix sockets and containers made here are ever reached.
Bare containers carry the label io.agentscope.sandboxd.bench=1 so the
caller can remove them whatever happens.
"""
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

TOKEN = "bench-" + os.urandom(8).hex()


def post(url, path, body, timeout=600):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.load(r)


def metrics(url):
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


def wait_pool(url, type_name, n, timeout=600):
    deadline = time.time() + timeout
    key = f'sandboxd_pool_ready{{type="{type_name}"}}'
    while time.time() < deadline:
        if metrics(url).get(key, 0) >= n:
            return
        time.sleep(0.2)
    sys.exit(f"pool of {type_name} did not reach {n} in {timeout} s")


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=2)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(2)
        self.sock.connect(self.unix_path)


def healthy(sock_path):
    try:
        c = UnixConnection(sock_path)
        c.request("GET", "/healthz",
                  headers={"Authorization": f"Bearer {TOKEN}"})
        ok = c.getresponse().status == 200
        c.close()
        return ok
    except OSError:
        return False


def bare_run(image, workdir, i):
    """docker run of the image as sandboxd would run it, to healthy."""
    sock_dir = os.path.join(workdir, f"bare{i}")
    os.makedirs(sock_dir, exist_ok=True)
    sock = os.path.join(sock_dir, "agent.sock")
    t0 = time.monotonic()
    cid = subprocess.run(
        ["docker", "run", "-d", "--network", "none",
         "--label", "io.agentscope.sandboxd.bench=1",
         "-v", f"{sock_dir}:/run/sandbox-agent", "-e", f"SECRET_TOKEN={TOKEN}",
         image, "--listen", "unix:/run/sandbox-agent/agent.sock"],
        capture_output=True, text=True, check=True).stdout.strip()
    t_cli = time.monotonic()
    while not healthy(sock):
        if time.monotonic() - t0 > 60:
            sys.exit("a bare container did not become healthy in 60 s")
        time.sleep(0.005)
    t1 = time.monotonic()
    subprocess.run(["docker", "rm", "-f", cid], capture_output=True)
    return (t1 - t0) * 1e3, (t_cli - t0) * 1e3


def create_ms(url, type_name):
    """One cold create through sandboxd, answered once the agent is
    healthy, then released; its milliseconds."""
    t0 = time.monotonic()
    name = post(url, "/create", {"sandbox_type": type_name})["data"]
    ms = (time.monotonic() - t0) * 1e3
    if name is None:
        sys.exit(f"sandboxd could not create a {type_name} sandbox")
    post(url, "/release", {"identity": name})
    return ms


def cold(url, image, n, workdir):
    ours, bare, cli = [], [], []
    for i in range(n):
        ours.append(create_ms(url, "minimal"))
        b, c = bare_run(image, workdir, i)
        bare.append(b)
        cli.append(c)
    o, b = statistics.median(ours), statistics.median(bare)
    print(f"sandboxd_p50_ms={o:.0f} bare_p50_ms={b:.0f} ratio={o / b:.2f} "
          f"docker_cli_p50_ms={statistics.median(cli):.0f} n={n}")


def versus_true(url, type_name, image, true_bin, n):
    ours, bare = [], []
    for _ in range(n):
        ours.append(create_ms(url, type_name))
        t0 = time.monotonic()
        subprocess.run(["docker", "run", "--rm", "--network", "none",
                        "--label", "io.agentscope.sandboxd.bench=1",
                        "--entrypoint", true_bin, image],
                       capture_output=True, check=True)
        bare.append((time.monotonic() - t0) * 1e3)
    o, b = statistics.median(ours), statistics.median(bare)
    print(f"sandboxd_p50_ms={o:.0f} true_p50_ms={b:.0f} ratio={o / b:.2f} "
          f"n={n}")


def fill(url, type_name, n, parallel):
    def one(_):
        return post(url, "/create", {"sandbox_type": type_name})["data"]
    with ThreadPoolExecutor(parallel) as ex:
        names = list(ex.map(one, range(n)))
    made = [x for x in names if x]
    print(f"created={len(made)}")
    if len(made) != n:
        sys.exit(f"only {len(made)} of {n} sandboxes were created")


def bridge_ip(name):
    out = subprocess.run(["docker", "inspect", "--format",
                          "{{.NetworkSettings.IPAddress}}", name],
                         capture_output=True, text=True, check=True)
    print(out.stdout.strip())


def main(argv):
    cmd = argv[1] if len(argv) > 1 else ""
    if cmd == "wait-pool":
        wait_pool(argv[2], argv[3], int(argv[4]),
                  float(argv[5]) if len(argv) > 5 else 600)
    elif cmd == "cold":
        cold(argv[2], argv[3], int(argv[4]), argv[5])
    elif cmd == "versus-true":
        versus_true(argv[2], argv[3], argv[4], argv[5], int(argv[6]))
    elif cmd == "fill":
        fill(argv[2], argv[3], int(argv[4]), int(argv[5]))
    elif cmd == "bridge-ip":
        bridge_ip(argv[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
